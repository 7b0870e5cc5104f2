package kernel

import "math"

// expBF16Short is the exponential of expSumBF16AVX512BF16 (Impl.ExpSumBF16
// on AVX512_BF16) in Go, operation for operation: u = float32(t·log2 e),
// r = u − roundeven(u) (VREDUCEPS, imm 0: exact), n = u − r (exact),
// p = (((Exp2B4·r + Exp2B3)·r + Exp2B2)·r + Exp2B1)·r + 1 by FMA32 (one
// rounding each, as VFMADD213PS), q = p·2^n (VSCALEFPS: exact, q is
// normal, or from ExpMax up (n = 128) the finite p·2^128 while p < 1 and
// +Inf once it overflows, as VSCALEFPS: there is no ExpMax mask). The lanes
// outside the range are those of the assembly's mask and special cases:
// NaN propagates, t < ExpMin (also −Inf) gives 0, t = +Inf gives +Inf
// (VREDUCEPS: r = 0, n = +Inf).
func expBF16Short(t float32) float32 {
	switch {
	case t != t:
		return t
	case t < ExpMin:
		return 0
	case math.IsInf(float64(t), 1):
		return t
	}
	u := t * ExpLog2e
	r := u - float32(math.RoundToEven(float64(u)))
	n := u - r
	p := FMA32(Exp2B4, r, Exp2B3)
	p = FMA32(p, r, Exp2B2)
	p = FMA32(p, r, Exp2B1)
	p = FMA32(p, r, 1)
	// n ≥ −126 here; capped above (a huge t has n = u, beyond int's
	// range), where p·2^n overflows either way.
	return float32(math.Ldexp(float64(p), int(min(n, 1024))))
}

// expSumBF16Short is the twin of expSumBF16AVX512BF16, bit for bit: dst[j]
// = F32ToBF16(expBF16Short(FMA32(scale, x[j], −sub))) (the fused argument,
// rounded once as VFMSUB213PS does; VCVTNEPS2BF16
// rounds as F32ToBF16 does: no value is subnormal), x left as it is, and
// the float32 sum in the assembly's order: vector v of 16 lanes (x[16v:])
// into accumulator v mod 2, except an odd last vector, added after the
// two accumulators are; then the 16 lanes halved three times (lane i +
// lane i+8, i+4, i+2) and the last two added.
func expSumBF16Short(dst []uint16, x []float32, scale, sub float32) float32 {
	if len(dst) < len(x) {
		bad("ExpSumBF16: dst shorter than x")
	}
	checkWidth(len(x))
	var acc [2][16]float32
	vecs := len(x) / 16
	for v := 0; v < vecs; v++ {
		a := &acc[v%2]
		if v == vecs-1 && vecs%2 == 1 {
			for i := range a {
				acc[0][i] += acc[1][i]
			}
			a = &acc[0]
		}
		for i := range 16 {
			e := expBF16Short(FMA32(scale, x[16*v+i], -sub))
			dst[16*v+i] = F32ToBF16(e)
			a[i] += e
		}
	}
	if vecs%2 == 0 {
		for i := range acc[0] {
			acc[0][i] += acc[1][i]
		}
	}
	h := acc[0][:]
	for w := 8; w >= 1; w /= 2 {
		for i := range w {
			h[i] += h[i+w]
		}
	}
	return h[0]
}
