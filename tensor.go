package flashattn

import (
	"sync"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
)

// Tensor is a view of a tensor in flash-attn's layout [Batch, Seq, Heads,
// Dim], of float32, bfloat16 or float16 elements (or, for a KV cache, q8_0
// or q4_0 blocks or fp8 bytes, see Q8_0, Q4_0, FP8E4M3 and FP8E5M2):
// exactly one of Data, BF16, F16, Q8, Q4, E4M3 and E5M2 is set, and
// element (b, s, h, d) is at
//
//	Data[b*BatchStride + s*SeqStride + h*HeadStride + d]
//
// (or BF16[...], F16[...]).
// Dim is always contiguous. Zero strides mean the dense layout
// (HeadStride = Dim, SeqStride = Heads*Dim, BatchStride = Seq*Heads*Dim), so a
// plain slice needs only its shape. Explicit strides let a caller pass views
// without copying: Q, K and V sliced out of one packed QKV buffer (see
// PackedQKV), or PyTorch's [batch, heads, seq, dim] and [seq, batch, heads,
// dim] layouts. Any strides are accepted as long as no two elements of the
// view share memory.
//
// q, k and v may have different types; a 16-bit one makes the products
// 16-bit and rounds the float32 operands to it (see "Mixed element types"
// on DType).
//
// For variable-length batches (Options.VarLen) the packed layout
// [total, Heads, Dim] is a Tensor with Batch = 1 and Seq = total.
type Tensor struct {
	Data                               []float32
	BF16                               []half.BF16
	F16                                []half.F16
	Q8                                 []byte // q8_0 blocks (see Q8_0)
	Q4                                 []byte // q4_0 blocks (see Q4_0)
	E4M3                               []byte // fp8 e4m3fn values (see FP8E4M3)
	E5M2                               []byte // fp8 e5m2 values (see FP8E5M2)
	Batch, Seq, Heads, Dim             int
	BatchStride, SeqStride, HeadStride int
	// Scale is the per-tensor scale of the fp8 types (vLLM's k_scale and
	// v_scale): value = stored·Scale, and writes store x/Scale; 0 means 1.
	// It must be 0 or a positive finite normal float32 (not subnormal:
	// ≥ 2⁻¹²⁶), and 0 for the other types.
	Scale float32
}

// NewTensor allocates a dense zeroed tensor of the given shape. Like make,
// it panics if a dimension is negative.
func NewTensor(batch, seq, heads, dim int) Tensor {
	return Tensor{Data: make([]float32, batch*seq*heads*dim), Batch: batch, Seq: seq, Heads: heads, Dim: dim}
}

// Dense wraps data as a dense float32 tensor of the given shape (DenseOf for
// the other types). The length of data is checked when the tensor is used.
func Dense(data []float32, batch, seq, heads, dim int) Tensor {
	return Tensor{Data: data, Batch: batch, Seq: seq, Heads: heads, Dim: dim}
}

// PackedQKV returns Q, K and V views of a packed buffer laid out as
// [batch, seq, 3, heads, dim] (the layout of flash-attn's qkvpacked functions).
// The same call on a gradient buffer of that layout gives dQ, dK and dV views
// that BackwardInto accepts as its outputs.
func PackedQKV[T Element](data []T, batch, seq, heads, dim int) (q, k, v Tensor) {
	hd := heads * dim
	view := func(off int) Tensor {
		t := Tensor{Batch: batch, Seq: seq, Heads: heads, Dim: dim,
			BatchStride: seq * 3 * hd, SeqStride: 3 * hd, HeadStride: dim}
		t.setData(data[min(off, len(data)):])
		return t
	}
	return view(0), view(hd), view(2 * hd)
}

// Validate reports whether t is a well-formed tensor, as Forward checks its
// inputs, and returns the *ArgError that names it name otherwise: exactly
// one element slice set, every dimension ≥ 1, strides ≥ 0 (0 meaning dense)
// whose axes do not make elements overlap, head dim and strides multiples
// of 32 for q8_0 and q4_0, and enough elements for the shape and strides.
// Package gpu checks its host tensors with it.
func (t Tensor) Validate(name string) error {
	_, err := t.check(name, false, -1, -1, -1, -1)
	return err
}

// strides returns the effective strides, filling in dense defaults.
func (t Tensor) strides() (bs, ss, hs int) {
	hs, ss, bs = t.HeadStride, t.SeqStride, t.BatchStride
	if hs == 0 {
		hs = t.Dim
	}
	if ss == 0 {
		ss = t.Heads * hs
	}
	if bs == 0 {
		bs = t.Seq * ss
	}
	return bs, ss, hs
}

// Len returns the number of elements of the logical shape.
func (t Tensor) Len() int { return t.Batch * t.Seq * t.Heads * t.Dim }

// At returns element (b, s, h, d) as a float32. It panics if out of range,
// like a slice. It does not allocate.
func (t Tensor) At(b, s, h, d int) float32 {
	bs, ss, hs := t.strides()
	i := b*bs + s*ss + h*hs + d
	if t.Data != nil {
		return t.Data[i]
	}
	f := &formats[t.DType()]
	raw, _ := f.raw(t)
	blk := f.kf.Block()
	x := atBlocks.Get().(*[32]float32) // the block holding element i
	defer atBlocks.Put(x)
	o := f.bytes(i / blk * blk)
	f.load(&kernel.Active().Impl, x[:blk], raw[o:o+f.bytes(blk)], t.Scale)
	return x[i%blk]
}

// atBlocks holds At's buffers of one block: a buffer on At's stack would
// escape to the heap through the formats table's load, one allocation a
// call.
var atBlocks = sync.Pool{New: func() any { return new([32]float32) }}
