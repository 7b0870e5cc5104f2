package flashattn_test

import (
	"fmt"

	"github.com/flashattn/flashattn"
)

// The memory traffic of a forward pass at N = 4096, d = 64, for a 1 MiB
// cache: flashattn reads K and V once per super-block of query rows (whose
// 48-row tiles share each K/V tile in the cache); the standard algorithm
// writes and reads back the 4096 × 4096 scores twice.
func ExampleCountTraffic() {
	shape := flashattn.TrafficShape{Batch: 1, Heads: 4, SeqQ: 4096, SeqK: 4096, Dim: 64}
	t, err := flashattn.CountTraffic(shape, nil, 1<<20, flashattn.PassForward)
	if err != nil {
		panic(err)
	}
	fmt.Printf("tiles: %d query rows × %d keys, super-blocks of %d rows\n", t.BlockQ, t.BlockK, t.SuperBlockQ)
	fmt.Printf("flashattn: %d MiB (K and V: %d MiB)\n", t.Flash.Total()>>20, (t.Flash.K.Total()+t.Flash.V.Total())>>20)
	fmt.Printf("standard:  %d MiB (scores: %d MiB)\n", t.Standard.Total()>>20, t.Standard.Scores.Total()>>20)
	// Output:
	// tiles: 48 query rows × 512 keys, super-blocks of 480 rows
	// flashattn: 116 MiB (K and V: 88 MiB)
	// standard:  1040 MiB (scores: 1024 MiB)
}
