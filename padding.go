package flashattn

import (
	"math"
	"slices"
)

// padding.go is the mask of a padded dense batch: sequences of different
// lengths stored [batch, seqlen, heads, dim] with padding after each one.

// KeyPadding returns the mask of a padded dense batch (PyTorch's
// key_padding_mask): batch element b's keys 0..lens[b]-1 are real, the
// keys after them padding that no query row sees. A length ≤ 0 hides every
// key (the element's rows get O = 0 and LSE = −Inf); one at or past the
// call's seqlen_k hides none. The lengths are copied. Whole tiles of
// padding are skipped.
//
// Padded query rows are computed like the others (they see the real keys);
// their outputs are to be ignored. To skip them, and for sequences packed
// without padding, use VarLen (CuSeqlensQ/K, or SeqUsedQ/SeqUsedK on a
// padded [1, batch·seqlen, heads, dim] view of the batch), or Documents with
// id −1 on the padded positions. KeyPadding covers len(lens) batch
// elements (see BoundedMask).
func KeyPadding(lens ...int) Mask {
	return keyPadding(slices.Clone(lens))
}

type keyPadding []int

// Covers implements BoundedMask: one length per batch element.
func (k keyPadding) Covers() (batch, seqQ, seqK int) { return len(k), math.MaxInt, math.MaxInt }

func (k keyPadding) Hide(b, _, _, kv0 int, keep []bool) {
	n := max(k[b]-kv0, 0) // keys kv0..kv0+n-1 are real
	if n < len(keep) {
		clear(keep[n:])
	}
}

func (k keyPadding) Classify(b, _, _, _, kv0, kv1 int) BlockKind {
	switch {
	case kv0 >= k[b]:
		return BlockEmpty
	case kv1 <= k[b]:
		return BlockFull
	}
	return BlockPartial
}
