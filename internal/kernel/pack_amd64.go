//go:build amd64 && !purego

package kernel

// The Go side of the vectorised packers, TransposeRound and RoundF32 (see
// the generator's pack.go and transpose.go). The AVX-512 kernels (F and
// BW) take whole matrices; the AVX2 ones take the full blocks and Go packs
// the edges with the reference packer, so both agree with it bit for bit.

// packKernels are the assembly packers of one ISA for one source type:
// t packs from the rows of Bᵀ, n from the rows of B. whole: they take
// whole matrices (AVX-512); else only the full blocks (AVX2).
type packKernels[T float32 | uint16] struct {
	t, n  func(dst []uint16, ldb int, src []T, ld, a, b int)
	whole bool
}

// run packs checked arguments with ks, conv (the scalar conversion)
// packing what the kernels leave.
func (ks packKernels[T]) run(conv func(T) uint16, dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool) {
	if ks.whole {
		pack512(ks, dst, ldb, p0, src, ld, k, n, transposed)
	} else {
		packFullBlocks(ks.t, ks.n, 16, conv, dst, ldb, p0, src, ld, k, n, transposed)
	}
}

// pack512 runs the AVX-512 kernels on checked arguments.
func pack512[T float32 | uint16](ks packKernels[T], dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool) {
	if k == 0 || n == 0 {
		return
	}
	d := dst[W*p0:]
	if transposed {
		ks.t(d, ldb, src, ld, n, k)
	} else {
		ks.n(d, ldb, src, ld, k, n)
	}
}

// setPackers fills the packing and rounding kernels of im with the best
// assembly for its ISA that this CPU runs, Go otherwise.
func setPackers(im *Impl, avx512 bool) {
	im.PackVNNIInto, im.PackVNNI16Into = PackVNNIInto, PackVNNI16Into
	im.TransposeRound, im.RoundF32 = transposeRoundGeneric, roundF32Generic

	var k16 packKernels[uint16]
	var kbf, kf packKernels[float32] // kf.t == nil: fp16 in Go
	roundBF, roundF := roundBF16AVX2, roundF16AVX2
	switch {
	case avx512 && hasAVX512BW:
		k16 = packKernels[uint16]{packT16AVX512, packN16AVX512, true}
		kbf = packKernels[float32]{packTBF16AVX512, packNBF16AVX512, true}
		kf = packKernels[float32]{packTF16AVX512, packNF16AVX512, true}
		roundBF, roundF = roundBF16AVX512, roundF16AVX512
		im.TransposeRound = func(dst []uint16, ldd int, src []float32, lds, rows, cols int, e Elem) {
			checkTransposeRound(len(dst), ldd, len(src), lds, rows, cols, e)
			if rows == 0 || cols == 0 {
				return
			}
			if e == F16 {
				transposeRoundF16AVX512(dst, ldd, src, lds, rows, cols)
			} else {
				transposeRoundBF16AVX512(dst, ldd, src, lds, rows, cols)
			}
		}
	case avx512:
		return // AVX512F without BW: the word instructions are missing
	default:
		k16 = packKernels[uint16]{packT16AVX2, packN16AVX2, false}
		kbf = packKernels[float32]{packTBF16AVX2, packNBF16AVX2, false}
		if hasF16C {
			kf = packKernels[float32]{packTF16AVX2, packNF16AVX2, false}
		}
	}
	im.PackVNNI16Into = func(dst []uint16, ldb, p0 int, src []uint16, ld, k, n int, transposed bool) {
		checkPack("PackVNNI16Into", len(dst), ldb, p0, len(src), ld, k, n, transposed)
		k16.run(copy16, dst, ldb, p0, src, ld, k, n, transposed)
	}
	im.PackVNNIInto = func(dst []uint16, ldb, p0 int, src []float32, ld, k, n int, transposed bool, e Elem) {
		checkPack("PackVNNIInto", len(dst), ldb, p0, len(src), ld, k, n, transposed)
		checkElem(e)
		switch {
		case e == BF16:
			kbf.run(F32ToBF16, dst, ldb, p0, src, ld, k, n, transposed)
		case kf.t != nil:
			kf.run(F32ToF16, dst, ldb, p0, src, ld, k, n, transposed)
		default:
			packVNNIGo(dst, ldb, p0, src, ld, k, n, transposed, F32ToF16)
		}
	}
	haveF16 := avx512 || hasF16C
	im.RoundF32 = func(x []float32, e Elem) {
		checkElem(e)
		n := len(x) &^ 15
		switch {
		case n == 0:
		case e == BF16:
			roundBF(x[:n])
		case haveF16:
			roundF(x[:n])
		default:
			n = 0
		}
		roundF32Generic(x[n:], e)
	}
}
