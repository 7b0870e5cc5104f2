package kernel

import (
	"fmt"
	"unsafe"
)

// Format is the storage format of a KV cache's elements, as the decode
// kernels read it: every format is a row of bytes, RowBytes(d) of them for
// d values, and its entry in the tables of Decode (Scores[f], Accum[f], …)
// reads such rows in place. The table formats (formatTable) hold each
// format's name, block size, row size and generic conversions, so that a
// caller fetches a format's kernels once and never switches on the type.
type Format uint8

const (
	// FormatF32 is IEEE binary32, 4 bytes per value (little-endian, as
	// the machine stores a []float32).
	FormatF32 Format = iota
	// FormatBF16 is bfloat16, 2 bytes per value (as a []uint16 stores it).
	FormatBF16
	// FormatF16 is IEEE binary16, 2 bytes per value.
	FormatF16
	// FormatQ8 is llama.cpp's q8_0 (q8.go): blocks of 32 values in 34 bytes.
	FormatQ8
	// FormatQ4 is llama.cpp's q4_0 (q4.go): blocks of 32 values in 18 bytes.
	FormatQ4
	// FormatE4M3 is OCP fp8 e4m3fn (fp8.go), 1 byte per value.
	FormatE4M3
	// FormatE5M2 is OCP fp8 e5m2 (fp8.go), 1 byte per value.
	FormatE5M2
	// NumFormats is the number of formats (the length of Decode's tables).
	NumFormats
)

// formatInfo is a format's row of formatTable.
type formatInfo struct {
	name       string // as in kernel names and FLASHATTN_KERNEL-style output
	block      int    // values per block: d must be a multiple
	blockBytes int    // bytes per block
	unit       int    // bytes per unit of the assembly's slice (4 float32, 2 uint16, 1 byte)
	// widen sets dst (a multiple of block values) from the row src.
	widen func(dst []float32, src []byte)
	// narrow stores src (a multiple of block values) as the row dst:
	// rounding to nearest even, q8_0 and q4_0 as llama.cpp quantises,
	// fp8 saturating (see Quantize).
	narrow func(dst []byte, src []float32) error
}

// formatTable describes every format.
var formatTable = [NumFormats]formatInfo{
	FormatF32: {"f32", 1, 4, 4, widenF32,
		func(dst []byte, src []float32) error { copy(castSlice[float32](dst), src); return nil }},
	FormatBF16: {"bf16", 1, 2, 2,
		func(dst []float32, src []byte) { bf16ToF32Generic(dst, castSlice[uint16](src)) },
		func(dst []byte, src []float32) error { f32ToBF16Generic(castSlice[uint16](dst), src); return nil }},
	FormatF16: {"f16", 1, 2, 2,
		func(dst []float32, src []byte) { f16ToF32Generic(dst, castSlice[uint16](src)) },
		func(dst []byte, src []float32) error { f32ToF16Generic(castSlice[uint16](dst), src); return nil }},
	FormatQ8: {"q8_0", Q8Block, Q8BlockBytes, 1, widenQ8, QuantizeQ8},
	FormatQ4: {"q4_0", Q4Block, Q4BlockBytes, 1, widenQ4, QuantizeQ4},
	FormatE4M3: {"fp8_e4m3", 1, 1, 1, widenE4M3,
		func(dst []byte, src []float32) error { return QuantizeFP8(FormatE4M3, dst, src, 1) }},
	FormatE5M2: {"fp8_e5m2", 1, 1, 1, widenE5M2,
		func(dst []byte, src []float32) error { return QuantizeFP8(FormatE5M2, dst, src, 1) }},
}

// String is the format's name: f32, bf16, f16, q8_0, q4_0, fp8_e4m3 or
// fp8_e5m2.
func (f Format) String() string {
	if f < NumFormats {
		return formatTable[f].name
	}
	return fmt.Sprintf("Format(%d)", f)
}

// Block is the number of values of a block of f: the head dimension (and
// any stride in values) must be a multiple of it.
func (f Format) Block() int { return formatTable[f].block }

// RowBytes is the size in bytes of n values of f (n a multiple of Block).
func (f Format) RowBytes(n int) int { return n / formatTable[f].block * formatTable[f].blockBytes }

// Dequantize sets dst (a multiple of Block values) to the values of the
// row src, which must hold exactly RowBytes(len(dst)) bytes.
func (f Format) Dequantize(dst []float32, src []byte) error {
	if len(dst)%f.Block() != 0 || len(src) != f.RowBytes(len(dst)) {
		return fmt.Errorf("Dequantize %v: %d values and %d bytes", f, len(dst), len(src))
	}
	formatTable[f].widen(dst, src)
	return nil
}

// Quantize stores src (a multiple of Block values) as the row dst, which
// must hold exactly RowBytes(len(src)) bytes: float32 as it is, bfloat16
// and fp16 rounded to nearest even, q8_0 and q4_0 as QuantizeQ8 and
// QuantizeQ4 (which fail on NaN, Inf and values beyond their fp16
// scales), fp8 as QuantizeFP8 with scale 1.
func (f Format) Quantize(dst []byte, src []float32) error {
	if len(src)%f.Block() != 0 || len(dst) != f.RowBytes(len(src)) {
		return fmt.Errorf("Quantize %v: %d values and %d bytes", f, len(src), len(dst))
	}
	return formatTable[f].narrow(dst, src)
}

// checkDim panics unless d is a multiple of the format's block.
func (f Format) checkDim(name string, d int) {
	if d%f.Block() != 0 {
		bad(fmt.Sprintf("%s: %v head dimension not a multiple of %d", name, f, f.Block()))
	}
}

// checkLd panics unless the byte strides are whole units of the format
// (float32 rows 4 bytes apart, 16-bit rows 2).
func (f Format) checkLd(name string, ld ...int) {
	for _, x := range ld {
		if x%formatTable[f].unit != 0 {
			bad(fmt.Sprintf("%s: %v stride of %d bytes", name, f, x))
		}
	}
}

// castSlice reinterprets the bytes of b as a slice of T (len(b)/size of T
// of them; b must be aligned for T, which the decode kernels' callers
// ensure: their rows are slices of []float32 or []uint16 seen as bytes).
func castSlice[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// Bytes returns the memory of s as bytes (nil for an empty s).
func Bytes[T any](s []T) []byte {
	var z T
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

func widenF32(dst []float32, src []byte) { copy(dst, castSlice[float32](src)) }
