package flashattn

import (
	"unsafe"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
)

// DType is the element type of a Tensor.
type DType uint8

const (
	// Float32 is IEEE binary32 (Tensor.Data).
	Float32 DType = iota
	// BFloat16 is bfloat16 (Tensor.BF16): float32's exponent, 8 bits of
	// significand.
	BFloat16
	// Float16 is IEEE binary16 (Tensor.F16).
	Float16
	// Q8_0 is llama.cpp's 8-bit block format (Tensor.Q8), for the k and v
	// of a KV cache: blocks of 32 values of one row, each stored as an fp16
	// scale d followed by 32 int8 q (34 bytes), value = q·d. Dim and the
	// strides (in values) must be multiples of 32.
	Q8_0
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	case Q8_0:
		return "q8_0"
	}
	return "DType(?)"
}

// elem is the kernel element type of a 16-bit DType.
func (d DType) elem() kernel.Elem {
	if d == Float16 {
		return kernel.F16
	}
	return kernel.BF16
}

// Element is the type of a Tensor's elements: float32, half.BF16 or
// half.F16.
type Element interface {
	float32 | half.BF16 | half.F16
}

// DenseOf wraps data as a dense tensor of the given shape, of data's
// element type (Dense is DenseOf for float32).
func DenseOf[T Element](data []T, batch, seq, heads, dim int) Tensor {
	t := Tensor{Batch: batch, Seq: seq, Heads: heads, Dim: dim}
	t.setData(data)
	return t
}

// setData stores data in the field of its type.
func (t *Tensor) setData(data any) {
	switch d := data.(type) {
	case []float32:
		t.Data = d
	case []half.BF16:
		t.BF16 = d
	case []half.F16:
		t.F16 = d
	}
}

// NewTensorOf allocates a dense zeroed tensor of the given element type
// and shape. Like make, it panics if a dimension is negative. (For Q8_0,
// dim must be a multiple of 32 for the tensor to be usable.)
func NewTensorOf(dt DType, batch, seq, heads, dim int) Tensor {
	n := batch * seq * heads * dim
	t := Tensor{Batch: batch, Seq: seq, Heads: heads, Dim: dim}
	switch dt {
	case BFloat16:
		t.BF16 = make([]half.BF16, n)
	case Float16:
		t.F16 = make([]half.F16, n)
	case Q8_0:
		t.Q8 = make([]byte, kernel.Q8RowBytes(n+kernel.Q8Block-1))
	default:
		t.Data = make([]float32, n)
	}
	return t
}

// DType returns the element type of t: the type of its one data field
// that is set (Float32 when none is).
func (t Tensor) DType() DType {
	switch {
	case t.BF16 != nil:
		return BFloat16
	case t.F16 != nil:
		return Float16
	case t.Q8 != nil:
		return Q8_0
	}
	return Float32
}

// fields counts the data fields that are set.
func (t Tensor) fields() (n int) {
	for _, set := range []bool{t.Data != nil, t.BF16 != nil, t.F16 != nil, t.Q8 != nil} {
		if set {
			n++
		}
	}
	return n
}

// bits returns the 16-bit data of t as uint16s (nil for float32).
func (t Tensor) bits() []uint16 {
	switch {
	case t.BF16 != nil:
		return unsafe.Slice((*uint16)(unsafe.SliceData(t.BF16)), len(t.BF16))
	case t.F16 != nil:
		return unsafe.Slice((*uint16)(unsafe.SliceData(t.F16)), len(t.F16))
	}
	return nil
}

// dataLen is the number of elements of t's data.
func (t Tensor) dataLen() int {
	if b := t.bits(); b != nil {
		return len(b)
	}
	if t.Q8 != nil {
		return len(t.Q8) / kernel.Q8BlockBytes * kernel.Q8Block
	}
	return len(t.Data)
}

// computeType is the type the products round to: the 16-bit type of any
// input (all 16-bit inputs must share it), else Float32.
func computeType(ts ...Tensor) (DType, error) {
	ct := Float32
	for _, t := range ts {
		dt := t.DType()
		if dt == Float32 || dt == Q8_0 { // q8_0 values are exact in float32
			continue
		}
		if ct != Float32 && ct != dt {
			return 0, argErr("k", "inputs mix %v and %v: 16-bit inputs must share one type", ct, dt)
		}
		ct = dt
	}
	return ct, nil
}

// off returns the element offset of row (b, s, h).
func (v view) off(b, s, h int) int { return b*v.bs + s*v.ss + v.hs*h }

// rowTo writes row (b, s, h) of v into dst (len(dst) elements, at most the
// head dim) as float32, rounded to ct when v is float32 and ct is not.
func (v view) rowTo(dst []float32, b, s, h int, ct DType, k *kernel.Impl) {
	o := v.off(b, s, h)
	switch v.dt {
	case Float32:
		copy(dst, v.data[o:o+len(dst)])
		if ct != Float32 {
			roundTo(dst, ct, k)
		}
	case BFloat16:
		k.BF16ToF32(dst, v.h[o:o+len(dst)])
	case Float16:
		k.F16ToF32(dst, v.h[o:o+len(dst)])
	case Q8_0:
		// Whole rows only: checked tensors have dim and strides of 32s.
		kernel.DequantizeQ8(dst, v.q8[kernel.Q8RowBytes(o):kernel.Q8RowBytes(o+len(dst))])
		if ct != Float32 {
			roundTo(dst, ct, k)
		}
	}
}

// rows returns rows (b, s..s+n-1, h) of v as a float32 matrix of n rows of
// the head dim, and its leading dimension: v's own memory when it is
// float32 and needs no rounding, else *scratch filled by conversion.
func (v view) rows(scratch *[]float32, b, s, h, n int, ct DType, k *kernel.Impl) ([]float32, int) {
	d := v.shape[3]
	if v.dt == Float32 && ct == Float32 {
		return v.data[v.off(b, s, h):], v.ss
	}
	buf := grow(scratch, n*d)
	for r := 0; r < n; r++ {
		v.rowTo(buf[r*d:(r+1)*d], b, s+r, h, ct, k)
	}
	return buf, d
}

// storeRow writes src (the head dim's elements) to row (b, s, h) of v,
// rounding to v's type. Only a Q8_0 row can fail (NaN, Inf or values beyond
// what its fp16 scale holds).
func (v view) storeRow(src []float32, b, s, h int, k *kernel.Impl) error {
	o := v.off(b, s, h)
	switch v.dt {
	case Q8_0:
		return kernel.QuantizeQ8(v.q8[kernel.Q8RowBytes(o):kernel.Q8RowBytes(o+len(src))], src)
	case Float32:
		copy(v.data[o:o+len(src)], src)
	case BFloat16:
		k.F32ToBF16(v.h[o:o+len(src)], src)
	case Float16:
		k.F32ToF16(v.h[o:o+len(src)], src)
	}
	return nil
}

// roundTo rounds x in place to the values of type ct (to nearest even).
func roundTo(x []float32, ct DType, k *kernel.Impl) { k.RoundF32(x, ct.elem()) }

// commit stores row, returned by workspace.outRow for row (b, s, h) of v, in
// v: nothing to do for float32, a rounding conversion for 16-bit types.
func (v view) commit(row []float32, b, s, h int, k *kernel.Impl) {
	if v.dt != Float32 {
		v.storeRow(row, b, s, h, k)
	}
}

// denseView is a float32 view of buf with the dense layout of shape.
func denseView(buf []float32, shape [4]int) view {
	hs := shape[3]
	ss := shape[2] * hs
	return view{data: buf, dt: Float32, bs: shape[1] * ss, ss: ss, hs: hs, shape: shape}
}

// rows16 returns row (b, s, h) of a 16-bit view and the seq stride, for
// copying 16-bit rows as they are.
func (v view) rows16(b, s, h int) ([]uint16, int) { return v.h[v.off(b, s, h):], v.ss }

// toHalf rounds src to the 16-bit type ct into dst.
func toHalf(k *kernel.Impl, ct DType, dst []uint16, src []float32) {
	if ct == Float16 {
		k.F32ToF16(dst, src)
	} else {
		k.F32ToBF16(dst, src)
	}
}

// Convert copies src into dst, which must have src's shape, converting the
// elements to dst's type: rounding to nearest even for bfloat16 and
// float16, quantising each block of 32 values for q8_0 (as llama.cpp's
// quantize_row_q8_0 does; NaN, Inf and values too large for its fp16 scale
// are an error). Use it to fill a compact KV cache.
func Convert(dst, src Tensor) error {
	sv, err := src.check("src", false, -1, -1, -1, -1)
	if err != nil {
		return err
	}
	dv, err := dst.check("dst", true, src.Batch, src.Seq, src.Heads, src.Dim)
	if err != nil {
		return err
	}
	if overlaps(viewRegion(dv), viewRegion(sv)) {
		return argErr("dst", "dst shares memory with src")
	}
	k := kernel.Select()
	row := make([]float32, src.Dim)
	for b := 0; b < src.Batch; b++ {
		for s := 0; s < src.Seq; s++ {
			for h := 0; h < src.Heads; h++ {
				sv.rowTo(row, b, s, h, Float32, &k)
				if err := dv.storeRow(row, b, s, h, &k); err != nil {
					return argErr("src", "src row (%d, %d, %d): %v", b, s, h, err)
				}
			}
		}
	}
	return nil
}
