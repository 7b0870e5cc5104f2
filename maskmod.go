package flashattn

import (
	"fmt"
	"math"
)

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

// A BoundedMask is a Mask defined only on part of the position space:
// masks built from per-position data (Documents' segment ids) cover the
// batch elements and positions their data describes. Forward, Backward and
// NewBlockMask refuse, with an *ArgError, a call whose sequences or block
// shape reach beyond what the mask covers, instead of reading past its data
// or hiding the uncovered positions.
type BoundedMask interface {
	Mask
	// Covers returns how many batch elements (sequences with VarLen) and
	// query and key positions the mask is defined for; math.MaxInt bounds
	// nothing.
	Covers() (batch, seqQ, seqK int)
}

// checkCovers refuses a call of batch sequences of at most seqQ queries and
// seqK keys that x (a Mask or a ScoreMod), if it says what it covers (a
// BoundedMask, a Bias), does not cover.
func checkCovers(arg string, x any, batch, seqQ, seqK int) error {
	bm, ok := x.(interface {
		Covers() (batch, seqQ, seqK int)
	})
	if !ok {
		return nil
	}
	b, q, k := bm.Covers()
	if batch > b || seqQ > q || seqK > k {
		return argErr(arg, "%s covers %s × %s × %s, but the call has %d × %d × %d", arg,
			coverCount(b, "batch elements"), coverCount(q, "queries"), coverCount(k, "keys"), batch, seqQ, seqK)
	}
	return nil
}

// coverCount says how many of what a Covers count covers: n, or, for
// math.MaxInt, any number (a broadcast dimension).
func coverCount(n int, what string) string {
	if n == math.MaxInt {
		return "any number of " + what + " (broadcast)"
	}
	return fmt.Sprintf("%d %s", n, what)
}

// checkMask refuses a nil mask, a nil MaskFunc and an And of either.
func checkMask(arg string, m Mask) error {
	switch m := m.(type) {
	case nil:
		return argErr(arg, "%s is nil", arg)
	case andMask:
		for i, x := range m {
			if err := checkMask(arg, x); err != nil {
				return argErr(arg, "%s: And's mask %d: %s", arg, i, err.(*ArgError).Msg)
			}
		}
	default:
		if isNil(m) {
			return argErr(arg, "%s is a nil %T", arg, m)
		}
	}
	return nil
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

// Covers implements BoundedMask: what every bounded part covers.
func (a andMask) Covers() (batch, seqQ, seqK int) {
	batch, seqQ, seqK = math.MaxInt, math.MaxInt, math.MaxInt
	for _, m := range a {
		if bm, ok := m.(BoundedMask); ok {
			b, q, k := bm.Covers()
			batch, seqQ, seqK = min(batch, b), min(seqQ, q), min(seqK, k)
		}
	}
	return batch, seqQ, seqK
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

// maskVis is an Options.Mask seen from one sequence, whose rows and keys
// are the mask's positions qo.. and ko.. (Options.Offsets).
type maskVis struct {
	m      Mask
	cls    BlockClassifier // nil if m does not classify blocks
	b      int
	nq, nk int
	qo, ko int
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
		c := v.cls.Classify(v.b, h, rb.i0+v.qo, rb.i1+v.qo, j0+v.ko, j1+v.ko)
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
	v.m.Hide(v.b, h, i+v.qo, j0+v.ko, k)
	hideWhere(row, k)
}
