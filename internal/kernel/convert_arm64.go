//go:build !purego

package kernel

// The converters and RoundF32 of the NEON implementation (see the
// generator's convert.go), behind wrapConv (wrap_asm.go): the assembly
// converts the largest multiple of 16 elements, Go the tail, so nothing
// outside the slices is touched.

func setConvertersNEON(im *Impl) {
	im.BF16ToF32 = wrapConv(bf16ToF32NEON, bf16ToF32Generic)
	im.F16ToF32 = wrapConv(f16ToF32NEON, f16ToF32Generic)
	im.F32ToBF16 = wrapConv(f32ToBF16NEON, f32ToBF16Generic)
	im.F32ToF16 = wrapConv(f32ToF16NEON, f32ToF16Generic)
	im.RoundF32 = func(x []float32, e Elem) {
		checkElem(e)
		n := len(x) &^ 15
		if n > 0 {
			if e == BF16 {
				roundBF16NEON(x[:n])
			} else {
				roundF16NEON(x[:n])
			}
		}
		roundF32Generic(x[n:], e)
	}
}
