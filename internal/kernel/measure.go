package kernel

import (
	"math"
	"slices"
	"time"
)

// The 16-bit product paths are chosen by measurement: which one is fastest
// differs by CPU in ways feature bits do not tell (VDPBF16PS runs at twice
// the float32 FMA rate on AMD Zen 4 but at half of it on Intel Sapphire
// Rapids, where AMX is far ahead of both).

// HalfTiming is the measured speed of one path.
type HalfTiming struct {
	Name   string
	GFLOPS float64
}

// The fixed problem the paths are timed on: an attention tile, 48 query
// rows against 64 keys of head dimension 64 (S = Q·Kᵀ's shape; O += P·V
// has the same with k and n swapped).
const measureM, measureN, measureK = 48, 64, 64

// MeasureHalf times every available path for e on a fixed tile-sized
// product (best of three rounds of about half a millisecond each) and
// returns them fastest first. The "f32" path is timed as the float32
// kernels of the active set (Active().Impl) on float32 data, which is what
// it runs in steady state; the conversions happen once per tile outside
// the product.
func MeasureHalf(e Elem) []HalfTiming {
	checkElem(e)
	return measureHalf(e, Active().Impl)
}

// measureHalf is MeasureHalf with the "f32" path timed on the float32
// kernels im: the default set measures with its own.
func measureHalf(e Elem, im Impl) []HalfTiming {
	const m, n, k = measureM, measureN, measureK
	a := make([]uint16, m*k)
	af := make([]float32, m*k)
	for i := range a {
		af[i] = float32(math.Sin(float64(i)))
		a[i] = e.FromF32(af[i])
	}
	bf := make([]float32, k*n)
	for i := range bf {
		bf[i] = float32(math.Cos(float64(i)))
	}
	b := make([]uint16, VNNILen(k, n))
	PackVNNI(b, bf, n, k, n, false, e)
	c := make([]float32, m*n)
	var out []HalfTiming
	for _, h := range registered().halves[e-1] {
		run := func() { h.MulAdd(c, n, a, k, b, W*k, m, n, k) }
		if h.Name == "f32" {
			run = func() { im.MulAddAB(c, n, af, k, bf, n, m, n, k) }
		}
		best := math.Inf(1)
		for round := 0; round < 3; round++ {
			calls, start := 0, time.Now()
			for calls < 3 || time.Since(start) < 500*time.Microsecond {
				run()
				calls++
			}
			best = min(best, time.Since(start).Seconds()/float64(calls))
		}
		out = append(out, HalfTiming{h.Name, 2 * m * n * k / best / 1e9})
	}
	slices.SortStableFunc(out, func(x, y HalfTiming) int {
		switch {
		case x.GFLOPS > y.GFLOPS:
			return -1
		case x.GFLOPS < y.GFLOPS:
			return 1
		}
		return 0
	})
	return out
}
