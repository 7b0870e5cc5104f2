package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestScaleBF16 checks every implementation's ScaleBF16 bit for bit
// against its twin, the same implementation's Scale followed by its
// F32ToBF16 (Impl.ScaleBF16), over lengths of x with dst as long, shorter
// by a tail (the wrapper's Go part) and empty, and values whose products
// reach every branch of the store: ±Inf, NaN, overflow, ±0, subnormal
// products (which VCVTNEPS2BF16 would flush to zero: the fused store takes
// the integer path for their block) and ties to even. dst beyond its
// length is not written.
func TestScaleBF16(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	special := []float32{-inf, inf, nan, 0, float32(math.Copysign(0, -1)), 1e38, -3e38, 0x1p-120, -0x1p-130,
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000)} // ties to even
	r := rand.New(rand.NewPCG(29, 17))
	for _, im := range Available() { // generic included
		twin := scaleThenBF16(im.Scale, im.F32ToBF16)
		for _, n := range []int{16, 48, 80, 144, 1008} {
			for _, nd := range []int{n, n - 1, n - 15, n - 16, 0} {
				for _, a := range []float32{1, 0.37, 0x1p-10, 3e4, -1.5} {
					x := make([]float32, n)
					for i := range x {
						if r.IntN(3) == 0 {
							x[i] = special[r.IntN(len(special))]
						} else {
							x[i] = float32(r.NormFloat64())
						}
					}
					want := make([]uint16, n+5)
					got := slices.Clone(want)
					for i := range got {
						got[i], want[i] = 0xbeef, 0xbeef
					}
					twin(want[:nd], slices.Clone(x), a)
					im.ScaleBF16(got[:nd], slices.Clone(x), a)
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%s n=%d len(dst)=%d a=%v: dst[%d] = %#04x, want %#04x (x %v)", im.Name, n, nd, a, i, got[i], want[i], x[min(i, n-1)])
						}
					}
				}
			}
		}
	}
}
