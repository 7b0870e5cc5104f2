//go:build amd64 && !purego

package kernel

import (
	"fmt"
	"testing"
)

// BenchmarkDecodeF16Widen compares, for an fp16 cache and the row tiles of
// 4 and 8 query rows of "avx512", the fp16 kernels (blk=0: the cache
// widened in registers) with widening blocks of blk keys into a float32
// tile in L1 (f16ToF32AVX512) and running the float32 kernels on it, in
// GFLOP/s, on 256 keys (in L2) and 8192. Measured on Zen 4 under load:
// widening in L1 is 0.5-1.0× the in-register kernels for every case (each
// value is converted once either way, and the tile doubles the loads and
// adds the stores), so the fp16 row tiles keep their in-register
// conversion; only the 16-row transposed scores tile widens
// (decode_t_amd64.go).
func BenchmarkDecodeF16Widen(b *testing.B) {
	requireSets(b)
	dk, err := LookupDecode("avx512")
	if err != nil { // not rejected (requireSets): absent, for want of AVX-512BW
		b.Skipf("%v: this CPU has no AVX-512BW", err)
	}
	for _, keys := range []int{256, 8192} {
		const dim = 128
		c := newBenchCache(FormatF16, 1, keys, dim, false)
		for _, m := range []int{4, 8} {
			for _, blk := range []int{0, 16, 64} {
				for _, op := range []string{"scores", "accum"} {
					b.Run(fmt.Sprintf("keys=%d/m=%d/blk=%d/%s", keys, m, blk, op), func(b *testing.B) {
						s := make([]float32, m*keys)
						q := make([]float32, m*dim)
						o := make([]float32, m*dim)
						buf := make([]float32, max(blk, 1)*dim)
						h := castSlice[uint16](c.kb)
						for b.Loop() {
							if blk == 0 {
								if op == "scores" {
									dk.Scores[FormatF16](s, keys, q, m, c.kb, c.row, keys, dim)
								} else {
									dk.Accum[FormatF16](o, dim, s, keys, m, c.vb, c.row, keys, dim)
								}
								continue
							}
							for j0 := 0; j0 < keys; j0 += blk {
								f16ToF32AVX512(buf, h[j0*dim:(j0+blk)*dim])
								if op == "scores" {
									dk.Scores[FormatF32](s[j0:], keys, q, m, Bytes(buf), 4*dim, blk, dim)
								} else {
									dk.Accum[FormatF32](o, dim, s[j0:], keys, m, Bytes(buf), 4*dim, blk, dim)
								}
							}
						}
						gf := 2 * float64(m*keys*dim) * float64(b.N) / b.Elapsed().Seconds() / 1e9
						b.ReportMetric(gf, "GFLOP/s")
					})
				}
			}
		}
	}
}
