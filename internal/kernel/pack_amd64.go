//go:build amd64 && !purego

package kernel

// The Go side of the vectorised packers, TransposeRound and RoundF32 (see
// the generator's pack.go and transpose.go; packKernels in pack_asm.go).
// The AVX-512 kernels (F and BW) take whole matrices; the AVX2 ones take
// the full blocks and Go packs the edges with the reference packer, so
// both agree with it bit for bit.

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
		k16 = packKernels[uint16]{packT16AVX512, packN16AVX512, 0}
		kbf = packKernels[float32]{packTBF16AVX512, packNBF16AVX512, 0}
		kf = packKernels[float32]{packTF16AVX512, packNF16AVX512, 0}
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
		k16 = packKernels[uint16]{packT16AVX2, packN16AVX2, 16}
		kbf = packKernels[float32]{packTBF16AVX2, packNBF16AVX2, 16}
		if hasF16C {
			kf = packKernels[float32]{packTF16AVX2, packNF16AVX2, 16}
		}
	}
	setPackVNNI(im, k16, kbf, kf)
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
