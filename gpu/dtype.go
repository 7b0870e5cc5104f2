package gpu

import (
	"fmt"

	"github.com/flashattn/flashattn/half"
)

// DType is the element type of a device tensor.
type DType int

const (
	// BF16 is bfloat16 (8-bit exponent, 7-bit mantissa).
	BF16 DType = iota
	// F16 is IEEE binary16 (5-bit exponent, 10-bit mantissa).
	F16
)

// String returns "bf16" or "f16".
func (t DType) String() string {
	switch t {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

func (t DType) valid() bool { return t == BF16 || t == F16 }

// Round returns x rounded to t (round to nearest, ties to even), as a
// float32: the value the GPU sees after ForwardHost converts x.
func (t DType) Round(x float32) float32 {
	if t == F16 {
		return half.NewF16(x).Float32()
	}
	return half.NewBF16(x).Float32()
}
