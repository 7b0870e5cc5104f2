package reference

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The gradients of BackwardGrads64 — with sinks, dLSE, a V head dim other
// than Q's and top-left alignment — match central finite differences of the
// loss L = Σ dO∘O + Σ dLSE∘LSE computed with Forward64.
func TestGradsFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := Params{Batch: 1, SeqQ: 5, SeqK: 7, Heads: 2, KVHeads: 1, HeadDim: 4, HeadDimV: 3,
		Causal: true, TopLeft: true, Sinks: []float64{0.3, -1.2}}
	rnd := func(n int) []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = r.NormFloat64()
		}
		return x
	}
	q, k, v := rnd(5*2*4), rnd(7*1*4), rnd(7*1*3)
	dout, dlse := rnd(5*2*3), rnd(2*5)
	loss := func(p Params, q, k, v []float64) float64 {
		o, lse := Forward64(p, q, k, v)
		var l float64
		for i, x := range o {
			l += dout[i] * x
		}
		for i, x := range lse {
			if !math.IsInf(x, 0) {
				l += dlse[i] * x
			}
		}
		return l
	}
	dq, dk, dv, ds := BackwardGrads64(p, q, k, v, dout, dlse)
	const eps = 1e-6
	check := func(name string, x, g []float64, f func() float64) {
		for i := range x {
			x0 := x[i]
			x[i] = x0 + eps
			lp := f()
			x[i] = x0 - eps
			lm := f()
			x[i] = x0
			if fd := (lp - lm) / (2 * eps); math.Abs(fd-g[i]) > 1e-6*(1+math.Abs(fd)) {
				t.Errorf("%s[%d]: gradient %v, finite difference %v", name, i, g[i], fd)
			}
		}
	}
	f := func() float64 { return loss(p, q, k, v) }
	check("dQ", q, dq, f)
	check("dK", k, dk, f)
	check("dV", v, dv, f)
	check("dSinks", p.Sinks, ds, f)
}
