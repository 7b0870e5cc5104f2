package kernel

import (
	"fmt"
	"math"
)

// The fp8 formats of the OCP 8-bit floating point specification (OFP8),
// used by vLLM's fp8 KV caches (kv_cache_dtype fp8_e4m3, fp8_e5m2). A
// value is one byte S.E.M, sign S, exponent field E and mantissa M:
//
//	e4m3fn  4-bit E, bias 7, 3-bit M: no infinities; S.1111.111 is NaN,
//	        so the largest finite value is 1.75·2⁸ = 448
//	e5m2    5-bit E, bias 15, 2-bit M: IEEE-like, E = 31 is ±Inf (M = 0)
//	        or NaN; the largest finite value is 1.75·2¹⁵ = 57344
//
// and with E = 0 a subnormal M·2^(1−bias−mbits). Conversion from float32
// rounds to nearest, ties to even, and saturates: a finite value or an
// infinity beyond the largest finite value stores ±max (vLLM's and
// PyTorch's saturating conversion); NaN stores NaN.
//
// Vector decoding: e5m2 is the top byte of an fp16 (x<<8 then an fp16 to
// float32 conversion); e4m3fn becomes an fp16 of the same value divided by
// 2⁸ by ((x&0x80)<<8)|((x&0x7f)<<7) (exponent bias 15 − 7 = 8 and one more
// mantissa bit; subnormals too), then ×2⁸ in float32, the NaN code fixed
// up.

// fp8Spec describes one fp8 format.
type fp8Spec struct {
	mbits, bias int
	maxCode     byte    // the largest finite magnitude's code
	nanCode     byte    // a NaN's code (without the sign)
	inf         bool    // whether E all ones, M = 0 is ±Inf
	max         float64 // the largest finite value
}

var (
	specE4M3 = fp8Spec{mbits: 3, bias: 7, maxCode: 0x7e, nanCode: 0x7f, max: 448}
	specE5M2 = fp8Spec{mbits: 2, bias: 15, maxCode: 0x7b, nanCode: 0x7e, inf: true, max: 57344}
)

// decode returns the value of code c.
func (sp fp8Spec) decode(c byte) float32 {
	sign := 1.0
	if c&0x80 != 0 {
		sign = -1
	}
	e := int(c&0x7f) >> sp.mbits
	m := int(c) & (1<<sp.mbits - 1)
	emax := 1<<(7-sp.mbits) - 1
	switch {
	case !sp.inf && c&0x7f == 0x7f, sp.inf && e == emax && m != 0:
		return float32(math.NaN())
	case sp.inf && e == emax:
		return float32(math.Inf(int(sign)))
	case e == 0:
		return float32(sign * math.Ldexp(float64(m), 1-sp.bias-sp.mbits))
	}
	return float32(sign * math.Ldexp(float64(1<<sp.mbits+m), e-sp.bias-sp.mbits))
}

// encode returns the code of x, rounded to nearest even and saturated.
func (sp fp8Spec) encode(x float32) byte {
	sign := byte(math.Float32bits(x)>>24) & 0x80
	a := math.Abs(float64(x))
	switch {
	case a != a:
		return sign | sp.nanCode
	case a >= sp.max:
		return sign | sp.maxCode
	case a == 0:
		return sign
	}
	_, ex := math.Frexp(a) // a = f·2^ex, f in [0.5, 1)
	e := max(ex-1, 1-sp.bias)
	quantum := math.Ldexp(1, e-sp.mbits)
	r := math.RoundToEven(a/quantum) * quantum // exact: a and quantum are binary
	if r > sp.max {
		return sign | sp.maxCode
	}
	if r == 0 {
		return sign
	}
	_, ex = math.Frexp(r)
	if ex-1 < 1-sp.bias { // subnormal
		return sign | byte(r/math.Ldexp(1, 1-sp.bias-sp.mbits))
	}
	mant := int(r/math.Ldexp(1, ex-1)*float64(int(1)<<sp.mbits)) - 1<<sp.mbits
	return sign | byte((ex-1+sp.bias)<<sp.mbits|mant)
}

// fp8Tables are the values of the 256 codes of e4m3fn and e5m2.
var fp8E4M3Table, fp8E5M2Table = fp8Table(specE4M3), fp8Table(specE5M2)

func fp8Table(sp fp8Spec) (t [256]float32) {
	for c := range t {
		t[c] = sp.decode(byte(c))
	}
	return t
}

func widenE4M3(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = fp8E4M3Table[src[i]]
	}
}

func widenE5M2(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = fp8E5M2Table[src[i]]
	}
}

// fp8SpecOf returns the spec of an fp8 format.
func fp8SpecOf(f Format) (fp8Spec, error) {
	switch f {
	case FormatE4M3:
		return specE4M3, nil
	case FormatE5M2:
		return specE5M2, nil
	}
	return fp8Spec{}, fmt.Errorf("%v is not an fp8 format", f)
}

// QuantizeFP8 stores src into dst (one byte per value, len(dst) ==
// len(src)) in the fp8 format f with a per-tensor scale: dst[i] =
// fp8(src[i] / scale), rounded to nearest even and saturating (see above);
// scale 0 means 1. It fails only for a non-fp8 f, mismatched lengths or a
// scale that CheckFP8Scale refuses (negative, subnormal, infinite, NaN).
func QuantizeFP8(f Format, dst []byte, src []float32, scale float32) error {
	sp, err := fp8SpecOf(f)
	if err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("QuantizeFP8: %d values, %d bytes", len(src), len(dst))
	}
	if err := CheckFP8Scale(scale); err != nil {
		return err
	}
	if scale == 0 {
		scale = 1
	}
	for i, x := range src {
		dst[i] = sp.encode(x / scale)
	}
	return nil
}

// DequantizeFP8 sets dst[i] = value(src[i])·scale (scale 0 means 1).
func DequantizeFP8(f Format, dst []float32, src []byte, scale float32) error {
	if _, err := fp8SpecOf(f); err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("DequantizeFP8: %d values, %d bytes", len(dst), len(src))
	}
	formatTable[f].widen(dst, src)
	if scale != 0 && scale != 1 {
		for i := range dst {
			dst[i] *= scale
		}
	}
	return nil
}

// CheckFP8Scale returns an error unless scale is a usable per-tensor
// scale: 0 (meaning 1) or a positive finite normal float32. A subnormal
// one (1e-45) is a mistake, not a scale: x/scale saturates every stored
// value and stored·scale flushes every read one.
func CheckFP8Scale(scale float32) error {
	if scale != 0 && !(scale >= minNormalF32) || math.IsInf(float64(scale), 1) {
		return fmt.Errorf("fp8 scale %v is not 0 or a finite normal value > 0", scale)
	}
	return nil
}

// minNormalF32 is the smallest positive normal float32, 2⁻¹²⁶.
const minNormalF32 = 0x1p-126
