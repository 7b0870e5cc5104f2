package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

// BenchmarkPeak is the machine's FP32 FMA peak on all workers, the yardstick
// for the products below (run them in one go: go test -bench . ).
func BenchmarkPeak(b *testing.B) {
	e := New(0)
	const iters = 1 << 20
	var flops int
	for b.Loop() {
		e.Parallel(e.workers, func(int) { flops = kernel.FMAPeak(iters) })
	}
	b.ReportMetric(float64(flops)*iters*float64(e.workers)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkProducts measures the shapes of a GPT training step (tokens ×
// width × width) in GFLOP/s.
func BenchmarkProducts(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	e := New(0)
	for _, s := range [][3]int{{2048, 128, 128}, {2048, 384, 128}, {2048, 512, 128}, {2048, 128, 512}, {2048, 256, 128}, {1024, 1024, 1024}} {
		m, n, k := s[0], s[1], s[2]
		a, bb, c := randSlice(r, m*k), randSlice(r, k*n), make([]float32, m*n)
		dy, dw := randSlice(r, m*n), make([]float32, k*n)
		bt := randSlice(r, n*k)
		for _, op := range []string{"AB", "AtB", "ABt"} {
			b.Run(fmt.Sprintf("%s/m=%d/n=%d/k=%d", op, m, n, k), func(b *testing.B) {
				for b.Loop() {
					switch op {
					case "AB":
						e.AB(c, n, a, k, bb, n, m, n, k, false)
					case "AtB":
						// The weight gradient dW = Xᵀ·dY: the sum runs over the m tokens.
						e.AtB(dw, n, a, k, dy, n, k, n, m, false)
					case "ABt":
						e.ABt(c, n, a, k, bt, k, m, n, k, false)
					}
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
