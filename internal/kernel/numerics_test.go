package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The arithmetic the error rule relies on (see Impl.MulABt, ExpSum, Dot
// and ALiBi; rule_test.go checks the rule itself): every implementation
// rounds the scores as its baseline does: the plain algorithm, with fused
// products where Impl.FusedScores.

// TestScoresBitForBit: MulABt, Dot and ALiBi of every implementation give
// Generic's results bit for bit, on large and ragged operands (MulABt and
// Dot those of the fused twin, mulABtFused, where Impl.FusedScores).
func TestScoresBitForBit(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, im := range Available() {
		mulABt, _ := scoresTwin(im) // Generic's, or the fused twin
		for _, m := range []int{1, 3, 6, 7, 13} {
			for _, n := range []int{16, 48, 64} {
				for _, k := range []int{1, 5, 32, 64, 129} {
					mul := float32(100)
					if k%2 == 1 {
						mul = 1
					}
					a, b := randSlice(r, m*k), randSlice(r, n*k)
					for i := range a {
						a[i] *= mul
					}
					for i := range b {
						b[i] *= mul
					}
					bt := make([]float32, Pad(n)*k)
					PackBt(bt, b, k, n, k)
					got, want := make([]float32, m*n), make([]float32, m*n)
					im.MulABt(got, n, a, k, bt, m, n, k)
					mulABt(want, n, a, k, bt, m, n, k)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s MulABt m=%d n=%d k=%d: c[%d] = %v, twin %v (fused %v)", im.Name, m, n, k, i, got[i], want[i], im.FusedScores)
						}
					}
					// Dot is one element of MulABt.
					if d := im.Dot(a[(m-1)*k:m*k], b[(n-1)*k:]); math.Float32bits(d) != math.Float32bits(want[m*n-1]) {
						t.Fatalf("%s Dot k=%d: %v, MulABt element %v", im.Name, k, d, want[m*n-1])
					}
				}
			}
		}
		for _, pos := range []float32{-40, 0, 17, 1000, 1 << 20} {
			for _, slope := range []float32{0.0625, 0.3, 0.4999, 7.3} {
				x := randSlice(r, 160)
				for i := range x {
					x[i] *= 30
				}
				y := append([]float32(nil), x...)
				im.ALiBi(x, slope, pos)
				Generic.ALiBi(y, slope, pos)
				for j := range x {
					if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
						t.Fatalf("%s ALiBi slope %v pos %v: x[%d] = %v, generic %v", im.Name, slope, pos, j, x[j], y[j])
					}
				}
			}
		}
	}
}

// TestScoresFused: the assembly MulABt of every architecture (avx512 and
// avx2 on amd64, neon on arm64: every candidate of archImpls) is the fused
// one, Impl.FusedScores, its inner loop one FMA per product: it passes its
// self-check and gives bit for bit the FMA32 chain of mulABtFused at large
// logits (inputs ×100, |S| ~ 1e4), on every row tail of the 6-row tile, on
// both column blocks of AVX-512 (32 and 16 wide) and on k tails, where that
// chain differs from the rounded products of Generic.
func TestScoresFused(t *testing.T) {
	r := rand.New(rand.NewPCG(55, 56))
	for _, cand := range archImpls() {
		im, err := Lookup(cand.Name)
		if err != nil {
			t.Errorf("%s: %v", cand.Name, err)
			continue
		}
		if !im.FusedScores {
			t.Errorf("%s: FusedScores false", im.Name)
		}
		differ, bad := 0, 0
		for _, m := range []int{1, 2, 5, 6, 7, 13} {
			for _, k := range []int{1, 3, 4, 7, 64, 130} {
				const n = 48
				a, b := randSlice(r, m*k), randSlice(r, n*k)
				for i := range a {
					a[i] *= 100
				}
				for i := range b {
					b[i] *= 100
				}
				bt := make([]float32, n*k)
				PackBt(bt, b, k, n, k)
				got, fused, plain := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
				im.MulABt(got, n, a, k, bt, m, n, k)
				mulABtFused(fused, n, a, k, bt, m, n, k)
				Generic.MulABt(plain, n, a, k, bt, m, n, k)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(fused[i]) {
						if bad++; bad <= 3 {
							t.Errorf("%s m=%d k=%d: c[%d] = %v, fused chain %v (rounded products %v)", im.Name, m, k, i, got[i], fused[i], plain[i])
						}
					}
					if fused[i] != plain[i] {
						differ++
					}
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d elements differ from the fused chain", im.Name, bad)
		}
		if differ == 0 {
			t.Fatalf("%s: fused and rounded products never differ: the test tells nothing", im.Name)
		}
	}
}

// TestExpSumLargeArguments measures ExpSum where scale·x and sub are large
// (|scale·x| up to 1e4, results in [e^-87, 1]: the rows of large logits,
// sub being the rounded scale·max): every implementation within its
// documented bound (expBound: 2 ulp, plus |t|·2⁻²³·e^t on AVX-512) of
// math.Exp of its documented argument t = float32(scale·x) − sub (both
// operations rounded to float32), and within the sum of its and Generic's
// bounds of Generic. It logs the errors in ulp and, for
// information, the relative error against exp(scale·x − sub) with the
// product unrounded, which is dominated by that rounding (up to
// 2⁻²⁴·|scale·x|, 6e-4 at 1e4) on every implementation alike.
func TestExpSumLargeArguments(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const n = 4096
	for _, im := range Available() {
		var worstDoc, worstGen int64
		var worstExact, worstBound, worstGenBound float64
		for _, big := range []float64{1, 100, 1e3, 1e4} {
			for _, scale := range []float32{0.125, 1 / float32(math.Sqrt(96)), 1, 100} {
				// Row maximum xm with scale·xm ≈ ±big, the others up to 87
				// below it in scale·x units.
				xm := float32(big / float64(scale))
				if r.IntN(2) == 0 {
					xm = -xm
				}
				// sub rounded explicitly: Go fuses a product into a later
				// subtraction on arm64, and arg below would then use the
				// unrounded scale·xm that no kernel is given.
				sub := float32(scale * xm)
				x := make([]float32, n)
				for i := range x {
					x[i] = xm - float32(r.Float64()*87/float64(scale))
				}
				x[0] = xm
				y, g := append([]float32(nil), x...), append([]float32(nil), x...)
				sum := im.ExpSum(y, scale, sub)
				gsum := Generic.ExpSum(g, scale, sub)
				var wsum float64
				for i, v := range x {
					arg := float64(float32(scale*v) - sub) // the documented t, rounded twice
					want := math.Exp(arg)
					wsum += float64(y[i])
					if arg < ExpMin {
						if y[i] != 0 {
							t.Fatalf("%s: exp(%v) = %v, want 0", im.Name, arg, y[i])
						}
						continue
					}
					if u := ulps(y[i], float32(want)); u > worstDoc {
						worstDoc = u
					}
					if u := ulps(y[i], g[i]); u > worstGen {
						worstGen = u
					}
					b := expBound(im.Name, float32(arg))
					worstBound = max(worstBound, math.Abs(float64(y[i])-want)/b)
					worstGenBound = max(worstGenBound, math.Abs(float64(y[i]-g[i]))/(b+expBound(Generic.Name, float32(arg))))
					exact := math.Exp(float64(scale)*float64(v) - float64(sub))
					worstExact = max(worstExact, math.Abs(float64(y[i])-exact)/exact)
				}
				if d := math.Abs(float64(sum) - wsum); d > 1e-5*wsum {
					t.Errorf("%s big %g scale %v: sum %v, elements sum to %v", im.Name, big, scale, sum, wsum)
				}
				if d := math.Abs(float64(sum - gsum)); d > 1e-5*float64(gsum) {
					t.Errorf("%s big %g scale %v: sum %v, generic %v", im.Name, big, scale, sum, gsum)
				}
			}
		}
		t.Logf("%s: max error %d ulp (%.2f of its bound) against exp(float32(scale·x) − sub), %d ulp (%.2f of the bounds) against Generic; relative error against exp(scale·x − sub) unrounded %.2g",
			im.Name, worstDoc, worstBound, worstGen, worstGenBound, worstExact)
		if worstBound > 1 || worstGenBound > 1 {
			t.Errorf("%s: %.2f of its documented bound from the exponential of the documented argument, %.2f of the two bounds from Generic (want ≤ 1)", im.Name, worstBound, worstGenBound)
		}
	}
}
