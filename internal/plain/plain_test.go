package plain

import (
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/reference"
)

// The benchmark baseline must compute attention correctly too.
func TestPlainAgainstReference(t *testing.T) {
	for _, im := range kernel.Available() {
		restore, err := kernel.Force("f32=" + im.Name)
		if err != nil {
			t.Fatal(err)
		}
		defer restore()
		for _, p := range []Problem{
			{B: 2, Sq: 37, Sk: 53, H: 4, Hk: 2, D: 24, Workers: 2},
			{B: 1, Sq: 70, Sk: 30, H: 2, Hk: 2, D: 64, Causal: true, Workers: 3},
			{B: 1, Sq: 65, Sk: 65, H: 1, Hk: 1, D: 1, Causal: true, Workers: 1},
		} {
			r := rand.New(rand.NewPCG(1, 2))
			gen := func(n int) ([]float32, []float64) {
				x, y := make([]float32, n), make([]float64, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
					y[i] = float64(x[i])
				}
				return x, y
			}
			q, q64 := gen(p.B * p.Sq * p.H * p.D)
			k, k64 := gen(p.B * p.Sk * p.Hk * p.D)
			v, v64 := gen(p.B * p.Sk * p.Hk * p.D)
			do, do64 := gen(p.B * p.Sq * p.H * p.D)
			// The float32 baseline fuses the scores' products where the
			// kernels do (kernel.Impl.FusedScores, SPEC §4).
			par := reference.Params{Batch: p.B, SeqQ: p.Sq, SeqK: p.Sk, Heads: p.H, KVHeads: p.Hk, HeadDim: p.D, Causal: p.Causal,
				FusedScores: im.FusedScores}
			o, lse := p.Forward(q, k, v)
			o64, l64 := reference.Forward64(par, q64, k64, v64)
			o32, l32 := reference.Forward32(par, q, k, v)
			dq, dk, dv := p.Backward(q, k, v, o, do)
			dq64, dk64, dv64 := reference.Backward64(par, q64, k64, v64, do64)
			dq32, dk32, dv32 := reference.Backward32(par, q, k, v, do)
			for _, c := range []struct {
				n       string
				got, pl []float32
				ref     []float64
			}{{"O", o, o32, o64}, {"LSE", lse, l32, l64}, {"dQ", dq, dq32, dq64}, {"dK", dk, dk32, dk64}, {"dV", dv, dv32, dv64}} {
				if err := reference.Check(c.n, c.got, c.pl, c.ref); err != nil {
					t.Errorf("%s %+v: %v", im.Name, p, err)
				}
			}
		}
	}
}
