//go:build amd64 && !purego

package kernel

import "testing"

func BenchmarkFMAPeakAVX2(b *testing.B) {
	if !hasAVX2 {
		b.Skip("no AVX2")
	}
	const iters = 1 << 16
	for b.Loop() {
		FMAPeakAVX2(iters)
	}
	b.ReportMetric(192*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkFMAPeakAVX512(b *testing.B) {
	if !hasAVX512 {
		b.Skip("no AVX-512")
	}
	const iters = 1 << 16
	for b.Loop() {
		FMAPeakAVX512(iters)
	}
	b.ReportMetric(384*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
