//go:build !purego

package kernel

// The converters and RoundF32 of the NEON implementation (see the
// generator's convert.go): the assembly converts the largest multiple of
// 16 elements, Go the tail, so nothing outside the slices is touched.

// wrapConvNEON returns a converter that checks that dst is at least as long
// as src, then runs f on the largest multiple of 16 elements and tail on
// the rest.
func wrapConvNEON[D, S any](f, tail func(dst []D, src []S)) func(dst []D, src []S) {
	return func(dst []D, src []S) {
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

func setConvertersNEON(im *Impl) {
	im.BF16ToF32 = wrapConvNEON(bf16ToF32NEON, bf16ToF32Generic)
	im.F16ToF32 = wrapConvNEON(f16ToF32NEON, f16ToF32Generic)
	im.F32ToBF16 = wrapConvNEON(f32ToBF16NEON, f32ToBF16Generic)
	im.F32ToF16 = wrapConvNEON(f32ToF16NEON, f32ToF16Generic)
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
