package kernel

import "math"

// FMA32 returns x·y + z computed exactly and rounded once to float32 (to
// nearest even): the fused multiply-add of the float32 hardware (FMLA,
// FMADDS, VFMADD…PS), which Go has only for float64 (math.FMA).
//
// float32(math.FMA(x, y, z)) would round twice, to float64 and then to
// float32, and a float64 result that lands on a float32 halfway point
// would then be rounded to even where the exact value lies beyond it.
// Here the float64 sum is rounded to odd instead, which makes the second
// rounding exact (Boldo and Melquiond, "Emulation of FMA and correctly
// rounded sums: proved algorithms using rounding to odd", 2008; it needs
// the 53 bits of float64 ≥ 24 + 2):
//
//	p = x·y            exact in float64 (48 significant bits)
//	s = p + z, e = (p + z) − s   (TwoSum: e exact)
//	s is rounded to odd: if e ≠ 0 and s's last bit is 0, s moves one ulp
//	toward e (the exact value lies between s and that neighbour)
//	result = float32(s)
func FMA32(x, y, z float32) float32 {
	p := float64(x) * float64(y)
	zz := float64(z)
	s := p + zz
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	// TwoSum (Knuth): e = (p + z) − s exactly.
	bb := s - p
	e := (p - (s - bb)) + (zz - bb)
	if e != 0 && math.Float64bits(s)&1 == 0 {
		s = math.Nextafter(s, math.Copysign(math.Inf(1), e))
	}
	return float32(s)
}

// dotFused is Σ a[i]·b[i] (len(b) >= len(a)) as the chain of fused
// multiply-adds s = FMA32(a[i], b[i], s) from s = 0 in index order: one
// element of the fused MulABt (Impl.FusedScores).
func dotFused(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, x := range a {
		s = FMA32(x, b[i], s)
	}
	return s
}
