//go:build amd64 && !purego

package kernel

// The assembly converters (see the generator's convert.go) behind
// wrapConv (wrap_asm.go): the assembly converts the largest multiple of 16
// elements, Go the tail, so nothing outside the slices is ever read or
// written.

// setConverters fills the conversion kernels of im with the best assembly
// for its ISA ("avx512" or "avx2") that this CPU runs, Go otherwise.
func setConverters(im *Impl, avx512 bool) {
	im.BF16ToF32 = wrapConv(bf16ToF32AVX2, bf16ToF32Generic)
	im.F32ToBF16 = wrapConv(f32ToBF16AVX2, f32ToBF16Generic)
	// Without F16C, Go converts the blocks too.
	im.F16ToF32 = wrapConv(f16ToF32Generic, f16ToF32Generic)
	im.F32ToF16 = wrapConv(f32ToF16Generic, f32ToF16Generic)
	if hasF16C {
		im.F16ToF32 = wrapConv(f16ToF32AVX2, f16ToF32Generic)
		im.F32ToF16 = wrapConv(f32ToF16AVX2, f32ToF16Generic)
	}
	if !avx512 {
		return
	}
	// VCVTPH2PS/VCVTPS2PH on zmm are AVX512F; the word moves need BW.
	im.F16ToF32 = wrapConv(f16ToF32AVX512, f16ToF32Generic)
	im.F32ToF16 = wrapConv(f32ToF16AVX512, f32ToF16Generic)
	if hasAVX512BW {
		im.BF16ToF32 = wrapConv(bf16ToF32AVX512, bf16ToF32Generic)
	}
	im.F32ToBF16 = wrapConv(f32ToBF16AVX512, f32ToBF16Generic)
	if hasAVX512BF16 {
		im.F32ToBF16 = wrapConv(f32ToBF16AVX512BF16, f32ToBF16Generic)
	}
}

// setExpSumBF16 sets im.ExpSumBF16 and im.ScaleBF16 after setConverters:
// the exponential and the scale with VCVTNEPS2BF16 in their stores where
// the CPU has AVX512_BF16 (avx512 only), else im's ExpSum or Scale
// followed by its F32ToBF16.
func setExpSumBF16(im *Impl, avx512 bool) {
	im.ExpSumBF16 = expSumThenBF16(im.ExpSum, im.F32ToBF16)
	im.ScaleBF16 = scaleThenBF16(im.Scale, im.F32ToBF16)
	if avx512 && hasAVX512BF16 {
		im.ExpSumBF16 = wrapExpSumBF16(expSumBF16AVX512BF16)
		im.shortExpBF16 = true
		im.ScaleBF16 = wrapScaleBF16(scaleBF16AVX512BF16)
	}
}

// wrapScaleBF16 checks the preconditions of Impl.ScaleBF16 (len(x) a
// multiple of W, dst no longer) and runs the assembly f on the largest
// multiple of 16 elements of dst and Go on the rest: the same float32
// product, rounded by the scalar conversion (bit for bit F32ToBF16's).
func wrapScaleBF16(f func(dst []uint16, x []float32, a float32)) func(dst []uint16, x []float32, a float32) {
	return func(dst []uint16, x []float32, a float32) {
		checkWidth(len(x))
		if len(dst) > len(x) {
			bad("ScaleBF16: dst longer than x")
		}
		n := len(dst) &^ 15
		if n > 0 {
			f(dst[:n], x[:n], a)
		}
		for i := n; i < len(dst); i++ {
			dst[i] = F32ToBF16(x[i] * a)
		}
	}
}
