package kernel

import (
	"fmt"
	"testing"
)

// BenchmarkDecodeL2: the kernels on a cache that fits in L2 (256 keys):
// their compute speed without memory effects, in GFLOP/s and as a share
// of the FMA peak.
func BenchmarkDecodeL2(b *testing.B) {
	requireSets(b)
	const keys, dim = 256, 128
	dk := Active().Decode
	for _, typ := range cacheTypes {
		c := newBenchCache(typ, 1, keys, dim, false)
		for _, m := range []int{1, 2, 4, 8, 16} {
			for _, op := range []string{"scores", "accum"} {
				b.Run(fmt.Sprintf("%s/%s/m=%d/%s", dk.Name, typ, m, op), func(b *testing.B) {
					s := make([]float32, m*keys)
					q := make([]float32, m*dim)
					o := make([]float32, m*dim)
					for b.Loop() {
						if op == "scores" {
							c.scores(dk, s, keys, q, m, 0, c.row, keys, dim)
						} else {
							c.accum(dk, o, dim, s, keys, m, 0, c.row, keys, dim)
						}
					}
					gf := 2 * float64(m*keys*dim) * float64(b.N) / b.Elapsed().Seconds() / 1e9
					b.ReportMetric(gf, "GFLOP/s")
				})
			}
		}
	}
}
