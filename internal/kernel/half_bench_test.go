package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkHalfVsF32 times each half-precision path against the float32
// kernel at attention tile shapes, interleaved call by call so that both
// see the same machine load, and reports both rates and their ratio
// ("x-f32": half GFLOP/s over float32 GFLOP/s):
//
//	S = Q·Kᵀ   m=48 query rows, n=512 keys, k=64 head dim   (float32: MulABt)
//	O += P·V   m=48 query rows, n=64 head dim, k=512 keys   (float32: MulAddAB)
//
// and "PVlong", O += P·V with B rows [1024, 1536) of a V of 4096 keys
// packed once (strip stride 16·4096), the core's layout for long
// sequences, against the float32 product reading the same rows of a
// 4096-row V.
func BenchmarkHalfVsF32(b *testing.B) {
	requireSets(b)
	r := rand.New(rand.NewPCG(5, 6))
	im := Active().Impl
	for _, sh := range []struct {
		name    string
		m, n, k int
		abt     bool
		long    int // keys of the packed V B is a range of (0: B alone)
	}{{"QKt", 48, 512, 64, true, 0}, {"PV", 48, 64, 512, false, 0}, {"PVlong", 48, 64, 512, false, 4096}} {
		for _, e := range []Elem{BF16, F16} {
			for _, h := range HalfAvailable(e) {
				if h.Name == "f32" {
					continue // the float32 kernel is the baseline of every row
				}
				b.Run(fmt.Sprintf("%s/%s/%s/m=%d/n=%d/k=%d", sh.name, e, h.Name, sh.m, sh.n, sh.k), func(b *testing.B) {
					m, n, k := sh.m, sh.n, sh.k
					af := randSlice(r, m*k)
					bf := randSlice(r, k*n)
					a := make([]uint16, m*k)
					for i, v := range af {
						a[i] = e.FromF32(v)
					}
					bp, ldb := make([]uint16, VNNILen(k, n)), W*k
					PackVNNI(bp, bf, n, k, n, false, e)
					if sh.long > 0 {
						const p0 = 1024
						bf = randSlice(r, sh.long*n)
						ldb = W * sh.long
						bp = make([]uint16, Pad(n)/W*ldb)
						PackVNNI(bp, bf, n, sh.long, n, false, e)
						bp, bf = bp[W*p0:], bf[p0*n:]
					}
					bt := make([]float32, Pad(n)*k)
					PackBt(bt, bf, k, n, k) // any n×k matrix: only the time matters
					c := make([]float32, m*n)
					var th, tf time.Duration
					for b.Loop() {
						t0 := time.Now()
						if sh.abt {
							h.Mul(c, n, a, k, bp, ldb, m, n, k)
						} else {
							h.MulAdd(c, n, a, k, bp, ldb, m, n, k)
						}
						t1 := time.Now()
						if sh.abt {
							im.MulABt(c, n, af, k, bt, m, n, k)
						} else {
							im.MulAddAB(c, n, af, k, bf, n, m, n, k)
						}
						th += t1.Sub(t0)
						tf += time.Since(t1)
					}
					flops := 2 * float64(m*n*k) * float64(b.N) / 1e9
					b.ReportMetric(flops/th.Seconds(), "GFLOP/s")
					b.ReportMetric(flops/tf.Seconds(), "f32-GFLOP/s")
					b.ReportMetric(tf.Seconds()/th.Seconds(), "x-f32")
				})
			}
		}
	}
}

// BenchmarkHalfPeak runs each path's throughput loop interleaved with the
// float32 FMAPeak and reports both and their ratio: the limit each path
// could reach on this CPU.
func BenchmarkHalfPeak(b *testing.B) {
	requireSets(b)
	const iters = 1 << 14
	for _, e := range []Elem{BF16, F16} {
		for _, h := range HalfAvailable(e) {
			if h.Name == "f32" || h.Name == "generic" {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s", e, h.Name), func(b *testing.B) {
				var th, tf time.Duration
				var fh, ff int
				for b.Loop() {
					t0 := time.Now()
					fh = h.Peak(iters)
					t1 := time.Now()
					ff = FMAPeak(iters)
					th += t1.Sub(t0)
					tf += time.Since(t1)
				}
				gh := float64(fh) * iters * float64(b.N) / th.Seconds() / 1e9
				gf := float64(ff) * iters * float64(b.N) / tf.Seconds() / 1e9
				b.ReportMetric(gh, "GFLOP/s")
				b.ReportMetric(gf, "f32-GFLOP/s")
				b.ReportMetric(gh/gf, "x-f32")
			})
		}
	}
}
