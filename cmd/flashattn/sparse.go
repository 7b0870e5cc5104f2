package main

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/flashattn/flashattn"
)

// sparseBlock is the block size of the random block-sparse masks of
// "bench -variant block-sparse" and "io -density".
const sparseBlock = 128

// randomBlockMask returns a block mask of heads mask heads over n × n
// positions in sparseBlock × sparseBlock blocks (the last ones short) at
// the given density: in every row of blocks of every head, the diagonal
// block and k − 1 others drawn at random without replacement, k =
// max(1, round(density × blocks per row)), so that no row is empty and
// every row holds the same number of blocks (equal work per row block).
// The same seed gives the same mask.
func randomBlockMask(heads, n int, density float64, seed uint64) (*flashattn.BlockMask, error) {
	if !(density > 0 && density <= 1) {
		return nil, fmt.Errorf("density %v: want 0 < density ≤ 1", density)
	}
	nb := (n + sparseBlock - 1) / sparseBlock
	k := max(1, min(nb, int(math.Round(density*float64(nb)))))
	table := make([]uint8, heads*nb*nb)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	others := make([]int, nb-1)
	for row := 0; row < heads*nb; row++ {
		qb := row % nb
		t := table[row*nb : (row+1)*nb]
		t[qb] = 1
		// The first k−1 of a partial Fisher–Yates shuffle of the other
		// blocks.
		for i := range others {
			others[i] = i
			if i >= qb {
				others[i]++
			}
		}
		for i := 0; i < k-1; i++ {
			j := i + r.IntN(len(others)-i)
			others[i], others[j] = others[j], others[i]
			t[others[i]] = 1
		}
	}
	return flashattn.BlockMaskFromTable(flashattn.BlockShape{Batch: 1, Heads: heads, SeqQ: n, SeqK: n,
		BlockQ: sparseBlock, BlockK: sparseBlock}, table)
}

// visiblePairs returns the number of visible (query, key) pairs of m,
// summed over its heads: the work a block-sparse call does.
func visiblePairs(m *flashattn.BlockMask) float64 {
	s := m.Shape()
	nqb, nkb := m.Blocks()
	var pairs float64
	for h := 0; h < s.Heads; h++ {
		for qb := 0; qb < nqb; qb++ {
			rows := min(s.BlockQ, s.SeqQ-qb*s.BlockQ)
			for kb := 0; kb < nkb; kb++ {
				if m.Kind(0, h, qb, kb) != flashattn.BlockEmpty {
					pairs += float64(rows * min(s.BlockK, s.SeqK-kb*s.BlockK))
				}
			}
		}
	}
	return pairs
}
