package kernel

import "math"

// expBF16Short is the exponential of expSumMaxBF16AVX512BF16 (Impl.ExpSumBF16
// on AVX512_BF16) in Go, operation for operation: u = float32(t·log2 e),
// r = u − roundeven(u) (VREDUCEPS, imm 0: exact), n = u − r (exact),
// p = (((Exp2B4·r + Exp2B3)·r + Exp2B2)·r + Exp2B1)·r + 1 by FMA32 (one
// rounding each, as VFMADD213PS), q = p·2^n (VSCALEFPS: exact, q is
// normal). The lanes outside the range are those of the assembly's masks:
// NaN propagates, t < ExpMin (also −Inf) gives 0, t > ExpMax +Inf.
func expBF16Short(t float32) float32 {
	switch {
	case t != t:
		return t
	case t < ExpMin:
		return 0
	case t > ExpMax:
		return float32(math.Inf(1))
	}
	u := t * ExpLog2e
	r := u - float32(math.RoundToEven(float64(u)))
	n := u - r
	p := FMA32(Exp2B4, r, Exp2B3)
	p = FMA32(p, r, Exp2B2)
	p = FMA32(p, r, Exp2B1)
	p = FMA32(p, r, 1)
	return float32(math.Ldexp(float64(p), int(n)))
}

// expSumMaxBF16Short is the twin of expSumMaxBF16AVX512BF16, bit for bit:
// dst[j] = F32ToBF16(expBF16Short(float32(scale·x[j]) − sub)) (VCVTNEPS2BF16
// rounds as F32ToBF16 does: no value is subnormal), x left as it is, the
// float32 sum in the assembly's order: vector v of 16 lanes (x[16v:]) into
// accumulator v mod 2, except an odd last vector, added after the two
// accumulators are; then the 16 lanes halved three times (lane i + lane
// i+8, i+4, i+2) and the last two added. mx, the largest product
// float32(scale·x[j]), is gathered in the same order with VMAXPS's rule,
// maxPS(m, t) = m > t ? m : t (a NaN t replaces m, a NaN m is replaced),
// from −Inf.
func expSumMaxBF16Short(dst []uint16, x []float32, scale, sub float32) (sum, mx float32) {
	if len(dst) < len(x) {
		bad("ExpSumBF16: dst shorter than x")
	}
	checkWidth(len(x))
	var acc, mxs [2][16]float32
	for i := range mxs {
		for l := range mxs[i] {
			mxs[i][l] = float32(math.Inf(-1))
		}
	}
	vecs := len(x) / 16
	for v := 0; v < vecs; v++ {
		a, m := &acc[v%2], &mxs[v%2]
		if v == vecs-1 && vecs%2 == 1 {
			for i := range a {
				acc[0][i] += acc[1][i]
				mxs[0][i] = maxPS(mxs[0][i], mxs[1][i])
			}
			a, m = &acc[0], &mxs[0]
		}
		for i := range 16 {
			p := float32(scale * x[16*v+i])
			m[i] = maxPS(m[i], p)
			e := expBF16Short(p - sub)
			dst[16*v+i] = F32ToBF16(e)
			a[i] += e
		}
	}
	if vecs%2 == 0 {
		for i := range acc[0] {
			acc[0][i] += acc[1][i]
			mxs[0][i] = maxPS(mxs[0][i], mxs[1][i])
		}
	}
	h, hm := acc[0][:], mxs[0][:]
	for w := 8; w >= 1; w /= 2 {
		for i := range w {
			h[i] += h[i+w]
			hm[i] = maxPS(hm[i], hm[i+w])
		}
	}
	return h[0], hm[0]
}

// maxPS is VMAXPS's (and VMAXSS's) maximum of one lane, with m the first
// source operand (Intel's order): m if m > t, else t (also when either is
// a NaN, or for ±0 ties).
func maxPS(m, t float32) float32 {
	if m > t {
		return m
	}
	return t
}

// fusedExpSumMax returns ExpSumBF16 and ExpSumMaxBF16 made of f, an
// exponential that returns the maximum beside the sum and leaves x as it
// is (expSumMaxBF16AVX512BF16, or its twin expSumMaxBF16Short): the first
// drops the maximum, the second ignores the limit (f never writes x).
func fusedExpSumMax(f func(dst []uint16, x []float32, scale, sub float32) (float32, float32)) (
	func(dst []uint16, x []float32, scale, sub float32) float32,
	func(dst []uint16, x []float32, scale, sub, limit float32) (float32, float32)) {
	return func(dst []uint16, x []float32, scale, sub float32) float32 {
			s, _ := f(dst, x, scale, sub)
			return s
		}, func(dst []uint16, x []float32, scale, sub, _ float32) (float32, float32) {
			return f(dst, x, scale, sub)
		}
}

// maxThenExpSumBF16 returns ExpSumMaxBF16 made of an implementation's Max
// and ExpSumBF16 (the kernel of those without the fused maximum, whose
// ExpSumBF16 may overwrite x): mx = float32(scale·Max(x)), the same value
// as the largest product (scale > 0: rounding is monotone), then the
// exponential only if mx ≤ limit, so that x keeps its values otherwise.
func maxThenExpSumBF16(maxf func(x []float32) float32, expSum func(dst []uint16, x []float32, scale, sub float32) float32) func(dst []uint16, x []float32, scale, sub, limit float32) (float32, float32) {
	return func(dst []uint16, x []float32, scale, sub, limit float32) (float32, float32) {
		if len(dst) < len(x) {
			bad("ExpSumBF16: dst shorter than x")
		}
		mx := scale * maxf(x)
		if !(mx <= limit) {
			return 0, mx
		}
		return expSum(dst, x, scale, sub), mx
	}
}
