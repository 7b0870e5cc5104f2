package kernel

import "math"

// The q4_0 format of llama.cpp (GGML_TYPE_Q4_0), used for 4-bit KV caches.
//
// A row of d values (d a multiple of 32) is stored as d/32 blocks of 18
// bytes, in order. A block holds 32 consecutive values:
//
//	bytes 0-1    d: the block's scale, an IEEE binary16 (fp16), little-endian
//	bytes 2-17   the 4-bit codes: byte 2+j holds the code of value j in its
//	             low nibble and that of value j+16 in its high nibble
//
// and value i of the block is (code_i − 8)·d, computed exactly in float32
// (a number in −8..7 times an fp16 has at most 15 significant bits). A row
// of d values takes Q4RowBytes(d) = d/32·18 bytes; rows of a cache may be
// further apart (a row stride in bytes), but a block never straddles rows.

const (
	// Q4Block is the number of values in a q4_0 block.
	Q4Block = 32
	// Q4BlockBytes is the size of a q4_0 block in bytes: a 2-byte fp16
	// scale and 16 bytes of two 4-bit codes each.
	Q4BlockBytes = 18
	// q4MaxAbs is the smallest block maximum |x| whose scale |x|/8
	// rounds to +Inf in fp16 (65520·8, exact in float32).
	q4MaxAbs = 65520 * 8
)

// Q4RowBytes returns the number of bytes of a q4_0 row of d values (d a
// multiple of Q4Block).
func Q4RowBytes(d int) int { return d / Q4Block * Q4BlockBytes }

// QuantizeQ4 stores the float32 values of src, a multiple of 32 of them,
// as q4_0 blocks into dst, which must hold exactly Q4RowBytes(len(src))
// bytes. It rounds exactly as llama.cpp's reference quantize_row_q4_0_ref:
// per block, max is the first value of largest magnitude (with its sign),
// d = max/−8 in float32, id = 1/d (0 if d is 0), and
//
//	code[i] = min(15, trunc(float32(x[i]·id) + 8.5))
//
// in float32 (the product rounded before the addition; trunc toward zero,
// as C's conversion to int8), so that max gets code 0, value −8·d ≈ max;
// d is stored rounded to fp16 (to nearest even). A block of zeros gets
// d = 0/−8 = −0 (fp16 0x8000) and codes 8. When d is too small for fp16
// (|max| below about 4.9e-4, where |d| leaves fp16's normal range) the
// stored scale is a subnormal or zero while the codes come from the
// float32 d, as llama.cpp does; sums x[i]·id + 8.5 that are not finite
// (|d| below about 2.9e-39, where 1/d overflows) give code 0, as llama.cpp
// built for x86 does (the stored scale of such a block is 0 anyway). A
// build of llama.cpp that contracts x·id + 8.5 into a fused multiply-add
// can differ from this in rare ties.
//
// It returns an error, writing nothing, if the lengths do not match, if a
// value is NaN or infinite, or if a block's scale would overflow fp16
// (max|x| ≥ 65520·8 = 524160): llama.cpp would store a block that
// dequantizes to Inf or NaN.
func QuantizeQ4(dst []byte, src []float32) error {
	if err := checkQuantize("QuantizeQ4", "q4_0", dst, Q4RowBytes(len(src)), src, Q4Block, q4MaxAbs); err != nil {
		return err
	}
	for b := 0; b < len(src)/Q4Block; b++ {
		quantizeQ4Block((*[Q4BlockBytes]byte)(dst[b*Q4BlockBytes:]), (*[Q4Block]float32)(src[b*Q4Block:]))
	}
	return nil
}

// quantizeQ4Block quantizes one block of finite values.
func quantizeQ4Block(dst *[Q4BlockBytes]byte, x *[Q4Block]float32) {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax, mx = a, v
		}
	}
	id := putBlockScale(dst[:], mx/-8)
	for j := 0; j < Q4Block/2; j++ {
		dst[2+j] = q4Code(x[j]*id) | q4Code(x[j+Q4Block/2]*id)<<4
	}
}

// q4Code is llama.cpp's MIN(15, (int8_t)(x + 8.5f)) for x = value·id
// (already rounded to float32: the explicit conversion keeps a compiler
// from fusing the product into the addition). For finite blocks x + 8.5
// lies in [0.49, 16.6]; a non-finite x (from an infinite id) gives 0, as
// x86's conversion does.
func q4Code(x float32) byte {
	t := float32(x) + 8.5
	if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
		return 0
	}
	return byte(min(15, int32(t))) // int32(t) truncates toward zero
}

// DequantizeQ4 sets dst to the values of the q4_0 blocks in src: len(src)
// must be a multiple of 18 and len(dst) exactly 32 values per block. Every
// value is exact ((code − 8)·d in float32).
func DequantizeQ4(dst []float32, src []byte) error {
	if err := checkDequantize("DequantizeQ4", dst, src, Q4Block, Q4BlockBytes); err != nil {
		return err
	}
	widenQ4(dst, src)
	return nil
}

// widenQ4 sets dst to the values of the q4_0 row src (len(dst)/32 blocks).
func widenQ4(dst []float32, src []byte) {
	for b := 0; b < len(dst)/Q4Block; b++ {
		blk := src[b*Q4BlockBytes : (b+1)*Q4BlockBytes]
		d := blockScale(blk)
		out := dst[b*Q4Block : (b+1)*Q4Block]
		for j, c := range blk[2:Q4BlockBytes] {
			out[j] = float32(int(c&15)-8) * d
			out[j+Q4Block/2] = float32(int(c>>4)-8) * d
		}
	}
}
