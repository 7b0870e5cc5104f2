package flashattn

import (
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
	// FP8E4M3 is OCP fp8 e4m3fn (Tensor.E4M3), vLLM's kv_cache_dtype
	// fp8_e4m3, for the k and v of a KV cache: one byte per value, sign,
	// 4 exponent bits (bias 7) and 3 mantissa bits, no infinities,
	// S.1111.111 NaN, largest finite value 448. With the tensor's
	// per-tensor Scale s (0 means 1), value = stored·s; writes store
	// fp8(x/s), rounded to nearest even and saturating at ±448 (±Inf
	// too), NaN staying NaN.
	FP8E4M3
	// FP8E5M2 is OCP fp8 e5m2 (Tensor.E5M2), vLLM's fp8_e5m2: one byte,
	// sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like
	// infinities and NaNs, largest finite value 57344; Scale, rounding
	// and saturation as for FP8E4M3.
	FP8E5M2

	numDTypes // the number of element types
)

// String is the type's name: float32, bfloat16, float16, q8_0, q4_0,
// fp8_e4m3 or fp8_e5m2.
func (d DType) String() string {
	if d < numDTypes {
		return formats[d].name
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
// and shape. Like make, it panics if a dimension is negative. (For Q8_0
// and Q4_0, dim must be a multiple of 32 for the tensor to be usable.)
func NewTensorOf(dt DType, batch, seq, heads, dim int) Tensor {
	t := Tensor{Batch: batch, Seq: seq, Heads: heads, Dim: dim}
	if dt >= numDTypes {
		dt = Float32
	}
	f := &formats[dt]
	n := batch * seq * heads * dim
	return f.wrap(t, make([]byte, f.bytes(n+f.kf.Block()-1)))
}

// DType returns the element type of t: the type of its one data field
// that is set (Float32 when none is).
func (t Tensor) DType() DType {
	for dt := BFloat16; dt < numDTypes; dt++ {
		if _, ok := formats[dt].raw(t); ok {
			return dt
		}
	}
	return Float32
}

// fields counts the data fields that are set.
func (t Tensor) fields() (n int) {
	for dt := range numDTypes {
		if _, ok := formats[dt].raw(t); ok {
			n++
		}
	}
	return n
}

// bits returns the 16-bit data of t as uint16s (nil for the other types).
func (t Tensor) bits() []uint16 {
	if dt := t.DType(); dt == BFloat16 || dt == Float16 {
		b, _ := formats[dt].raw(t)
		return castSlice[uint16](b)
	}
	return nil
}

// dataLen is the number of elements of t's data.
func (t Tensor) dataLen() int {
	f := &formats[t.DType()]
	b, _ := f.raw(t)
	return len(b) / f.bytes(f.kf.Block()) * f.kf.Block()
}

// computeType is the type the products round to: the 16-bit type of any
// input (all 16-bit inputs must share it), else Float32.
func computeType(ts ...Tensor) (DType, error) {
	ct := Float32
	for _, t := range ts {
		dt := t.DType()
		if dt == Float32 || dt.cacheOnly() { // q8_0, q4_0 and fp8 values are exact in float32
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
// q4_0), whose writes can fail.
func (d DType) quantized() bool { return formats[d].kf.Block() > 1 }

// cacheOnly reports whether d is accepted only as the k and v of a KV
// cache (q8_0, q4_0 and the fp8 formats).
func (d DType) cacheOnly() bool { return formats[d].cacheOnly }

// quantBytes is the size in bytes of n values (a multiple of d's block)
// of type d.
func quantBytes(d DType, n int) int { return formats[d].bytes(n) }

// quantize stores src (a multiple of d's block of values) into dst in the
// type d, fp8 with the per-tensor scale (0 means 1).
func quantize(d DType, dst []byte, src []float32, scale float32) error {
	return formats[d].store(nil, dst, src, scale)
}
