package flashattn

import (
	"context"
	"fmt"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestDBiasVarLen: Grads.DBias of a VarLen call, whose bias's batch
// dimension is the sequence (a per-sequence key-padding bias [seqs, 1, 1,
// sk], a relative-position bias [1, H, sq, sk] shared by the sequences,
// one value per sequence and head), against the float64 reference run
// sequence by sequence and summed over the broadcast dimensions; causal
// (bottom-right per sequence), a sliding window and neither, with GQA.
func TestDBiasVarLen(t *testing.T) {
	const H, Hk, D = 4, 2, 16
	lq, lk := []int{5, 17, 9}, []int{30, 17, 70}
	maxQ, maxK := 17, 70
	nb := len(lq)
	for _, shape := range [][4]int{{nb, 1, 1, maxK}, {1, H, maxQ, maxK}, {nb, H, 1, 1}, {1, 1, maxQ, 1}} {
		for _, mode := range []string{"full", "causal", "window"} {
			causal, window := mode == "causal", mode == "window"
			t.Run(fmt.Sprintf("%v/%s", shape, mode), func(t *testing.T) {
				r := newRand(uint64(shape[0] + 7*shape[1]))
				cuQ, cuK := []int32{0}, []int32{0}
				for b := range nb {
					cuQ, cuK = append(cuQ, cuQ[b]+int32(lq[b])), append(cuK, cuK[b]+int32(lk[b]))
				}
				tq, tk := int(cuQ[nb]), int(cuK[nb])
				q, k, v, do := randSlice(r, tq*H*D), randSlice(r, tk*Hk*D), randSlice(r, tk*Hk*D), randSlice(r, tq*H*D)
				data := randSlice(r, shape[0]*shape[1]*shape[2]*shape[3])
				bias, err := NewBias(data, shape[0], shape[1], shape[2], shape[3])
				if err != nil {
					t.Fatal(err)
				}
				opts := &Options{VarLen: &VarLen{CuSeqlensQ: cuQ, CuSeqlensK: cuK}, ScoreMod: bias, Causal: causal}
				if window {
					opts.Window = &Window{Left: 5, Right: 3}
				}
				qt, kt, vt := Dense(q, 1, tq, H, D), Dense(k, 1, tk, Hk, D), Dense(v, 1, tk, Hk, D)
				out, lse, err := Forward(qt, kt, vt, opts)
				if err != nil {
					t.Fatal(err)
				}
				g := Grads{DQ: NewTensor(1, tq, H, D), DK: NewTensor(1, tk, Hk, D), DV: NewTensor(1, tk, Hk, D), DBias: make([]float32, len(data))}
				if err := BackwardGrads(context.Background(), g, qt, kt, vt, out, Dense(do, 1, tq, H, D), lse, nil, opts); err != nil {
					t.Fatal(err)
				}
				want64, want32 := make([]float64, len(data)), make([]float32, len(data))
				for b := range nb {
					par := reference.Params{Batch: 1, SeqQ: lq[b], SeqK: lk[b], Heads: H, KVHeads: Hk, HeadDim: D, Causal: causal,
						Window: window, WindowLeft: 5, WindowRight: 3,
						ScoreMod: func(_, h, i, j int, x float64) (float64, float64) {
							return x + float64(data[biasIndex(shape, b, h, i, j)]), 1
						}}
					q0, k0 := int(cuQ[b])*H*D, int(cuK[b])*Hk*D
					qs, ks, vs, dos := q[q0:][:lq[b]*H*D], k[k0:][:lk[b]*Hk*D], v[k0:][:lk[b]*Hk*D], do[q0:][:lq[b]*H*D]
					ds64 := reference.ScoreGrads64(par, to64(qs), to64(ks), to64(vs), to64(dos), nil)
					ds32 := reference.ScoreGrads32(plainPar(par), qs, ks, vs, dos, nil)
					for h := range H {
						for i := range lq[b] {
							for j := range lk[b] {
								e, x := biasIndex(shape, b, h, i, j), (h*lq[b]+i)*lk[b]+j
								want64[e] += ds64[x]
								want32[e] += ds32[x]
							}
						}
					}
				}
				if err := reference.Check("DBias", g.DBias, want32, want64); err != nil {
					t.Error(err)
				}
			})
		}
	}
}
