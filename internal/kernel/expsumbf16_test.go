package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExpSumBF16 checks every implementation's ExpSumBF16 bit for bit
// against its twin, the same implementation's ExpSum followed by its
// F32ToBF16 (Impl.ExpSumBF16), over lengths with an odd number of vectors
// (the fused store's pipeline tail) and arguments that reach every branch
// of the store: ±Inf, NaN, huge values, 0, and the float32 values just
// above ExpMin, where a subnormal exp(t) would be flushed to zero by
// VCVTNEPS2BF16 but not by the twin's rounding — none is subnormal (the
// fused store relies on it, and the test asserts it). dst beyond len(x) is
// not written.
func TestExpSumBF16(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	special := []float32{-inf, inf, nan, 0, -1e30, 1e30, ExpMax, ExpMax + 1e-3, 89, 1000, -1000, ExpMin - 1e-3}
	// Every float32 from ExpMin up, 2048 of them: t runs through the
	// range where n = −126.
	low := make([]float32, 2048)
	for i := range low {
		low[i] = math.Float32frombits(math.Float32bits(ExpMin) - uint32(i))
	}
	r := rand.New(rand.NewPCG(29, 16))
	for _, im := range Available() { // generic included
		twin := expSumThenBF16(im.ExpSum, im.F32ToBF16)
		subnormals := 0
		for _, n := range []int{0, 16, 48, 80, 144, 1008, 2064} {
			x := make([]float32, n)
			for i := range x {
				switch r.IntN(4) {
				case 0:
					x[i] = special[r.IntN(len(special))]
				case 1:
					x[i] = low[r.IntN(len(low))]
				default:
					x[i] = r.Float32()*40 - 30
				}
			}
			if n >= len(low) {
				copy(x, low)
			}
			want, wx := make([]uint16, n+5), slices.Clone(x)
			wsum := twin(want, wx, 1, 0)
			for _, v := range wx {
				if v != 0 && math.Abs(float64(v)) < 0x1p-126 {
					subnormals++
				}
			}
			got, gx := make([]uint16, n+5), slices.Clone(x)
			for i := range got {
				got[i], want[i] = 0xbeef, 0xbeef
				if i < n {
					want[i] = F32ToBF16(wx[i])
				}
			}
			gsum := im.ExpSumBF16(got, gx, 1, 0)
			if math.Float32bits(gsum) != math.Float32bits(wsum) && !(gsum != gsum && wsum != wsum) {
				t.Errorf("%s n=%d: sum %v, ExpSum then F32ToBF16 %v", im.Name, n, gsum, wsum)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s n=%d: dst[%d] = %#04x, want %#04x (x %v, exp %v)", im.Name, n, i, got[i], want[i], x[min(i, n-1)], wx[min(i, n-1)])
				}
			}
		}
		if subnormals > 0 {
			t.Errorf("%s: %d subnormal exponentials (exp(t) for t ≥ ExpMin must be ≥ 2^−126)", im.Name, subnormals)
		}
	}
}
