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

// setExpSumBF16 sets im.ExpSumBF16 after setConverters: the exponential
// with VCVTNEPS2BF16 in its store where the CPU has AVX512_BF16 (avx512
// only), else im's ExpSum followed by its F32ToBF16.
func setExpSumBF16(im *Impl, avx512 bool) {
	im.ExpSumBF16 = expSumThenBF16(im.ExpSum, im.F32ToBF16)
	if avx512 && hasAVX512BF16 {
		im.ExpSumBF16 = wrapExpSumBF16(expSumBF16AVX512BF16)
	}
}
