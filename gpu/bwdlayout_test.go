package gpu

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// The d128 backward (dK/dV with atomic dQ) loads each warp's operand
// shares only, as flash-attn 2's warp layout does: at most 150 ldmatrix
// per 320 mma executed (flash-attn 2: 144; the former layout, a warp per
// 16 keys with all 64 queries of a block, executed 200). Whole blocks, no
// mask, so that every executed instruction is the main loop's.
func TestBackwardLdmatrixSim(t *testing.T) {
	const dim, sq, sk = 128, 128, 128
	rng := rand.New(rand.NewPCG(5, 9))
	q := flashattn.Dense(randRounded(rng, BF16, sq*dim, 1), 1, sq, 1, dim)
	k := flashattn.Dense(randRounded(rng, BF16, sk*dim, 1), 1, sk, 1, dim)
	v := flashattn.Dense(randRounded(rng, BF16, sk*dim, 1), 1, sk, 1, dim)
	dO := flashattn.Dense(randRounded(rng, BF16, sq*dim, 1), 1, sq, 1, dim)
	out, lse, _, err := simForward(q, k, v, &Options{NumSplits: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := newSimDevice()
	defer d.Close()
	s := d.ctx.backend.(*sim)
	s.m.Counts = map[string]int64{}
	if _, _, _, err := d.BackwardHost(BF16, q, k, v, flashattn.Dense(out, 1, sq, 1, dim), dO, lse, nil); err != nil {
		t.Fatal(err)
	}
	var ldm, mma int64
	for op, n := range s.m.Counts {
		switch {
		case strings.HasPrefix(op, "ldmatrix."):
			ldm += n
		case strings.HasPrefix(op, "mma."):
			mma += n
		}
	}
	if mma == 0 || 320*ldm > 150*mma {
		t.Errorf("backward d128: %d ldmatrix per %d mma executed (%.0f per 320), want at most 150 per 320", ldm/32, mma/32, 320*float64(ldm)/float64(max(mma, 1)))
	}
}
