package flashattn

import "fmt"

// Tensor is a view of a float32 tensor in flash-attn's layout
// [Batch, Seq, Heads, Dim]. Element (b, s, h, d) is at
//
//	Data[b*BatchStride + s*SeqStride + h*HeadStride + d]
//
// Dim is always contiguous. Zero strides mean the dense layout
// (HeadStride = Dim, SeqStride = Heads*Dim, BatchStride = Seq*Heads*Dim), so a
// plain slice needs only its shape. Explicit strides let a caller pass Q, K
// and V sliced out of one packed QKV buffer without copying (see PackedQKV).
//
// For variable-length batches (Options.VarLen) the packed layout
// [total, Heads, Dim] is a Tensor with Batch = 1 and Seq = total.
type Tensor struct {
	Data                               []float32
	Batch, Seq, Heads, Dim             int
	BatchStride, SeqStride, HeadStride int
}

// NewTensor allocates a dense zeroed tensor of the given shape. Like make,
// it panics if a dimension is negative.
func NewTensor(batch, seq, heads, dim int) Tensor {
	return Tensor{Data: make([]float32, batch*seq*heads*dim), Batch: batch, Seq: seq, Heads: heads, Dim: dim}
}

// Dense wraps data as a dense tensor of the given shape. The length of data is
// checked when the tensor is used.
func Dense(data []float32, batch, seq, heads, dim int) Tensor {
	return Tensor{Data: data, Batch: batch, Seq: seq, Heads: heads, Dim: dim}
}

// PackedQKV returns Q, K and V views of a packed buffer laid out as
// [batch, seq, 3, heads, dim] (the layout of flash-attn's qkvpacked functions).
func PackedQKV(data []float32, batch, seq, heads, dim int) (q, k, v Tensor) {
	hd := heads * dim
	view := func(off int) Tensor {
		return Tensor{Data: data[min(off, len(data)):], Batch: batch, Seq: seq, Heads: heads, Dim: dim,
			BatchStride: seq * 3 * hd, SeqStride: 3 * hd, HeadStride: dim}
	}
	return view(0), view(hd), view(2 * hd)
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

// At returns element (b, s, h, d). It panics if out of range, like a slice.
func (t Tensor) At(b, s, h, d int) float32 {
	bs, ss, hs := t.strides()
	return t.Data[b*bs+s*ss+h*hs+d]
}

// view is a checked tensor: strides resolved and bounds verified, so the
// kernels can index it freely.
type view struct {
	data       []float32
	bs, ss, hs int
}

// row returns the slice starting at (b, s, h, 0).
func (v view) row(b, s, h int) []float32 { return v.data[b*v.bs+s*v.ss+v.hs*h:] }

// check validates t as the tensor called name with the expected shape and
// returns its resolved view. A negative expectation means "any". Rows must
// not overlap: each (b, s, h) row has its own Dim elements (the kernels read
// rows as a matrix with leading dimension SeqStride).
func (t Tensor) check(name string, output bool, batch, seq, heads, dim int) (view, error) {
	if t.Data == nil {
		return view{}, fmt.Errorf("flashattn: %s is nil", name)
	}
	if t.Batch <= 0 || t.Seq <= 0 || t.Heads <= 0 || t.Dim <= 0 {
		return view{}, fmt.Errorf("flashattn: %s has shape [%d %d %d %d]; every dimension must be ≥ 1", name, t.Batch, t.Seq, t.Heads, t.Dim)
	}
	want := [4]int{batch, seq, heads, dim}
	got := [4]int{t.Batch, t.Seq, t.Heads, t.Dim}
	axes := [4]string{"batch", "seqlen", "heads", "headdim"}
	for a := range want {
		if want[a] >= 0 && want[a] != got[a] {
			return view{}, fmt.Errorf("flashattn: %s has %s %d, want %d (shape [%d %d %d %d])", name, axes[a], got[a], want[a], got[0], got[1], got[2], got[3])
		}
	}
	bs, ss, hs := t.strides()
	if bs < 0 || ss < 0 || hs < 0 {
		return view{}, fmt.Errorf("flashattn: %s has a negative stride", name)
	}
	if (t.Heads > 1 && hs < t.Dim) ||
		(t.Seq > 1 && ss < (t.Heads-1)*hs+t.Dim) ||
		(t.Batch > 1 && bs < (t.Seq-1)*ss+(t.Heads-1)*hs+t.Dim) {
		kind := "input"
		if output {
			kind = "output"
		}
		return view{}, fmt.Errorf("flashattn: %s %s strides (batch %d, seq %d, head %d) make rows of headdim %d overlap", kind, name, bs, ss, hs, t.Dim)
	}
	// The last element must lie inside Data; computed in int64-safe steps.
	last := int64(t.Batch-1)*int64(bs) + int64(t.Seq-1)*int64(ss) + int64(t.Heads-1)*int64(hs) + int64(t.Dim)
	if last > int64(len(t.Data)) {
		return view{}, fmt.Errorf("flashattn: %s needs %d elements for shape [%d %d %d %d] with its strides, has %d", name, last, t.Batch, t.Seq, t.Heads, t.Dim, len(t.Data))
	}
	if t.Seq == 1 {
		// Unused for stepping, but kernels take it as a leading dimension.
		ss = max(ss, (t.Heads-1)*hs+t.Dim)
	}
	return view{data: t.Data, bs: bs, ss: ss, hs: hs}, nil
}
