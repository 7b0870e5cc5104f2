package flashattn

// A Mask decides, element by element, which keys each query row sees
// (FlexAttention's mask_mod). flashattn calls it one row of a tile at a
// time, so that an implementation can work on a whole run of keys at once
// (and never once per score in the inner loop of the products).
//
// Positions count from the start of each sequence: q is the query row and
// kv0 the first key of the run (with VarLen and KV caches too). b is the
// batch element (the sequence with VarLen) and h the query head.
// Implementations must be pure functions of their arguments and safe for
// concurrent use: the same row is evaluated again in the backward pass.
type Mask interface {
	// Hide clears keep[c] for every key kv0+c that query row q of batch
	// element b and query head h must not see. keep arrives all true.
	Hide(b, h, q, kv0 int, keep []bool)
}

// A BlockClassifier decides a whole block of a mask at once. Masks that
// implement it let flashattn skip empty tiles and compute full tiles without
// evaluating the mask; all built-in masks do. Classify must be exact when it
// answers BlockEmpty or BlockFull (BlockPartial is always a correct answer:
// the elements are then evaluated).
type BlockClassifier interface {
	// Classify reports whether query rows [q0, q1) of (b, h) see none,
	// some or all of keys [kv0, kv1).
	Classify(b, h, q0, q1, kv0, kv1 int) BlockKind
}

// MaskFunc adapts a function of one score position to a Mask: key kv is
// visible to query row q of (b, h) iff it returns true. It is called once per
// element of the tiles it decides, so a Mask that handles a run of keys at
// once is faster.
type MaskFunc func(b, h, q, kv int) bool

// Hide implements Mask.
func (f MaskFunc) Hide(b, h, q, kv0 int, keep []bool) {
	for c := range keep {
		if !f(b, h, q, kv0+c) {
			keep[c] = false
		}
	}
}

// And returns the intersection of masks: a key is visible only if every mask
// shows it. It is a BlockClassifier: a block is empty if any mask that
// classifies says so, and full only if every mask classifies it as full.
func And(masks ...Mask) Mask {
	return andMask(append([]Mask(nil), masks...))
}

type andMask []Mask

func (a andMask) Hide(b, h, q, kv0 int, keep []bool) {
	for _, m := range a {
		m.Hide(b, h, q, kv0, keep)
	}
}

func (a andMask) Classify(b, h, q0, q1, kv0, kv1 int) BlockKind {
	k := BlockFull
	for _, m := range a {
		c, ok := m.(BlockClassifier)
		if !ok {
			k = k.and(BlockPartial)
			continue
		}
		if k = k.and(c.Classify(b, h, q0, q1, kv0, kv1)); k == BlockEmpty {
			return k
		}
	}
	return k
}

// maskVis is an Options.Mask seen from one sequence.
type maskVis struct {
	m      Mask
	cls    BlockClassifier // nil if m does not classify blocks
	b      int
	nq, nk int
}

func (v *maskVis) keySpan(rowBlock) (lo, hi int) { return 0, v.nk }
func (v *maskVis) nextKey(_ rowBlock, j int) int { return j }
func (v *maskVis) querySpan(_, _, _ int) (int, int) {
	return 0, v.nq
}

func (v *maskVis) tile(rb rowBlock, j0, j1 int) BlockKind {
	if v.cls == nil {
		return BlockPartial
	}
	k := BlockFull
	for h := rb.h0; h < rb.h0+rb.nh; h++ {
		c := v.cls.Classify(v.b, h, rb.i0, rb.i1, j0, j1)
		if h == rb.h0 {
			k = c
		} else {
			k = k.or(c)
		}
		if k == BlockPartial {
			break
		}
	}
	return k
}

func (v *maskVis) hide(h, i, j0 int, row []float32, keep []bool) {
	k := keep[:len(row)]
	for c := range k {
		k[c] = true
	}
	v.m.Hide(v.b, h, i, j0, k)
	hideWhere(row, k)
}
