package flashattn

import (
	"unsafe"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
)

// DType is the element type of a Tensor.
//
// # Mixed element types
//
// A call's products run in one compute type: the 16-bit type of q, k or v
// if any of them is bfloat16 or float16 (all 16-bit operands must share
// it), else float32. Every operand is rounded to nearest even to the
// compute type before it takes part in a product: a float32 q with a
// bfloat16 k and v (a bfloat16 KV cache, say) is rounded to bfloat16 (after
// Rotary, which rotates in float32), and so is P before P·V. The reason is
// the native 16-bit products (AVX512_BF16, AMX): they take both operands
// in the 16-bit type and accumulate in float32, as flash-attn's tensor-core
// products do; every kernel path rounds the same way. q8_0 and q4_0 values
// are exact in float32, so a quantised cache leaves the compute type
// float32 and a float32 q is not rounded: with a float32 q, a q8_0 cache
// gives float32 products while a bfloat16 cache gives bfloat16 ones. With
// a 16-bit q, a quantised cache's values are rounded to q's type. New keys
// and values (KVCache.KNew, VNew) are stored in the cache's type. O is
// written in out's type (q's for Forward), LSE in float32. To keep float32
// queries with a 16-bit cache, Convert the cache to float32.
type DType uint8

const (
	// Float32 is IEEE binary32 (Tensor.Data).
	Float32 DType = iota
	// BFloat16 is bfloat16 (Tensor.BF16): float32's exponent, 8 bits of
	// significand. DType(half.BFloat16) == BFloat16.
	BFloat16
	// Float16 is IEEE binary16 (Tensor.F16). DType(half.Float16) ==
	// Float16.
	Float16
	// Q8_0 is llama.cpp's 8-bit block format (Tensor.Q8), for the k and v
	// of a KV cache: blocks of 32 values of one row, each stored as an fp16
	// scale d followed by 32 int8 q (34 bytes), value = q·d. Dim and the
	// strides (in values) must be multiples of 32.
	Q8_0
	// Q4_0 is llama.cpp's 4-bit block format (Tensor.Q4), for the k and v
	// of a KV cache: blocks of 32 values of one row, each stored as an fp16
	// scale d followed by 16 bytes of 4-bit codes c (18 bytes), value =
	// (c − 8)·d; byte j holds value j in its low nibble and value j+16 in
	// its high one. Dim and the strides (in values) must be multiples of 32.
	Q4_0
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
	case Q4_0:
		return "q4_0"
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

// Format returns the 16-bit format of d and true, or false when d is not
// a 16-bit type.
func (d DType) Format() (half.Format, bool) {
	if d == BFloat16 || d == Float16 {
		return half.Format(d), true
	}
	return 0, false
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
	case Q4_0:
		t.Q4 = make([]byte, kernel.Q4RowBytes(n+kernel.Q4Block-1))
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
	case t.Q4 != nil:
		return Q4_0
	}
	return Float32
}

// fields counts the data fields that are set.
func (t Tensor) fields() (n int) {
	for _, set := range []bool{t.Data != nil, t.BF16 != nil, t.F16 != nil, t.Q8 != nil, t.Q4 != nil} {
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
	if t.Q4 != nil {
		return len(t.Q4) / kernel.Q4BlockBytes * kernel.Q4Block
	}
	return len(t.Data)
}

// computeType is the type the products round to: the 16-bit type of any
// input (all 16-bit inputs must share it), else Float32.
func computeType(ts ...Tensor) (DType, error) {
	ct := Float32
	for _, t := range ts {
		dt := t.DType()
		if dt == Float32 || dt.quantized() { // q8_0 and q4_0 values are exact in float32
			continue
		}
		if ct != Float32 && ct != dt {
			return 0, argErr("k", "inputs mix %v and %v: 16-bit inputs must share one type", ct, dt)
		}
		ct = dt
	}
	return ct, nil
}

// quantized reports whether d is a block-quantised cache format (q8_0,
// q4_0), accepted only as the k and v of a KV cache.
func (d DType) quantized() bool { return d == Q8_0 || d == Q4_0 }

// quantBytes is the size in bytes of n values (a multiple of 32) of the
// quantised format d.
func quantBytes(d DType, n int) int {
	if d == Q4_0 {
		return kernel.Q4RowBytes(n)
	}
	return kernel.Q8RowBytes(n)
}

// quantize stores src (a multiple of 32 values) into dst in the quantised
// format d.
func quantize(d DType, dst []byte, src []float32) error {
	if d == Q4_0 {
		return kernel.QuantizeQ4(dst, src)
	}
	return kernel.QuantizeQ8(dst, src)
}

// dequantize sets dst (a multiple of 32 values) from src in the quantised
// format d.
func dequantize(d DType, dst []float32, src []byte) error {
	if d == Q4_0 {
		return kernel.DequantizeQ4(dst, src)
	}
	return kernel.DequantizeQ8(dst, src)
}
