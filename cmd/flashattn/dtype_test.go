package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/half"
)

func TestParseDType(t *testing.T) {
	for _, c := range []struct {
		s    string
		q8   bool
		want flashattn.DType
		err  string
	}{
		{"f32", false, flashattn.Float32, ""}, {"bf16", false, flashattn.BFloat16, ""}, {"f16", false, flashattn.Float16, ""},
		{"fp16", false, flashattn.Float16, ""}, {"q8_0", true, flashattn.Q8_0, ""},
		{"q8_0", false, 0, `-x "q8_0": want f32, bf16 or f16`}, {"", true, 0, `-x "": want f32, bf16, f16, q8_0, q4_0, fp8_e4m3 or fp8_e5m2`},
		{"fp8_e4m3", true, flashattn.FP8E4M3, ""}, {"fp8_e5m2", true, flashattn.FP8E5M2, ""}, {"fp8_e4m3", false, 0, `want f32, bf16 or f16`},
		{"F32", false, 0, `-x "F32"`}, {"float32", false, 0, `-x "float32"`},
	} {
		dt, err := parseDType("-x", c.s, c.q8)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.s, err, c.err)
			}
			continue
		}
		name := c.s
		if name == "fp16" {
			name = "f16"
		}
		if err != nil || dt != c.want || dtypeName(dt) != name {
			t.Errorf("%q: %v %v (name %s)", c.s, dt, err, dtypeName(dt))
		}
	}
}

// outArray writes each result type as documented: float16 as '<f2' bit for
// bit, float32 as '<f4' (or narrowed exactly to '<f2' for the GPU's
// float16 results), bfloat16 and q8_0 widened exactly to '<f4'.
func TestOutArray(t *testing.T) {
	vals := []float32{1, -2.5, 65504, float32(math.Inf(-1)), 0.000061035156, 3.140625, -0, 1e-7}
	for len(vals) < 32 {
		vals = append(vals, float32(len(vals))/8)
	}
	f16 := make([]half.F16, len(vals))
	half.EncodeF16(f16, vals)
	f16v := make([]float32, len(vals))
	half.DecodeF16(f16v, f16)
	shape := []int{1, 1, 1, 32}

	a, err := outArray(flashattn.DenseOf(f16, 1, 1, 1, 32), shape, false)
	if err != nil || !slices.Equal(a.F16, f16) || a.F32 != nil {
		t.Errorf("f16: %+v %v", a, err)
	}
	a, err = outArray(flashattn.Dense(f16v, 1, 1, 1, 32), shape, true)
	if err != nil || !slices.Equal(a.F16, f16) || a.F32 != nil {
		t.Errorf("gpu f16: %+v %v", a, err)
	}
	a, err = outArray(flashattn.Dense(vals, 1, 1, 1, 32), shape, false)
	if err != nil || !slices.Equal(a.F32, vals) {
		t.Errorf("f32: %+v %v", a, err)
	}
	bf := make([]half.BF16, len(vals))
	half.EncodeBF16(bf, vals)
	a, err = outArray(flashattn.DenseOf(bf, 1, 1, 1, 32), shape, false)
	if err != nil || a.F16 != nil || len(a.F32) != 32 {
		t.Fatalf("bf16: %+v %v", a, err)
	}
	for i, x := range a.F32 {
		if math.Float32bits(x) != math.Float32bits(bf[i].Float32()) {
			t.Errorf("bf16 element %d: %v, want %v", i, x, bf[i].Float32())
		}
	}
	finite := slices.Clone(vals)
	finite[3] = -7
	q := flashattn.NewTensorOf(flashattn.Q8_0, 1, 1, 1, 32)
	if err := flashattn.Convert(q, flashattn.Dense(finite, 1, 1, 1, 32)); err != nil {
		t.Fatal(err)
	}
	back := flashattn.NewTensor(1, 1, 1, 32)
	if err := flashattn.Convert(back, q); err != nil {
		t.Fatal(err)
	}
	a, err = outArray(q, shape, false)
	if err != nil || !slices.Equal(a.F32, back.Data) || slices.Equal(back.Data, finite) {
		t.Errorf("q8_0: %+v %v (dequantised %v)", a, err, back.Data)
	}
	// arrayTensor names the file when q8_0 cannot hold a value.
	big := slices.Clone(vals)
	big[3] = 1e30
	if _, err := arrayTensor("x.npy", npy.Array{Shape: shape, F32: big}, [4]int{1, 1, 1, 32}, flashattn.Q8_0, 0); err == nil || !strings.HasPrefix(err.Error(), "x.npy: cannot convert to q8_0: ") {
		t.Errorf("q8_0 overflow: %v", err)
	}
	// '<f2' files widen exactly to float32 and round to bfloat16.
	tt, err := arrayTensor("h.npy", npy.Array{Shape: shape, F16: f16}, [4]int{1, 1, 1, 32}, flashattn.Float32, 0)
	if err != nil || !slices.Equal(tt.Data, f16v) {
		t.Errorf("f16 to f32: %v", err)
	}
	tt, err = arrayTensor("h.npy", npy.Array{Shape: shape, F16: f16}, [4]int{1, 1, 1, 32}, flashattn.BFloat16, 0)
	for i := range f16v {
		if err != nil || tt.BF16[i] != half.NewBF16(f16v[i]) {
			t.Fatalf("f16 to bf16 element %d: %v", i, err)
		}
	}
}
