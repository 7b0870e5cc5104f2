package flashattn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAccumulatorsStartFromZero: the forward does not clear its output
// accumulators per row block; the first P·V product of a row stores its
// sums, and rows no product reaches (no visible key) are cleared at the end
// (rowState.claim, settle). Calls that left NaN in the pooled workspaces
// (V all NaN) must not change the next calls' bits: rows that see no key
// (causal, more queries than keys), key splits (KVCache.NumSplits) whose
// part of a row is hidden (after its last visible part, or before it with
// a Window: the merge reads those with weight 0), super-blocks, several
// heads, one worker and two.
func TestAccumulatorsStartFromZero(t *testing.T) {
	r := rand.New(rand.NewPCG(91, 92))
	type shape struct {
		sq, sk, h, d, workers int
		splits                int // > 0: K and V a KV cache split in this many parts
		window                int // > 0: Window{Left: window}, hiding a row's first parts
	}
	shapes := []shape{
		{40, 10, 2, 16, 1, 0, 0},
		{300, 200, 2, 64, 2, 0, 0},
		{700, 64, 1, 32, 1, 0, 0}, // a super-block: rows 0..635 see nothing
		{96, 2048, 1, 64, 2, 0, 0},
		{200, 600, 1, 128, 1, 0, 0},
		{64, 64, 2, 64, 2, 4, 0}, // row 0 sees none of parts 1..3
		{48, 200, 1, 32, 1, 5, 0},
		{64, 64, 1, 32, 1, 4, 8}, // row 63 sees none of parts 0..2
		{96, 160, 2, 64, 2, 5, 20},
	}
	for _, s := range shapes {
		t.Run(fmt.Sprintf("sq%d_sk%d_h%d_d%d_w%d_split%d_win%d", s.sq, s.sk, s.h, s.d, s.workers, s.splits, s.window), func(t *testing.T) {
			rnd := func(n int) []float32 {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				return x
			}
			q := Dense(rnd(s.sq*s.h*s.d), 1, s.sq, s.h, s.d)
			k := Dense(rnd(s.sk*s.h*s.d), 1, s.sk, s.h, s.d)
			v := Dense(rnd(s.sk*s.h*s.d), 1, s.sk, s.h, s.d)
			nanV := make([]float32, s.sk*s.h*s.d)
			for i := range nanV {
				nanV[i] = float32(math.NaN())
			}
			opt := &Options{Causal: true, Workers: s.workers}
			nanOpt := &Options{Workers: s.workers}
			if s.splits > 0 {
				opt.KVCache = &KVCache{SeqLens: []int32{int32(s.sk)}, NumSplits: s.splits}
				nanOpt.KVCache = opt.KVCache
			}
			if s.window > 0 {
				opt.Window = &Window{Left: s.window, Right: -1}
			}
			want, wantLSE, err := Forward(q, k, v, opt)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, _, err := Forward(q, k, Dense(nanV, 1, s.sk, s.h, s.d), nanOpt); err != nil {
					t.Fatal(err)
				}
				got, lse, err := Forward(q, k, v, opt)
				if err != nil {
					t.Fatal(err)
				}
				for i, x := range got.Data {
					if math.Float32bits(x) != math.Float32bits(want.Data[i]) {
						t.Fatalf("O[%d] = %v after a NaN call, want %v", i, x, want.Data[i])
					}
				}
				for i, x := range lse {
					if math.Float32bits(x) != math.Float32bits(wantLSE[i]) {
						t.Fatalf("LSE[%d] = %v after a NaN call, want %v", i, x, wantLSE[i])
					}
				}
			}
		})
	}
}
