package flashattn

import (
	"math"

	"github.com/flashattn/flashattn/half"
)

// Bias is an additive attention bias, the ONNX, GoMLX and PyTorch SDPA
// attn_mask convention: a tensor [batch, heads, seqlen_q, seqlen_k] of
// float32, bf16 or fp16 values added to the scaled scores, as a ready
// ScoreMod (set it as Options.ScoreMod). Every dimension of size 1
// broadcasts (PyTorch's rule): a key-padding bias is [batch, 1, 1, seqlen_k],
// a learned relative-position bias shared by the batch [1, heads, seqlen_q,
// seqlen_k]:
//
//	x[b, h, i, j] += Data[b', h', i', j']   (each primed index 0 where the bias's dimension is 1)
//
// 16-bit data is widened to float32 row by row as the scores need it. −Inf
// hides a position (a mask in the bias); NaN propagates as a score's NaN
// would. The bias does not depend on the score, so its derivative is 1
// and the backward's chain rule is unchanged; its own gradient, dS summed
// over the broadcast dimensions, is Grads.DBias. Positions are those the
// ScoreMod sees (from each sequence's start, plus Options.Offsets), and a
// call whose sequences reach beyond the bias is refused.
type Bias struct {
	values                   []float32   // float32 data, or nil
	bf16                     []half.BF16 // bf16 data, or nil
	f16                      []half.F16  // fp16 data, or nil
	batch, heads, seqQ, seqK int
}

// biasChunk is how many 16-bit values Apply widens at a time (on the stack).
const biasChunk = 64

// NewBias wraps data, a dense row-major [batch, heads, seqQ, seqK] tensor
// (any dimension may be 1 to broadcast), as a Bias. The slice is used as
// it is (not copied): do not change it while calls use the bias. See
// NewBiasOf for 16-bit data.
func NewBias(data []float32, batch, heads, seqQ, seqK int) (*Bias, error) {
	return NewBiasOf(data, batch, heads, seqQ, seqK)
}

// NewBiasOf is NewBias for data of any element type: float32, half.BF16 or
// half.F16 (16-bit data is widened to float32 as the scores need it; it is
// not copied either).
func NewBiasOf[T Element](data []T, batch, heads, seqQ, seqK int) (*Bias, error) {
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
	b := &Bias{batch: batch, heads: heads, seqQ: seqQ, seqK: seqK}
	switch d := any(data).(type) {
	case []float32:
		b.values = d
	case []half.BF16:
		b.bf16 = d
	case []half.F16:
		b.f16 = d
	}
	return b, nil
}

// Shape returns the bias's dimensions (1 where it broadcasts), which are
// also those of its gradient, Grads.DBias.
func (b *Bias) Shape() (batch, heads, seqQ, seqK int) { return b.batch, b.heads, b.seqQ, b.seqK }

// len is the number of values of the bias (and of its gradient).
func (b *Bias) len() int { return b.batch * b.heads * b.seqQ * b.seqK }

// rowAt returns the offset of the bias row that query row q of (batch
// element bi, head h) reads.
func (b *Bias) rowAt(bi, h, q int) int {
	if b.batch == 1 {
		bi = 0
	}
	if b.heads == 1 {
		h = 0
	}
	if b.seqQ == 1 {
		q = 0
	}
	return ((bi*b.heads+h)*b.seqQ + q) * b.seqK
}

// Apply implements ScoreMod.
func (b *Bias) Apply(bi, h, q, kv0 int, x, dx []float32) {
	off := b.rowAt(bi, h, q)
	if b.seqK == 1 {
		b.addRow(x, off, 0) // one value for every key
	} else {
		b.addRow(x, off+kv0, 1)
	}
	for c := range dx {
		dx[c] = 1
	}
}

// addRow adds to x the bias values from offset off on, stepping by step (0:
// the one value at off to every entry), widening 16-bit data a chunk at a
// time.
func (b *Bias) addRow(x []float32, off, step int) {
	if b.values != nil {
		if step == 0 {
			v := b.values[off]
			for c := range x {
				x[c] += v
			}
			return
		}
		for c, v := range b.values[off:][:len(x)] {
			x[c] += v
		}
		return
	}
	var buf [biasChunk]float32
	for c0 := 0; c0 < len(x); c0 += biasChunk {
		n := min(biasChunk, len(x)-c0)
		w := buf[:n]
		if step == 0 {
			w = buf[:1]
		}
		o := off + step*c0
		if b.bf16 != nil {
			half.DecodeBF16(w, b.bf16[o:][:len(w)])
		} else {
			half.DecodeF16(w, b.f16[o:][:len(w)])
		}
		for c := range x[c0 : c0+n] {
			x[c0+c] += w[c*step]
		}
	}
}

// Covers returns the batch elements and positions the bias covers (a
// broadcast dimension covers any number).
func (b *Bias) Covers() (batch, seqQ, seqK int) {
	all := func(n int) int {
		if n == 1 {
			return math.MaxInt
		}
		return n
	}
	return all(b.batch), all(b.seqQ), all(b.seqK)
}

func (b *Bias) dataRegion() region {
	switch {
	case b.bf16 != nil:
		return sliceRegion(b.bf16)
	case b.f16 != nil:
		return sliceRegion(b.f16)
	}
	return sliceRegion(b.values)
}

func (b *Bias) dataHeads() int { return b.heads }
