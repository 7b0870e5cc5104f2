package gpu

import (
	"github.com/flashattn/flashattn/half"
)

// DType is the element type of a device tensor: one of the two 16-bit
// formats, half.Format (the module's one 16-bit format type; package
// flashattn's DType constants BFloat16 and Float16 have the same values).
// Round and String are half.Format's; String returns "bfloat16" or
// "float16".
type DType = half.Format

const (
	// BF16 is bfloat16 (8-bit exponent, 7-bit mantissa): half.BFloat16.
	BF16 = half.BFloat16
	// F16 is IEEE binary16 (5-bit exponent, 10-bit mantissa): half.Float16.
	F16 = half.Float16
)

// ptxName is dt's name in the PTX modules' file and kernel names: "bf16"
// or "f16" (gpu/_ptxgen's spelling, not DType.String's).
func ptxName(dt DType) string {
	switch dt {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return dt.String()
}
