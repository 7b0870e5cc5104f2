package half

import (
	"math/rand/v2"
	"testing"
)

// engineBF16 stands for an engine's own 16-bit type (GoMLX's, x448's).
type engineBF16 uint16

// TestCast: Cast shares the memory of its argument both ways, keeps the
// length and the bits, and maps nil to nil.
func TestCast(t *testing.T) {
	e := []engineBF16{0x3f80, 0xc000, 0x7f80}
	b := Cast[BF16](e)
	if len(b) != len(e) || b[0].Float32() != 1 || b[1].Float32() != -2 {
		t.Fatalf("Cast[BF16](%#x) = %#x", e, b)
	}
	b[2] = NewBF16(0.5)
	if e[2] != engineBF16(NewBF16(0.5)) {
		t.Errorf("a write through the cast slice is not seen in the original: %#x", e[2])
	}
	if back := Cast[engineBF16](b[1:]); len(back) != 2 || &back[0] != &e[1] {
		t.Error("Cast back does not alias the original")
	}
	if Cast[F16]([]uint16(nil)) != nil {
		t.Error("Cast(nil) is not nil")
	}
}

// TestGenericEncodeDecode: Encode and Decode on an engine's type give the
// bits and values of NewBF16/NewF16 and Float32, for min(len(dst),
// len(src)) elements, in both formats; an invalid format panics.
func TestGenericEncodeDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 3))
	src := make([]float32, 37)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 100)
	}
	for _, f := range []Format{BFloat16, Float16} {
		dst := make([]engineBF16, len(src)+2)
		dst[len(src)] = 0x1234
		Encode(f, dst, src)
		back := make([]float32, len(src))
		Decode(f, back, dst)
		for i, x := range src {
			want := uint16(NewBF16(x))
			wantV := NewBF16(x).Float32()
			if f == Float16 {
				want, wantV = uint16(NewF16(x)), NewF16(x).Float32()
			}
			if uint16(dst[i]) != want || back[i] != wantV {
				t.Fatalf("%v element %d (%v): bits %#x value %v, want %#x %v", f, i, x, dst[i], back[i], want, wantV)
			}
		}
		if dst[len(src)] != 0x1234 {
			t.Errorf("%v: Encode wrote past len(src)", f)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Encode with Format(0) did not panic")
		}
	}()
	Encode(Format(0), []uint16{0}, []float32{1})
}
