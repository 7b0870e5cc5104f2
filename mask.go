package flashattn

import "math"

// unbounded stands for a window side with no limit: a quarter of the int
// range, so that a position plus or minus it cannot overflow, on 32-bit
// platforms too.
const unbounded = math.MaxInt >> 2

var negInf = float32(math.Inf(-1))

// band is the visibility mask of one sequence, the intersection of the causal
// mask and the sliding window: key j is visible to query row i iff
//
//	i + off - left <= j <= i + off + right,   off = nk - nq
//
// (bottom-right alignment). Causal is right = 0. Both bounds grow with i,
// which is what lets whole tiles be skipped or taken without per-element
// tests. All ranges are half-open [lo, hi) and empty when hi <= lo.
type band struct {
	off, left, right int
	nq, nk           int
}

func newBand(o *Options, nq, nk int) band {
	b := band{off: nk - nq, left: unbounded, right: unbounded, nq: nq, nk: nk}
	if o.Causal {
		b.right = 0
	}
	if w := o.Window; w != nil {
		if w.Left >= 0 {
			b.left = min(b.left, w.Left)
		}
		if w.Right >= 0 {
			b.right = min(b.right, w.Right)
		}
	}
	return b
}

// keys returns the keys visible to at least one row of [i0, i1).
func (b band) keys(i0, i1 int) (lo, hi int) {
	lo = max(0, i0+b.off-b.left)
	hi = min(b.nk, i1-1+b.off+b.right+1)
	return lo, max(lo, hi)
}

// rows returns the query rows that see at least one key of [j0, j1).
func (b band) rows(j0, j1 int) (lo, hi int) {
	lo = max(0, j0-b.off-b.right)
	hi = min(b.nq, j1-b.off+b.left)
	return lo, max(lo, hi)
}

// full reports whether every row of [i0, i1) sees every key of [j0, j1):
// such a tile needs no per-element mask.
func (b band) full(i0, i1, j0, j1 int) bool {
	return i1-1+b.off-b.left <= j0 && i0+b.off+b.right+1 >= j1
}

// maskRow sets to -Inf the scores of row i, columns j0..j0+len(row)-1, that
// the band hides.
func (b band) maskRow(row []float32, i, j0 int) {
	lo, hi := b.keys(i, i+1)
	lo, hi = lo-j0, hi-j0
	n := len(row)
	for c := 0; c < min(lo, n); c++ {
		row[c] = negInf
	}
	for c := max(hi, 0); c < n; c++ {
		row[c] = negInf
	}
}
