package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The matrix-product benchmarks report GFLOP/s (2·m·n·k per call); compare
// with BenchmarkFMAPeak for the fraction of the single-core peak.

func BenchmarkFMAPeak(b *testing.B) {
	const iters = 1 << 16
	flops := 0
	for b.Loop() {
		flops = FMAPeak(iters)
	}
	b.ReportMetric(float64(flops)*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func benchGemm(b *testing.B, run func(im Impl, c, a, bb, bt []float32, m, n, k int)) {
	requireSets(b)
	r := rand.New(rand.NewPCG(1, 1))
	for _, im := range Available() {
		for _, n := range []int{64, 128} {
			for _, k := range []int{64, 128, 256} {
				m := 64
				b.Run(fmt.Sprintf("%s/m=%d/n=%d/k=%d", im.Name, m, n, k), func(b *testing.B) {
					a := randSlice(r, max(m, k)*max(m, k))
					bb := randSlice(r, k*n)
					bt := make([]float32, n*k)
					PackBt(bt, randSlice(r, n*k), k, n, k)
					c := make([]float32, m*n)
					for b.Loop() {
						run(im, c, a, bb, bt, m, n, k)
					}
					b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

func BenchmarkMulABt(b *testing.B) {
	benchGemm(b, func(im Impl, c, a, _, bt []float32, m, n, k int) {
		im.MulABt(c, n, a, k, bt, m, n, k)
	})
}

func BenchmarkMulAddAB(b *testing.B) {
	benchGemm(b, func(im Impl, c, a, bb, _ []float32, m, n, k int) {
		im.MulAddAB(c, n, a, k, bb, n, m, n, k)
	})
}

func BenchmarkMulAddAtB(b *testing.B) {
	benchGemm(b, func(im Impl, c, a, bb, _ []float32, m, n, k int) {
		im.MulAddAtB(c, n, a, m, bb, n, m, n, k)
	})
}

func BenchmarkExpSum(b *testing.B) {
	requireSets(b)
	r := rand.New(rand.NewPCG(2, 2))
	x := randSlice(r, 1024)
	for _, im := range Available() {
		b.Run(im.Name, func(b *testing.B) {
			y := make([]float32, len(x))
			for b.Loop() {
				copy(y, x)
				im.ExpSum(y, 1, 0)
			}
			b.SetBytes(4 * int64(len(x)))
		})
	}
}

// BenchmarkExpSumRows times ExpSum on 1024-element score rows as the
// forward meets them: dense, a causal row (its second half −Inf) and a
// masked tail (every fourth element −Inf, as in a block or padding mask);
// the …/bf16 cases time ExpSumBF16 on the same rows (the bf16 forward's
// exponential, which writes P in bfloat16).
func BenchmarkExpSumRows(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	x := randSlice(r, 1024)
	inf := float32(math.Inf(-1))
	causal, tail := slices.Clone(x), slices.Clone(x)
	for i := range causal[512:] {
		causal[512+i] = inf
	}
	for i := 0; i < len(tail); i += 4 {
		tail[i] = inf
	}
	for _, im := range Available() {
		for _, row := range []struct {
			name string
			x    []float32
		}{{"dense", x}, {"causal", causal}, {"masked", tail}} {
			b.Run(im.Name+"/"+row.name, func(b *testing.B) {
				y := make([]float32, len(row.x))
				for b.Loop() {
					copy(y, row.x)
					im.ExpSum(y, 1, 0)
				}
				b.SetBytes(4 * int64(len(row.x)))
			})
			b.Run(im.Name+"/"+row.name+"/bf16", func(b *testing.B) {
				y, p := make([]float32, len(row.x)), make([]uint16, len(row.x))
				for b.Loop() {
					copy(y, row.x)
					im.ExpSumBF16(p, y, 1, 0)
				}
				b.SetBytes(4 * int64(len(row.x)))
			})
		}
	}
}

// BenchmarkForwardProducts times the forward's two products at its tile
// shapes (blockSizesFor on a 1 MiB L2: 48 query rows, key tiles of 512):
// S = Q·Kᵀ (MulABt, m = 48, n = keys, k = d, Kᵀ packed) and O += P·V
// (MulAddAB, and MulAB for a row block's first tile: m = 48, n = d,
// k = keys, P rows keys apart). keys = 512 streams V (and walks Kᵀ) from
// L2; keys = 64 keeps them in L1; 48 and 192 are the causal forward's
// partial and part-full tiles. Compare the products' GFLOP/s.
func BenchmarkForwardProducts(b *testing.B) {
	requireSets(b)
	r := rand.New(rand.NewPCG(3, 3))
	const m = 48
	for _, im := range Available() {
		for _, d := range []int{64, 128} {
			for _, keys := range []int{48, 64, 192, 512} {
				q, p := randSlice(r, m*d), randSlice(r, m*keys)
				kt, v := make([]float32, keys*d), randSlice(r, keys*d)
				PackBt(kt, randSlice(r, keys*d), d, keys, d)
				s, o := make([]float32, m*keys), make([]float32, m*d)
				for _, c := range []struct {
					name string
					run  func()
				}{
					{"MulABt", func() { im.MulABt(s, keys, q, d, kt, m, keys, d) }},
					{"MulAddAB", func() { im.MulAddAB(o, d, p, keys, v, d, m, d, keys) }},
					{"MulAB", func() { im.MulAB(o, d, p, keys, v, d, m, d, keys) }},
				} {
					b.Run(fmt.Sprintf("%s/d=%d/keys=%d/%s", im.Name, d, keys, c.name), func(b *testing.B) {
						for b.Loop() {
							c.run()
						}
						b.ReportMetric(2*float64(m*d*keys)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}
