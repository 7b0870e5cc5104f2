package flashattn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestKeyPadding: a padded dense batch under KeyPadding gives, per batch
// element, the reference's forward and backward on its real keys alone
// (every query row, padded ones included), zero dK and dV on the padding,
// and O = 0, LSE = −Inf for an element without keys; GQA, causal or not,
// lengths inside, on and past tile edges.
func TestKeyPadding(t *testing.T) {
	for _, c := range []struct {
		s, h, hk, d int
		lens        []int
		causal      bool
	}{
		{s: 64, h: 4, hk: 2, d: 32, lens: []int{5, 37, 0, 64}},
		{s: 100, h: 2, hk: 1, d: 16, lens: []int{100, 1, 63, 200}, causal: true},
		{s: 1, h: 8, hk: 2, d: 64, lens: []int{1, 0, 1}},
	} {
		b := len(c.lens)
		r := rand.New(rand.NewPCG(27, uint64(c.s)))
		q, k, v, do := randSlice(r, b*c.s*c.h*c.d), randSlice(r, b*c.s*c.hk*c.d), randSlice(r, b*c.s*c.hk*c.d), randSlice(r, b*c.s*c.h*c.d)
		qt, kt, vt := Dense(q, b, c.s, c.h, c.d), Dense(k, b, c.s, c.hk, c.d), Dense(v, b, c.s, c.hk, c.d)
		opts := &Options{Mask: KeyPadding(c.lens...), Causal: c.causal}
		out, lse, err := Forward(qt, kt, vt, opts)
		if err != nil {
			t.Fatal(err)
		}
		dq, dk, dv, err := Backward(qt, kt, vt, out, Dense(do, b, c.s, c.h, c.d), lse, opts)
		if err != nil {
			t.Fatal(err)
		}
		// lse [b, h, s] in the packed layout [h, b·s] checkVarLenSeq reads.
		tq := b * c.s
		packed := make([]float32, c.h*tq)
		for bb := range b {
			for hh := range c.h {
				copy(packed[hh*tq+bb*c.s:][:c.s], lse[(bb*c.h+hh)*c.s:][:c.s])
			}
		}
		for bb, n := range c.lens {
			n = min(n, c.s)
			row := bb * c.s * c.hk * c.d
			for _, g := range []Tensor{dk, dv} {
				for i, x := range g.Data[row+n*c.hk*c.d : row+c.s*c.hk*c.d] {
					if x != 0 {
						t.Fatalf("%+v element %d: gradient %v on padding key (index %d)", c, bb, x, i)
					}
				}
			}
			if n == 0 {
				for hh := range c.h {
					for i := range c.s {
						if l := packed[hh*tq+bb*c.s+i]; !math.IsInf(float64(l), -1) {
							t.Errorf("%+v element %d without keys: LSE %v, want -Inf", c, bb, l)
						}
					}
				}
				for _, x := range out.Data[bb*c.s*c.h*c.d : (bb+1)*c.s*c.h*c.d] {
					if x != 0 {
						t.Fatalf("%+v element %d without keys: O %v, want 0", c, bb, x)
					}
				}
				continue
			}
			par := reference.Params{Batch: 1, SeqQ: c.s, SeqK: n, Heads: c.h, KVHeads: c.hk, HeadDim: c.d, Causal: c.causal}
			if c.causal { // bottom-right alignment of the call's seqlen_q × seqlen_k, kept on the truncated keys
				par.Mask = func(_, _, i, j int) bool { return j <= i }
				par.Causal = false
			}
			checkVarLenSeq(t, Float32, bb, par, q, k, v, do, tq, bb*c.s, bb*c.s, out, packed, dq, dk, dv)
		}
	}
}
