package main

import (
	"math"
	"runtime"
	"testing"
)

// fillNormal gives the same values whatever the number of goroutines, and
// standard normal ones: mean ≈ 0, variance ≈ 1, every chunk filled and the
// chunks' streams distinct.
func TestFillNormal(t *testing.T) {
	n := 3*fillChunk + 12345
	a, b := make([]float32, n), make([]float32, n)
	fillNormal(a, 7)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fillNormal(b, 7)
	var sum, sq float64
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("element %d: %v with GOMAXPROCS %d, %v with 1", i, a[i], runtime.NumCPU(), b[i])
		}
		sum += float64(a[i])
		sq += float64(a[i]) * float64(a[i])
	}
	mean, variance := sum/float64(n), sq/float64(n)-(sum/float64(n))*(sum/float64(n))
	if math.Abs(mean) > 0.01 || math.Abs(variance-1) > 0.01 {
		t.Errorf("mean %.4f, variance %.4f; want 0 and 1", mean, variance)
	}
	if a[n-1] == 0 || a[fillChunk] == a[0] || a[2*fillChunk+1] == a[1] {
		t.Error("a chunk is unfilled or repeats another's stream")
	}
}
