package half

import "fmt"

// Format names one of the two 16-bit floating-point formats. It is the one
// "which 16-bit type" value of the module: package flashattn's DType
// constants BFloat16 and Float16 have the same values, and package
// reference's Precision and package gpu's DType are this type.
type Format uint8

const (
	// BFloat16 is bfloat16 (type BF16).
	BFloat16 Format = 1 + iota
	// Float16 is IEEE binary16 (type F16).
	Float16
)

// String returns "bfloat16" or "float16".
func (f Format) String() string {
	switch f {
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Valid reports whether f is BFloat16 or Float16.
func (f Format) Valid() bool { return f == BFloat16 || f == Float16 }

// Round returns x rounded to f (to nearest, ties to even), as a float32. It
// panics if f is not valid.
func (f Format) Round(x float32) float32 {
	switch f {
	case BFloat16:
		return NewBF16(x).Float32()
	case Float16:
		return NewF16(x).Float32()
	}
	panic("half: Round of " + f.String())
}

// RoundSlice returns a new slice holding the elements of x rounded to f.
func (f Format) RoundSlice(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = f.Round(v)
	}
	return out
}
