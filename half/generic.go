package half

import "unsafe"

// generic.go lets an engine's own 16-bit element types — GoMLX's
// bfloat16.BFloat16, x448/float16.Float16, a plain uint16: any type whose
// underlying type is uint16 — be used with this module without package
// unsafe in the engine's code.

// Cast returns s as a []U sharing its memory (no copy): a slice of an
// engine's 16-bit type as a []BF16 or []F16 for a flashattn.Tensor, or
// back. The bits are not changed: the caller states that T and U hold the
// same format. A nil s gives a nil slice.
//
//	t := flashattn.Tensor{BF16: half.Cast[half.BF16](gomlxData), …}
//	out := half.Cast[bfloat16.BFloat16](result.BF16)
func Cast[U, T ~uint16](s []T) []U {
	if s == nil {
		return nil
	}
	return unsafe.Slice((*U)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// Encode sets dst[i] to src[i] rounded to format f (EncodeBF16 or
// EncodeF16) for i < min(len(dst), len(src)), dst being of any 16-bit
// type. It panics if f is not valid.
func Encode[T ~uint16](f Format, dst []T, src []float32) {
	switch f {
	case BFloat16:
		EncodeBF16(Cast[BF16](dst), src)
	case Float16:
		EncodeF16(Cast[F16](dst), src)
	default:
		panic("half: Encode to " + f.String())
	}
}

// Decode sets dst[i] to the value of src[i] in format f (DecodeBF16 or
// DecodeF16) for i < min(len(dst), len(src)), src being of any 16-bit
// type. It panics if f is not valid.
func Decode[T ~uint16](f Format, dst []float32, src []T) {
	switch f {
	case BFloat16:
		DecodeBF16(dst, Cast[BF16](src))
	case Float16:
		DecodeF16(dst, Cast[F16](src))
	default:
		panic("half: Decode from " + f.String())
	}
}
