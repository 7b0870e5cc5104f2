package gpu

import (
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// fa2KeyTile is the number of keys per main-loop iteration of flash-attn
// 2's forward kernels at head dims 64, 128 and 256 on sm_80/sm_90 (kBlockN
// of its 128-row kernel traits).
const fa2KeyTile = 64

// The forward kernels walk the keys in tiles of flash-attn 2's 64 keys at
// every head dimension, with one barrier per tile where K and V are
// double-buffered (the d64 forward, the split-KV kernels at d64 and d128:
// their shared memory allows it without fewer blocks per SM) and two where
// they are single-buffered and staggered (d128: double buffers would cost
// an A100 a block per SM; d256). 512 more keys cost every thread 512/64
// tiles' barriers more (at d128 with 32-key tiles, as before, twice that;
// single-buffered at d64, twice that too).
func TestForwardKeyTileSim(t *testing.T) {
	cases := []struct {
		name              string
		dim, rows, splits int
		barriersPerTile   int
		threads           int
		long              bool
	}{
		{"forward d64", 64, 128, 1, 1, tile.FwdConfig(64).Threads(), false},
		{"forward d128", 128, 128, 1, 2, tile.FwdConfig(128).Threads(), false},
		{"forward d256", 256, 128, 1, 2, tile.FwdConfig(256).Threads(), true},
		{"split-KV d64", 64, 3, 2, 1, tile.FwdSplitConfig(64).Threads(), false},
		{"split-KV d128", 128, 3, 2, 1, tile.FwdSplitConfig(128).Threads(), true},
	}
	const base, extra = 2 * fa2KeyTile, 512 // two tiles: one per split
	for _, c := range cases {
		if c.long && (raceEnabled || testing.Short()) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.dim), 3))
			bars := [2]int64{}
			for i, keys := range []int{base, base + extra} {
				q := flashattn.Dense(randRounded(rng, BF16, c.rows*c.dim, 1), 1, c.rows, 1, c.dim)
				k := flashattn.Dense(randRounded(rng, BF16, keys*c.dim, 1), 1, keys, 1, c.dim)
				v := flashattn.Dense(randRounded(rng, BF16, keys*c.dim, 1), 1, keys, 1, c.dim)
				_, _, counts, err := simForward(q, k, v, &Options{NumSplits: c.splits}, nil)
				if err != nil {
					t.Fatal(err)
				}
				bars[i] = counts["bar.sync"]
			}
			if got, want := (bars[1]-bars[0])/int64(c.threads), int64(c.barriersPerTile*extra/fa2KeyTile); got != want {
				t.Errorf("%d more keys: %d more bar.sync per thread, want %d (%d per %d-key tile)", extra, got, want, c.barriersPerTile, fa2KeyTile)
			}
		})
	}
}
