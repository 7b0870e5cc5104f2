package flashattn

import (
	"math"
	"testing"
)

// TestFloatConversions: Float64To32 rounds as float32() does (ties to
// even, overflow to ±Inf, NaN kept) and Float32To64 is exact, each for
// min(len(dst), len(src)) elements, leaving the rest of dst alone.
func TestFloatConversions(t *testing.T) {
	tie := 1 + math.Ldexp(1, -24) // halfway between 1 and the next float32
	src := []float64{0, -1.5, tie, 3*math.Ldexp(1, -24) + 1, 1e39, -1e39, math.Inf(1), math.NaN(), math.SmallestNonzeroFloat64, 1.0 / 3}
	want := []float32{0, -1.5, 1, 1 + 2*math.Nextafter32(1, 2) - 2, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, float32(1.0 / 3)}
	for _, extra := range []int{-3, 0, 2} {
		dst := make([]float32, len(src)+extra)
		for i := range dst {
			dst[i] = -7
		}
		n := Float64To32(dst, src)
		if wantN := min(len(dst), len(src)); n != wantN {
			t.Fatalf("Float64To32 into %d: %d converted, want %d", len(dst), n, wantN)
		}
		for i, x := range dst {
			switch {
			case i >= n && x != -7:
				t.Errorf("Float64To32 wrote element %d past the shorter slice", i)
			case i < n && math.Float32bits(x) != math.Float32bits(want[i]) && !(math.IsNaN(float64(x)) && math.IsNaN(float64(want[i]))):
				t.Errorf("Float64To32(%v) = %v, want %v", src[i], x, want[i])
			}
		}
		back := make([]float64, len(dst))
		if m := Float32To64(back, dst[:n]); m != n {
			t.Fatalf("Float32To64: %d converted, want %d", m, n)
		}
		for i := range n {
			if math.Float64bits(back[i]) != math.Float64bits(float64(dst[i])) || float32(back[i]) != dst[i] && !math.IsNaN(back[i]) {
				t.Errorf("Float32To64(%v) = %v", dst[i], back[i])
			}
		}
	}
}
