package kernel

// Wrappers of the assembly converters (see the generator's convert.go):
// the assembly converts the largest multiple of 16 elements, Go the tail,
// so nothing outside the slices is ever read or written.

func wrapToF32(f func(dst []float32, src []uint16), tail func(dst []float32, src []uint16)) func(dst []float32, src []uint16) {
	return func(dst []float32, src []uint16) {
		if len(dst) < len(src) {
			bad("conversion: dst shorter than src")
		}
		n := len(src) &^ 15
		if n > 0 {
			f(dst[:n], src[:n])
		}
		tail(dst[n:], src[n:])
	}
}

func wrapFromF32(f func(dst []uint16, src []float32), tail func(dst []uint16, src []float32)) func(dst []uint16, src []float32) {
	return func(dst []uint16, src []float32) {
		if len(dst) < len(src) {
			bad("conversion: dst shorter than src")
		}
		n := len(src) &^ 15
		if n > 0 {
			f(dst[:n], src[:n])
		}
		tail(dst[n:], src[n:])
	}
}

// setConverters fills the conversion kernels of im with the best assembly
// for its ISA ("avx512" or "avx2") that this CPU runs, Go otherwise.
func setConverters(im *Impl, avx512 bool) {
	im.BF16ToF32 = wrapToF32(bf16ToF32AVX2, bf16ToF32Generic)
	im.F32ToBF16 = wrapFromF32(f32ToBF16AVX2, f32ToBF16Generic)
	im.F16ToF32, im.F32ToF16 = bulkF16Generic()
	if hasF16C {
		im.F16ToF32 = wrapToF32(f16ToF32AVX2, f16ToF32Generic)
		im.F32ToF16 = wrapFromF32(f32ToF16AVX2, f32ToF16Generic)
	}
	if !avx512 {
		return
	}
	// VCVTPH2PS/VCVTPS2PH on zmm are AVX512F; the word moves need BW.
	im.F16ToF32 = wrapToF32(f16ToF32AVX512, f16ToF32Generic)
	im.F32ToF16 = wrapFromF32(f32ToF16AVX512, f32ToF16Generic)
	if hasAVX512BW {
		im.BF16ToF32 = wrapToF32(bf16ToF32AVX512, bf16ToF32Generic)
	}
	im.F32ToBF16 = wrapFromF32(f32ToBF16AVX512, f32ToBF16Generic)
	if hasAVX512BF16 {
		im.F32ToBF16 = wrapFromF32(f32ToBF16AVX512BF16, f32ToBF16Generic)
	}
}

func bulkF16Generic() (func(dst []float32, src []uint16), func(dst []uint16, src []float32)) {
	return func(dst []float32, src []uint16) {
			if len(dst) < len(src) {
				bad("conversion: dst shorter than src")
			}
			f16ToF32Generic(dst, src)
		}, func(dst []uint16, src []float32) {
			if len(dst) < len(src) {
				bad("conversion: dst shorter than src")
			}
			f32ToF16Generic(dst, src)
		}
}
