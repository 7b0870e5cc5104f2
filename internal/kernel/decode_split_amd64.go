//go:build amd64 && !purego

package kernel

import "slices"

// The float32 scores tile of 8 rows on AVX-512 as two tiles of 4 rows:
// the row kernel of 8 rows (2 keys per block) loads 8 Q vectors and 2 K
// vectors per 16 FMAs and stores each row's 2 scores apart; the one of 4
// rows (4 keys per block) 4 and 4, and stores 4 scores per row. Run on
// rows 0-3 and 4-7 of each block of decodeTiles (64 KiB of keys, read
// from memory by the first and from L2 by the second), it measured on Zen
// 4 (256-16384 keys of d = 128, medians of 15 alternations in one
// process, under load) 1.03-1.08× the 8-row kernel, the same sums bit
// for bit: both take S[r][j] as 16-lane FMA chains over d folded by the
// same tree; so the 8-row float32 scores kernel is no longer generated.
// The accum tile of 8 rows gained nothing that way (0.98-1.03×) and
// stays.

// withScoresSplit8 returns ks, the float32 AVX-512 kernels, whose scores
// tiles are of 1, 2, 4 and 16 rows (the generator emits no tile of 8 rows
// for them), with a tile of 8 rows inserted that runs its tile of 4 rows
// (ks.scores[2]) on the two halves of the rows, block by block.
func withScoresSplit8(ks decodeKernels) decodeKernels {
	four := ks.scores[2]
	eight := func(s []float32, lds int, q []float32, k []byte, ldk, n, d int) {
		decodeTiles(8, n, 4, FormatF32.RowBytes(d), func(r0, _, j0, jn int) {
			four(s[r0*lds+j0:], lds, q[r0*d:], k[j0*ldk:], ldk, jn, d)
		})
	}
	ks.scores = slices.Insert(slices.Clone(ks.scores), 3, scoresTile(eight))
	return ks
}
