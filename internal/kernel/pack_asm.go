//go:build (amd64 || arm64) && !purego

package kernel

// packKernels are the assembly packers of one ISA for one source type:
// t packs from the rows of Bᵀ, n from the rows of B. kStep 0: they take
// whole matrices (AVX-512); else only the full blocks, k of Bᵀ in steps
// of kStep (AVX2 16, NEON 8), and packFullBlocks packs the edges.
type packKernels[T float32 | uint16] struct {
	t, n  func(dst []uint16, ldb int, src []T, ld, a, b int)
	kStep int
}

// run packs checked arguments with ks, conv (the scalar conversion)
// packing what the kernels leave.
func (ks packKernels[T]) run(conv func(T) uint16, dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool) {
	if ks.kStep == 0 {
		packWhole(ks, dst, ldb, p0, src, ld, k, n, transposed)
	} else {
		packFullBlocks(ks.t, ks.n, ks.kStep, conv, dst, ldb, p0, src, ld, k, n, transposed)
	}
}

// packWhole runs whole-matrix kernels (AVX-512) on checked arguments.
func packWhole[T float32 | uint16](ks packKernels[T], dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool) {
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

// setPackVNNI sets im's PackVNNI16Into to k16 and its PackVNNIInto to kbf
// for BF16 and kf for F16, or the reference packer where kf.t is nil (no
// fp16 kernels), behind the argument checks.
func setPackVNNI(im *Impl, k16 packKernels[uint16], kbf, kf packKernels[float32]) {
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
}
