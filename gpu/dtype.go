package gpu

import "fmt"

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
		return fromF16(toF16(x))
	}
	return fromBF16(toBF16(x))
}

// encode converts float32 values to t's bits.
func (t DType) encode(dst []uint16, src []float32) {
	if t == F16 {
		for i, x := range src {
			dst[i] = toF16(x)
		}
		return
	}
	for i, x := range src {
		dst[i] = toBF16(x)
	}
}

// decode converts t's bits to float32.
func (t DType) decode(dst []float32, src []uint16) {
	if t == F16 {
		for i, h := range src {
			dst[i] = fromF16(h)
		}
		return
	}
	for i, h := range src {
		dst[i] = fromBF16(h)
	}
}
