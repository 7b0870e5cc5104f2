package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// visibility.go is the one place that decides which keys each query row
// sees. A visibility answers for one sequence, at three granularities:
//
//   - ranges: the keys a block of rows may see (keySpan, nextKey) and the
//     rows that may see a block of keys (querySpan) — nothing outside them is visible;
//   - tiles: whether a rectangle of rows × keys is entirely hidden (never
//     computed), entirely visible (computed with no per-element mask) or
//     partly visible;
//   - elements: for a partly visible tile, hide sets the hidden scores of
//     one row to −Inf.
//
// The causal/window band, block masks, element masks (Options.Mask) and
// their intersection implement it. The forward pass walks each row block's
// key tiles with nextTile; the backward pass, per key block, the row blocks
// that see it (the transposed lists) with rows and tile.
type visibility interface {
	// keySpan returns the keys [lo, hi) outside which no row of rb sees
	// anything.
	keySpan(rb rowBlock) (lo, hi int)
	// nextKey returns the first key at or after j that a row of rb may
	// see, or a value ≥ the end of keySpan(rb) when there is none.
	nextKey(rb rowBlock, j int) int
	// querySpan returns the rows [lo, hi) of head h outside which no row
	// sees a key of [j0, j1).
	querySpan(h, j0, j1 int) (lo, hi int)
	// tile classifies rows rb × keys [j0, j1).
	tile(rb rowBlock, j0, j1 int) BlockKind
	// hide sets to −Inf the scores in row (keys j0, j0+1, ...) that query
	// row i of head h does not see. keep is scratch of at least len(row).
	hide(h, i, j0 int, row []float32, keep []bool)
}

// BlockKind says how much of a block of rows × keys is visible.
type BlockKind uint8

const (
	// BlockEmpty: no row sees any key of the block; it is never computed.
	BlockEmpty BlockKind = iota
	// BlockPartial: some elements are hidden; the mask is applied element
	// by element.
	BlockPartial
	// BlockFull: every row sees every key; no mask is evaluated.
	BlockFull
)

func (k BlockKind) String() string {
	switch k {
	case BlockEmpty:
		return "empty"
	case BlockPartial:
		return "partial"
	case BlockFull:
		return "full"
	}
	return "BlockKind(?)"
}

// and combines the kinds of two masks of the same rectangle.
func (k BlockKind) and(o BlockKind) BlockKind { return min(k, o) }

// or combines the kinds of two rectangles that form one tile: empty only if
// both are, full only if both are.
func (k BlockKind) or(o BlockKind) BlockKind {
	if k == o {
		return k
	}
	return BlockPartial
}

// hideWhere sets row[c] = −Inf where keep[c] is false.
func hideWhere(row []float32, keep []bool) {
	keep = keep[:len(row)]
	for c, k := range keep {
		if !k {
			row[c] = negInf
		}
	}
}

// allOf is the intersection of several visibilities: a key is visible only
// if every part shows it.
type allOf struct {
	parts [3]visibility
	n     int
}

func (a *allOf) add(v visibility) { a.parts[a.n] = v; a.n++ }

func (a *allOf) keySpan(rb rowBlock) (lo, hi int) {
	lo, hi = a.parts[0].keySpan(rb)
	for _, v := range a.parts[1:a.n] {
		l, h := v.keySpan(rb)
		lo, hi = max(lo, l), min(hi, h)
	}
	return lo, max(lo, hi)
}

func (a *allOf) nextKey(rb rowBlock, j int) int {
	for {
		j0 := j
		for _, v := range a.parts[:a.n] {
			j = max(j, v.nextKey(rb, j))
		}
		if j == j0 {
			return j
		}
	}
}

func (a *allOf) querySpan(h, j0, j1 int) (lo, hi int) {
	lo, hi = a.parts[0].querySpan(h, j0, j1)
	for _, v := range a.parts[1:a.n] {
		l, u := v.querySpan(h, j0, j1)
		lo, hi = max(lo, l), min(hi, u)
	}
	return lo, max(lo, hi)
}

func (a *allOf) tile(rb rowBlock, j0, j1 int) BlockKind {
	k := BlockFull
	for _, v := range a.parts[:a.n] {
		if k = k.and(v.tile(rb, j0, j1)); k == BlockEmpty {
			break
		}
	}
	return k
}

func (a *allOf) hide(h, i, j0 int, row []float32, keep []bool) {
	for _, v := range a.parts[:a.n] {
		v.hide(h, i, j0, row, keep)
	}
}

// nextTile returns the next key tile [j0, j1) at or after key j (a multiple
// of kernel.W) and before hi that some row of rb sees, at most maxLen keys
// long, with its kind; j0 == hi when there is none. Tiles start on multiples
// of kernel.W (the packed K strips). A window of maxLen keys that is full is
// one tile; a partial one is cut into runs of W-key groups of one kind, so
// that full runs need no mask and empty groups are skipped.
func nextTile(v visibility, rb rowBlock, j, hi, maxLen int) (j0, j1 int, kind BlockKind) {
	const w = kernel.W
	for {
		if j = v.nextKey(rb, j); j >= hi {
			return hi, hi, BlockEmpty
		}
		j = j / w * w // tile ends are multiples of w (or hi): this stays past them
		end := min(j+maxLen, hi)
		switch kind = v.tile(rb, j, end); kind {
		case BlockFull:
			return j, end, kind
		case BlockEmpty:
			j = end
			continue
		}
		g := min(j+w, end)
		if kind = v.tile(rb, j, g); kind == BlockEmpty {
			j = g
			continue
		}
		for g < end {
			e := min(g+w, end)
			if v.tile(rb, g, e) != kind {
				break
			}
			g = e
		}
		return j, g, kind
	}
}
