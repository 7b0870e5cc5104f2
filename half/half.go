// Package half provides the two 16-bit floating-point types of machine
// learning, bfloat16 and IEEE 754 binary16 ("fp16"), with exact conversions
// to and from float32 and fast bulk converters.
//
// Rounding to either type is to nearest, ties to even, including into and
// within the subnormal range; magnitudes beyond the largest finite value
// round to ±Inf as IEEE 754 prescribes (for fp16: 65520 and above); ±Inf
// and ±0 are kept. A NaN stays a NaN of the same sign: its payload is
// truncated to the top bits that fit and its quiet bit is set, as the x86
// conversion instructions do. Widening to float32 is exact; an fp16 NaN
// comes back quiet, a bfloat16 NaN comes back with its bits unchanged.
//
// The bulk converters use the vector instructions of the CPU where there
// are some (AVX2, F16C, AVX-512, AVX512_BF16) and give the same bits as the
// scalar conversions, on every CPU.
package half

import (
	"unsafe"

	"github.com/flashattn/flashattn/internal/kernel"
)

// BF16 is a bfloat16 number: 1 sign bit, 8 exponent bits and 7 mantissa
// bits, the top half of a float32. Its range is that of float32, its
// precision about 2-3 decimal digits.
type BF16 uint16

// F16 is an IEEE 754 binary16 number: 1 sign bit, 5 exponent bits and 10
// mantissa bits. Its largest finite value is 65504, its smallest positive
// normal 2^-14 and its smallest subnormal 2^-24.
type F16 uint16

// NewBF16 rounds f to the nearest bfloat16, ties to even.
func NewBF16(f float32) BF16 { return BF16(kernel.F32ToBF16(f)) }

// NewF16 rounds f to the nearest fp16, ties to even.
func NewF16(f float32) F16 { return F16(kernel.F32ToF16(f)) }

// Float32 returns the value of h (exact).
func (h BF16) Float32() float32 { return kernel.BF16ToF32(uint16(h)) }

// Float32 returns the value of h (exact; a NaN comes back quiet).
func (h F16) Float32() float32 { return kernel.F16ToF32(uint16(h)) }

// converters is the kernel implementation whose bulk converters are used:
// the process's active one (the best this CPU supports, chosen once).
func converters() *kernel.Impl { return &kernel.Active().Impl }

func bits[T BF16 | F16](s []T) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// EncodeBF16 sets dst[i] = NewBF16(src[i]) for i < min(len(dst), len(src)).
func EncodeBF16(dst []BF16, src []float32) { encode(dst, src, converters().F32ToBF16) }

// DecodeBF16 sets dst[i] = src[i].Float32() for i < min(len(dst), len(src)).
func DecodeBF16(dst []float32, src []BF16) { decode(dst, src, converters().BF16ToF32) }

// EncodeF16 sets dst[i] = NewF16(src[i]) for i < min(len(dst), len(src)).
func EncodeF16(dst []F16, src []float32) { encode(dst, src, converters().F32ToF16) }

// DecodeF16 sets dst[i] = src[i].Float32() for i < min(len(dst), len(src)).
func DecodeF16(dst []float32, src []F16) { decode(dst, src, converters().F16ToF32) }

// encode runs the bulk converter conv on the first min(len(dst), len(src))
// elements, dst seen as its bits.
func encode[T BF16 | F16](dst []T, src []float32, conv func(dst []uint16, src []float32)) {
	n := min(len(dst), len(src))
	conv(bits(dst[:n]), src[:n])
}

// decode runs the bulk converter conv on the first min(len(dst), len(src))
// elements, src seen as its bits.
func decode[T BF16 | F16](dst []float32, src []T, conv func(dst []float32, src []uint16)) {
	n := min(len(dst), len(src))
	conv(dst[:n], bits(src[:n]))
}
