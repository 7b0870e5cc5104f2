package kernel

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The q8_0 format of llama.cpp (GGML_TYPE_Q8_0), used for 8-bit KV caches.
//
// A row of d values (d a multiple of 32) is stored as d/32 blocks of 34
// bytes, in order. A block holds 32 consecutive values:
//
//	bytes 0-1    d: the block's scale, an IEEE binary16 (fp16), little-endian
//	bytes 2-33   q[0..31]: signed 8-bit integers (two's complement)
//
// and value i of the block is q[i]·d, computed exactly in float32 (an int8
// times an fp16 has at most 18 significant bits). A row of d values takes
// Q8RowBytes(d) = d/32·34 bytes; rows of a cache may be further apart (a
// row stride in bytes), but a block never straddles rows.

const (
	// Q8Block is the number of values in a q8_0 block.
	Q8Block = 32
	// Q8BlockBytes is the size of a q8_0 block in bytes: a 2-byte fp16
	// scale and 32 int8 values.
	Q8BlockBytes = 34
	// q8MaxAbs is the smallest block maximum |x| whose scale max/127
	// rounds to +Inf in fp16 (65520·127, rounded up to a float32).
	q8MaxAbs = 65520 * 127
)

// Q8RowBytes returns the number of bytes of a q8_0 row of d values (d a
// multiple of Q8Block).
func Q8RowBytes(d int) int { return d / Q8Block * Q8BlockBytes }

// QuantizeQ8 stores the float32 values of src, a multiple of 32 of them,
// as q8_0 blocks into dst, which must hold exactly Q8RowBytes(len(src))
// bytes. It rounds exactly as llama.cpp's reference quantize_row_q8_0_ref:
// per block, amax = max|x|, d = amax/127 in float32, id = 1/d (0 if d is 0),
// q[i] = roundf(x[i]·id) (to nearest, ties away from zero), and d is stored
// rounded to fp16 (to nearest even); a block of zeros gets d = 0 and q = 0.
// When d is too small for fp16 (amax below about 7.6e-6) the stored scale
// rounds to zero or a subnormal while q is computed from the float32 d, as
// llama.cpp does; products x[i]·id that are not finite (d below the
// float32 normal range) give q = 0, as llama.cpp built for x86 does.
//
// It returns an error, writing nothing, if the lengths do not match, if a
// value is NaN or infinite, or if a block's scale would overflow fp16
// (max|x| ≥ 65520·127 ≈ 8.3e6): llama.cpp would store a block that
// dequantizes to Inf or NaN.
func QuantizeQ8(dst []byte, src []float32) error {
	if err := checkQuantize("QuantizeQ8", "q8_0", dst, Q8RowBytes(len(src)), src, Q8Block, q8MaxAbs); err != nil {
		return err
	}
	for b := 0; b < len(src)/Q8Block; b++ {
		quantizeQ8Block((*[Q8BlockBytes]byte)(dst[b*Q8BlockBytes:]), (*[Q8Block]float32)(src[b*Q8Block:]))
	}
	return nil
}

// quantizeQ8Block quantizes one block of finite values.
func quantizeQ8Block(dst *[Q8BlockBytes]byte, x *[Q8Block]float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	id := putBlockScale(dst[:], amax/127)
	for i, v := range x {
		dst[2+i] = byte(int8(roundQ8(v * id)))
	}
}

// roundQ8 is C's roundf followed by the conversion to int8 that llama.cpp
// relies on: |x| <= 127.00002 for finite blocks, so only non-finite x
// (from an infinite id) falls outside, and becomes 0 as on x86.
func roundQ8(x float32) int32 {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return 0
	}
	return int32(math.Round(float64(x)))
}

// DequantizeQ8 sets dst to the values of the q8_0 blocks in src: len(src)
// must be a multiple of 34 and len(dst) exactly 32 values per block. Every
// value is exact (q·d in float32).
func DequantizeQ8(dst []float32, src []byte) error {
	if err := checkDequantize("DequantizeQ8", dst, src, Q8Block, Q8BlockBytes); err != nil {
		return err
	}
	widenQ8(dst, src)
	return nil
}

// blockScale returns the scale d of the q8_0 or q4_0 block that starts at
// blk[0] (an fp16, little-endian).
func blockScale(blk []byte) float32 {
	return F16ToF32(binary.LittleEndian.Uint16(blk))
}

// putBlockScale stores the block scale d, rounded to fp16, at blk[0:2]
// and returns id = 1/d (0 if d is 0) in float32, from the unrounded d, as
// llama.cpp's q8_0 and q4_0 quantizers do.
func putBlockScale(blk []byte, d float32) (id float32) {
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	if d != 0 {
		id = 1 / d
	}
	return id
}

// checkDequantize is the argument check of DequantizeQ8 and DequantizeQ4
// (name): src holds whole blocks of blockBytes bytes and dst exactly
// block values per block.
func checkDequantize(name string, dst []float32, src []byte, block, blockBytes int) error {
	if len(src)%blockBytes != 0 {
		return fmt.Errorf("%s: %d bytes is not a multiple of %d", name, len(src), blockBytes)
	}
	if want := len(src) / blockBytes * block; len(dst) != want {
		return fmt.Errorf("%s: %d bytes hold %d values, dst has %d", name, len(src), want, len(dst))
	}
	return nil
}

// checkQuantize is the argument check of QuantizeQ8 and QuantizeQ4 (name,
// for the format named format): src holds a multiple of block values, dst
// exactly rowBytes bytes, and every value is finite and below maxAbs in
// magnitude, the smallest block maximum whose scale overflows fp16.
func checkQuantize(name, format string, dst []byte, rowBytes int, src []float32, block int, maxAbs float64) error {
	if len(src)%block != 0 {
		return fmt.Errorf("%s: %d values is not a multiple of %d", name, len(src), block)
	}
	if len(dst) != rowBytes {
		return fmt.Errorf("%s: %d values need %d bytes, dst has %d", name, len(src), rowBytes, len(dst))
	}
	for i, x := range src {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%s: value %d is %v", name, i, x)
		}
		if math.Abs(float64(x)) >= maxAbs {
			return fmt.Errorf("%s: value %d (%v) is too large for a %s scale (|x| < %g)", name, i, x, format, maxAbs)
		}
	}
	return nil
}
