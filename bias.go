package flashattn

import "math"

// Bias is an additive attention bias, the ONNX and GoMLX convention: a
// float tensor [batch or 1, heads or 1, seqlen_q, seqlen_k] added to the
// scaled scores, as a ready ScoreMod (set it as Options.ScoreMod):
//
//	x[i, j] += Data[b', h', i, j]   (b' = 0 when the bias has batch 1, h' = 0 when it has one head)
//
// −Inf hides a position (a mask in the bias); NaN propagates as a score's
// NaN would. The bias does not depend on the score, so its derivative is 1
// and the backward's chain rule is unchanged; the bias's own gradient (dS
// summed over broadcast dimensions) is not computed. Positions are those
// the ScoreMod sees (from each sequence's start, plus Options.Offsets), and
// a call whose sequences reach beyond the bias is refused.
type Bias struct {
	values                   []float32
	batch, heads, seqQ, seqK int
}

// NewBias wraps data, a dense row-major [batch, heads, seqQ, seqK] tensor
// (batch and heads may be 1 to broadcast), as a Bias. The slice is used as
// it is (not copied): do not change it while calls use the bias.
func NewBias(data []float32, batch, heads, seqQ, seqK int) (*Bias, error) {
	if batch < 1 || heads < 1 || seqQ < 1 || seqK < 1 {
		return nil, argErr("shape", "NewBias: shape [%d %d %d %d]: every dimension must be ≥ 1", batch, heads, seqQ, seqK)
	}
	n, ok := mulAdd(batch, heads, 0)
	for _, x := range []int{seqQ, seqK} {
		if ok {
			n, ok = mulAdd(n, x, 0)
		}
	}
	if !ok || len(data) != n {
		return nil, argErr("data", "NewBias: data has %d elements, want %d×%d×%d×%d", len(data), batch, heads, seqQ, seqK)
	}
	return &Bias{values: data, batch: batch, heads: heads, seqQ: seqQ, seqK: seqK}, nil
}

// Apply implements ScoreMod.
func (b *Bias) Apply(bi, h, q, kv0 int, x, dx []float32) {
	if b.batch == 1 {
		bi = 0
	}
	if b.heads == 1 {
		h = 0
	}
	row := b.values[((bi*b.heads+h)*b.seqQ+q)*b.seqK+kv0:][:len(x)]
	for c, v := range row {
		x[c] += v
	}
	for c := range dx {
		dx[c] = 1
	}
}

// Covers returns the batch elements and positions the bias covers (a
// broadcast dimension covers any number).
func (b *Bias) Covers() (batch, seqQ, seqK int) {
	batch = b.batch
	if batch == 1 {
		batch = math.MaxInt
	}
	return batch, b.seqQ, b.seqK
}

func (b *Bias) data() []float32 { return b.values }
func (b *Bias) dataHeads() int  { return b.heads }
