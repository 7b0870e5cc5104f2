package flashattn

import (
	"math"
	"slices"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
)

// Tensor is a view of a tensor in flash-attn's layout [Batch, Seq, Heads,
// Dim], of float32, bfloat16 or float16 elements (or q8_0 blocks for a KV
// cache, see Q8_0): exactly one of Data, BF16, F16 and Q8 is set, and
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
// For variable-length batches (Options.VarLen) the packed layout
// [total, Heads, Dim] is a Tensor with Batch = 1 and Seq = total.
type Tensor struct {
	Data                               []float32
	BF16                               []half.BF16
	F16                                []half.F16
	Q8                                 []byte // q8_0 blocks (see Q8_0)
	Batch, Seq, Heads, Dim             int
	BatchStride, SeqStride, HeadStride int
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
// like a slice.
func (t Tensor) At(b, s, h, d int) float32 {
	bs, ss, hs := t.strides()
	i := b*bs + s*ss + h*hs + d
	switch {
	case t.BF16 != nil:
		return t.BF16[i].Float32()
	case t.F16 != nil:
		return t.F16[i].Float32()
	case t.Q8 != nil:
		var blk [kernel.Q8Block]float32
		o := i / kernel.Q8Block * kernel.Q8BlockBytes
		if err := kernel.DequantizeQ8(blk[:], t.Q8[o:o+kernel.Q8BlockBytes]); err != nil {
			panic(err)
		}
		return blk[i%kernel.Q8Block]
	}
	return t.Data[i]
}

// view is a checked tensor: strides resolved and bounds verified, so the
// kernels can index it freely. Its elements are in data (float32) or in h
// (16-bit, of type dt).
type view struct {
	data       []float32
	h          []uint16
	q8         []byte
	dt         DType
	bs, ss, hs int
	shape      [4]int // batch, seq, heads, dim
}

// row returns the slice starting at (b, s, h, 0) of a float32 view.
func (v view) row(b, s, h int) []float32 { return v.data[v.off(b, s, h):] }

// axis is one outer dimension of a view: its extent and its stride.
type axis struct{ n, stride int }

// axes returns the batch, seq and head axes.
func (v view) axes() [3]axis {
	return [3]axis{{v.shape[0], v.bs}, {v.shape[1], v.ss}, {v.shape[2], v.hs}}
}

// mulAdd returns a*b + c and whether it fits in an int without overflow
// (a, b, c ≥ 0).
func mulAdd(a, b, c int) (int, bool) {
	if a != 0 && b > (math.MaxInt-c)/a {
		return 0, false
	}
	return a*b + c, true
}

// check validates t as the tensor called name with the expected shape and
// returns its resolved view. A negative expectation means "any". No two
// elements may share memory: the outer axes, ordered by stride, must nest
// (each stride at least the span of the axes inside it), which every
// permutation of a dense layout does. All size arithmetic is checked for
// overflow.
func (t Tensor) check(name string, output bool, batch, seq, heads, dim int) (view, error) {
	switch t.fields() {
	case 0:
		return view{}, argErr(name, "%s is nil", name)
	case 1:
	default:
		return view{}, argErr(name, "%s has more than one of Data, BF16 and F16 set", name)
	}
	if t.Batch <= 0 || t.Seq <= 0 || t.Heads <= 0 || t.Dim <= 0 {
		return view{}, argErr(name, "%s has shape [%d %d %d %d]; every dimension must be ≥ 1", name, t.Batch, t.Seq, t.Heads, t.Dim)
	}
	want := [4]int{batch, seq, heads, dim}
	got := [4]int{t.Batch, t.Seq, t.Heads, t.Dim}
	names := [4]string{"batch", "seqlen", "heads", "headdim"}
	for a := range want {
		if want[a] >= 0 && want[a] != got[a] {
			return view{}, argErr(name, "%s has %s %d, want %d (shape [%d %d %d %d])", name, names[a], got[a], want[a], got[0], got[1], got[2], got[3])
		}
	}
	if t.BatchStride < 0 || t.SeqStride < 0 || t.HeadStride < 0 {
		return view{}, argErr(name, "%s has a negative stride (batch %d, seq %d, head %d)", name, t.BatchStride, t.SeqStride, t.HeadStride)
	}
	// Default strides, computed without overflow.
	hs, ss, bs := t.HeadStride, t.SeqStride, t.BatchStride
	ok := true
	if hs == 0 {
		hs = t.Dim
	}
	if ss == 0 {
		ss, ok = mulAdd(t.Heads, hs, 0)
	}
	if bs == 0 && ok {
		bs, ok = mulAdd(t.Seq, ss, 0)
	}
	if !ok {
		return view{}, argErr(name, "%s shape [%d %d %d %d] is too large: its size overflows int", name, t.Batch, t.Seq, t.Heads, t.Dim)
	}
	v := view{data: t.Data, h: t.bits(), q8: t.Q8, dt: t.DType(), bs: bs, ss: ss, hs: hs, shape: got}
	if v.dt == Q8_0 {
		for _, x := range []int{t.Dim, bs, ss, hs} {
			if x%kernel.Q8Block != 0 {
				return view{}, argErr(name, "%s is q8_0: its head dim and strides (dim %d; batch %d, seq %d, head %d) must be multiples of %d", name, t.Dim, bs, ss, hs, kernel.Q8Block)
			}
		}
	}
	// Nesting: sort the axes that have more than one index by stride.
	ax := v.axes()
	order := ax[:0:0]
	for _, a := range ax {
		if a.n > 1 {
			order = append(order, a)
		}
	}
	slices.SortStableFunc(order, func(a, b axis) int { return a.stride - b.stride })
	span := t.Dim // elements covered by one index of the next axis out
	for _, a := range order {
		if a.stride < span {
			kind := "input"
			if output {
				kind = "output"
			}
			return view{}, argErr(name, "%s %s strides (batch %d, seq %d, head %d) make elements of shape [%d %d %d %d] overlap",
				kind, name, bs, ss, hs, got[0], got[1], got[2], got[3])
		}
		if span, ok = mulAdd(a.n-1, a.stride, span); !ok {
			return view{}, argErr(name, "%s strides (batch %d, seq %d, head %d) with shape [%d %d %d %d] overflow int", name, bs, ss, hs, got[0], got[1], got[2], got[3])
		}
	}
	// span is now the distance from the first element to one past the last.
	if span > t.dataLen() {
		return view{}, argErr(name, "%s needs %d elements for shape [%d %d %d %d] with its strides, has %d", name, span, got[0], got[1], got[2], got[3], t.dataLen())
	}
	// An axis of one index is never stepped, but the kernels take the
	// seq stride as a leading dimension.
	if t.Seq == 1 {
		v.ss = max(v.ss, t.Dim)
	}
	return v, nil
}
