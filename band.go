package flashattn

import "math"

// unbounded stands for a window side with no limit: a quarter of the int
// range, so that a position plus or minus it cannot overflow, on 32-bit
// platforms too.
const unbounded = math.MaxInt >> 2

// MaxPosition bounds the positions a call places its rows and keys at with
// Options.Offsets: Offsets.Query plus seqlen_q, and Offsets.Key plus
// seqlen_k, must be at most MaxPosition (2^60 − 1 on 64-bit platforms,
// 2^28 − 1 on 32-bit ones). It is half the value that stands for "no
// window limit", so that no position can be taken for it.
const MaxPosition = unbounded >> 1

var negInf = float32(math.Inf(-1))

// band is the causal mask and the sliding window of one sequence (and, with
// nothing set, the plain rectangle of its nq × nk scores): key j is visible
// to query row i iff
//
//	i + off - left <= j <= i + off + right
//
// with off = nk − nq (bottom-right alignment), 0 (Options.TopLeft) or
// Offsets.Query − Offsets.Key (positions in a longer sequence). Causal is right = 0. Both bounds grow with i,
// which is what lets whole tiles be skipped or taken without per-element
// tests. All ranges are half-open [lo, hi) and empty when hi <= lo.
type band struct {
	off, left, right int
	nq, nk           int
}

func newBand(o *Options, nq, nk int) band {
	off := nk - nq
	switch {
	case o.Offsets != nil:
		off = o.Offsets.Query - o.Offsets.Key
	case o.TopLeft:
		off = 0
	}
	b := band{off: off, left: unbounded, right: unbounded, nq: nq, nk: nk}
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

// keyRange returns the keys visible to at least one row of [i0, i1).
func (b *band) keyRange(i0, i1 int) (lo, hi int) {
	lo = max(0, i0+b.off-b.left)
	hi = min(b.nk, i1-1+b.off+b.right+1)
	return lo, max(lo, hi)
}

func (b *band) keySpan(rb rowBlock) (lo, hi int) { return b.keyRange(rb.i0, rb.i1) }

func (b *band) nextKey(rb rowBlock, j int) int {
	lo, hi := b.keyRange(rb.i0, rb.i1)
	if lo >= hi {
		return max(j, b.nk)
	}
	return max(j, lo)
}

func (b *band) querySpan(_, j0, j1 int) (lo, hi int) {
	lo = max(0, j0-b.off-b.right)
	hi = min(b.nq, j1-b.off+b.left)
	return lo, max(lo, hi)
}

func (b *band) tile(rb rowBlock, j0, j1 int) BlockKind {
	i0, i1 := rb.i0, rb.i1
	switch {
	case j0 >= j1 || i0 >= i1:
		return BlockEmpty
	case i1-1+b.off-b.left <= j0 && i0+b.off+b.right+1 >= j1 && j1 <= b.nk:
		return BlockFull
	}
	// Empty when the band of every row misses [j0, j1).
	lo, hi := b.keyRange(i0, i1)
	if hi <= j0 || lo >= j1 {
		return BlockEmpty
	}
	return BlockPartial
}

func (b *band) hide(_, i, j0 int, row []float32, _ []bool) {
	lo, hi := b.keyRange(i, i+1)
	lo, hi = lo-j0, hi-j0
	n := len(row)
	for c := 0; c < min(lo, n); c++ {
		row[c] = negInf
	}
	for c := max(hi, 0); c < n; c++ {
		row[c] = negInf
	}
}
