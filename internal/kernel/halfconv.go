package kernel

import "math"

// Scalar conversions between float32 and the two 16-bit floating-point
// formats, bfloat16 (1 sign, 8 exponent, 7 mantissa bits: the top half of a
// float32) and IEEE 754 binary16 "fp16" (1 sign, 5 exponent, 10 mantissa
// bits). Every bulk converter of every implementation gives exactly these
// results, bit for bit.
//
// Rounding is to nearest, ties to even, including into and within the
// subnormal range; values beyond the largest finite number round to ±Inf
// as IEEE 754 prescribes. A NaN stays a NaN of the same sign: its payload
// is truncated to the top bits that fit and the quiet bit is set (what the
// x86 conversion instructions VCVTNEPS2BF16 and VCVTPS2PH produce).

// Bit patterns of the conversions (the assembly converters read the same
// from a table, which a test compares with these).
const (
	f32AbsMask    = 0x7fffffff // all but the sign
	f32ExpMask    = 0x7f800000 // the exponent field; the bits of +Inf
	f32MantMask   = 0x007fffff // the mantissa field
	bf16RoundBias = 0x7fff     // added with the lowest kept bit: rounding to nearest even
	bf16QuietBit  = 0x40       // the quiet bit of a bfloat16 NaN
)

// F32ToBF16 rounds f to the nearest bfloat16 (ties to even).
func F32ToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&f32AbsMask > f32ExpMask { // NaN: keep the sign and top payload, set the quiet bit
		return uint16(x>>16) | bf16QuietBit
	}
	// Adding 0x7fff plus the lowest kept bit and truncating rounds to
	// nearest even; a carry out of the mantissa increments the exponent,
	// which is also right at the top of the range (rounding to Inf).
	return uint16((x + bf16RoundBias + (x>>16)&1) >> 16)
}

// BF16ToF32 returns the float32 value of the bfloat16 h (exact: h is the top
// half of that float32; a signalling NaN stays signalling).
func BF16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToF16 rounds f to the nearest IEEE binary16 (ties to even). Magnitudes
// of 65520 and above become ±Inf; results below 2^-14 are subnormal, down to
// ±0 for magnitudes of at most 2^-25.
func F32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	a := x & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(a>>13)&0x3ff
	case a >= 0x477ff000: // ≥ 65520 = max (65504) + half an ulp, ties to Inf (even)
		return sign | 0x7c00
	case a >= 0x38800000: // ≥ 2^-14: normal
		// Rebias the exponent (127 → 15) and round the mantissa from 23 to
		// 10 bits as in F32ToBF16; a carry increments the exponent.
		r := a - (127-15)<<23
		return sign | uint16((r+0xfff+(r>>13)&1)>>13)
	default: // subnormal or zero: a multiple of 2^-24
		e := a >> 23
		if e < 102 { // < 2^-25: rounds to zero (a == 2^-25 is handled below)
			return sign
		}
		// value = m·2^(e-150) = (m >> s)·2^-24 with s = 126-e in 14..24.
		m := a&0x7fffff | 0x800000
		s := 126 - e
		q := m >> s
		rem := m & (1<<s - 1)
		half := uint32(1) << (s - 1)
		if rem > half || rem == half && q&1 == 1 {
			q++ // may carry into the exponent field: 2^-14, correctly
		}
		return sign | uint16(q)
	}
}

// F16ToF32 returns the float32 value of the IEEE binary16 h (exact). A NaN
// keeps its sign and payload and comes back quiet, as VCVTPH2PS does.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch {
	case e == 0x1f && m == 0:
		return math.Float32frombits(sign | 0x7f800000)
	case e == 0x1f:
		return math.Float32frombits(sign | 0x7fc00000 | m<<13)
	case e == 0:
		// m·2^-24, exact in float32 (m < 2^10).
		v := float32(m) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (e+127-15)<<23 | m<<13)
}

// The pure-Go bulk converters; dst is at least as long as src.

func bf16ToF32Generic(dst []float32, src []uint16) { convertEach(dst, src, BF16ToF32) }
func f16ToF32Generic(dst []float32, src []uint16)  { convertEach(dst, src, F16ToF32) }
func f32ToBF16Generic(dst []uint16, src []float32) { convertEach(dst, src, F32ToBF16) }
func f32ToF16Generic(dst []uint16, src []float32)  { convertEach(dst, src, F32ToF16) }

// convertEach sets dst[i] = conv(src[i]) for every i of src; dst is at
// least as long as src.
func convertEach[D, S any](dst []D, src []S, conv func(S) D) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = conv(x)
	}
}
