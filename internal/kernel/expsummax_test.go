package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExpSumMaxBF16 checks every implementation's ExpSumMaxBF16
// (the candidates, even one selfCheck rejects, and Generic) on rows with
// −Inf, ±0 and equal maxima (ties), products that overflow to +Inf, and
// NaN: mx has the value of float32(scale·Max(x)) (scale > 0: the rounding
// is monotone), −Inf for a row of −Inf; its bits, and when mx ≤ limit
// dst's and the sum's, are the twin's (Impl.expSumBF16Twin) and the same
// implementation's ExpSumBF16's; when mx > limit x keeps its values; a NaN
// in x makes mx > limit, mx NaN, or the sum NaN.
func TestExpSumMaxBF16(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	special := []float32{-inf, -inf, 0, float32(math.Copysign(0, -1)), 3, 3, -3, 1e38, -1e38, 7.5}
	r := rand.New(rand.NewPCG(31, 4))
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b }
	for _, im := range append(archImpls(), Generic) {
		_, twin := im.expSumBF16Twin()
		for trial := 0; trial < 300; trial++ {
			n := 16 * (1 + r.IntN(9)) // odd and even vector counts
			x := make([]float32, n)
			kind := trial % 5
			for i := range x {
				switch {
				case kind == 0: // all −Inf
					x[i] = -inf
				case kind == 1 || r.IntN(3) == 0:
					x[i] = special[r.IntN(len(special))]
				default:
					x[i] = r.Float32()*20 - 10
				}
			}
			hasNaN := kind == 4
			if hasNaN {
				x[r.IntN(n)] = nan
			}
			scale := []float32{0.125, 1, 3.7, 1e10}[r.IntN(4)]
			want := scale * Generic.Max(x) // generic Max skips NaN
			if !hasNaN {
				if m := scale * im.Max(x); m != want {
					t.Fatalf("%s: Max %v, generic %v", im.Name, m, want)
				}
			}
			sub := want - 1
			if want == -inf || want == inf {
				sub = 0
			}
			for _, limit := range []float32{inf, want, want - 0.5, -inf} {
				gx, tx := slices.Clone(x), slices.Clone(x)
				got, tw := make([]uint16, n), make([]uint16, n)
				gsum, gmx := im.ExpSumMaxBF16(got, gx, scale, sub, limit)
				tsum, tmx := twin(tw, tx, scale, sub, limit)
				if !same(gmx, tmx) {
					t.Fatalf("%s n=%d: max %v, its twin's %v", im.Name, n, gmx, tmx)
				}
				switch {
				case hasNaN:
					if gmx <= limit && gsum == gsum { // neither NaN
						t.Fatalf("%s n=%d: a NaN in x gives max %v, sum %v (limit %v)", im.Name, n, gmx, gsum, limit)
					}
				case gmx != want: // +0 == −0
					t.Fatalf("%s n=%d scale %v: max %v, want scale·Max = %v", im.Name, n, scale, gmx, want)
				}
				if !(gmx <= limit) {
					if !slices.Equal(gx, x) && !hasNaN || hasNaN && !slices.EqualFunc(gx, x, same) {
						t.Fatalf("%s n=%d: max %v > limit %v, and x was written", im.Name, n, gmx, limit)
					}
					continue
				}
				esum := im.ExpSumBF16(tw, slices.Clone(x), scale, sub)
				if !same(gsum, tsum) || !same(gsum, esum) || !slices.Equal(got, tw) {
					t.Fatalf("%s n=%d: sum %v, its twin's %v, ExpSumBF16's %v (or dst differs)", im.Name, n, gsum, tsum, esum)
				}
			}
		}
	}
}
