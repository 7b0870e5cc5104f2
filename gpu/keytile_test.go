package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// fa2KeyTile is the number of keys per main-loop iteration of flash-attn
// 2's forward kernels at head dims 64, 128 and 256 on sm_80/sm_90 (kBlockN
// of its 128-row kernel traits).
const fa2KeyTile = 64

// The forward kernel walks the keys in tiles of flash-attn 2's 64 keys at
// every head dimension: its main loop has two barriers per tile, so 512
// more keys cost every thread 2·512/64 more bar.sync (at d128 with 32-key
// tiles, as before, it was twice that).
func TestForwardKeyTileSim(t *testing.T) {
	dims := tile.HeadDims
	if raceEnabled || testing.Short() {
		dims = []int{128}
	}
	const extra = 512
	for _, dim := range dims {
		t.Run(fmt.Sprintf("d%d", dim), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(dim), 3))
			rows := tile.FwdConfig(dim).Br()
			bars := [2]int64{}
			for i, keys := range []int{fa2KeyTile, fa2KeyTile + extra} {
				q := flashattn.Dense(randRounded(rng, BF16, rows*dim, 1), 1, rows, 1, dim)
				k := flashattn.Dense(randRounded(rng, BF16, keys*dim, 1), 1, keys, 1, dim)
				v := flashattn.Dense(randRounded(rng, BF16, keys*dim, 1), 1, keys, 1, dim)
				_, _, counts, err := simForward(q, k, v, &Options{NumSplits: 1}, nil)
				if err != nil {
					t.Fatal(err)
				}
				bars[i] = counts["bar.sync"]
			}
			threads := int64(tile.FwdConfig(dim).Threads())
			if got, want := (bars[1]-bars[0])/threads, int64(2*extra/fa2KeyTile); got != want {
				t.Errorf("%d more keys: %d more bar.sync per thread, want %d (two per %d-key tile)", extra, got, want, fa2KeyTile)
			}
		})
	}
}
