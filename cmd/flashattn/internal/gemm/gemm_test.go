package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// ref computes op(A)·op(B) in float64; element (i, j) of A is a(i, p).
func ref(m, n, k int, a, b func(i, j int) float32) []float64 {
	c := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(a(i, p)) * float64(b(p, j))
			}
			c[i*n+j] = s
		}
	}
	return c
}

// TestProducts checks AB, AtB and ABt against float64 on shapes that are
// not multiples of any tile (m, n around mc, nc and kernel.W; k across kc),
// with padded leading dimensions, overwriting and accumulating.
func TestProducts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {5, 7, 3}, {6, 16, 9}, {49, 33, 257}, {97, 130, 70}, {13, 144, 513}, {50, 15, 300}, {0, 4, 4}, {4, 4, 0}}
	e := New(3)
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, op := range []string{"AB", "AtB", "ABt"} {
			for _, acc := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%dx%dx%d/acc=%v", op, m, n, k, acc), func(t *testing.T) {
					const pad = 3
					ldc := n + pad
					c := randSlice(r, max(1, m*ldc))
					c0 := slices.Clone(c)
					var want []float64
					switch op {
					case "AB":
						lda, ldb := k+pad, n+pad
						a, b := randSlice(r, m*lda), randSlice(r, k*ldb)
						want = ref(m, n, k, func(i, p int) float32 { return a[i*lda+p] }, func(p, j int) float32 { return b[p*ldb+j] })
						e.AB(c, ldc, a, lda, b, ldb, m, n, k, acc)
					case "AtB":
						lda, ldb := m+pad, n+pad
						a, b := randSlice(r, k*lda), randSlice(r, k*ldb)
						want = ref(m, n, k, func(i, p int) float32 { return a[p*lda+i] }, func(p, j int) float32 { return b[p*ldb+j] })
						e.AtB(c, ldc, a, lda, b, ldb, m, n, k, acc)
					case "ABt":
						lda, ldb := k+pad, k+pad
						a, b := randSlice(r, m*lda), randSlice(r, n*ldb)
						want = ref(m, n, k, func(i, p int) float32 { return a[i*lda+p] }, func(p, j int) float32 { return b[j*ldb+p] })
						e.ABt(c, ldc, a, lda, b, ldb, m, n, k, acc)
					}
					tol := 1e-5 * math.Sqrt(float64(k+1)) * 4
					for i := 0; i < m; i++ {
						for j := 0; j < ldc; j++ {
							got := float64(c[i*ldc+j])
							if j >= n { // padding between rows is never written
								if c[i*ldc+j] != c0[i*ldc+j] {
									t.Fatalf("padding (%d,%d) changed", i, j)
								}
								continue
							}
							w := want[i*n+j]
							if acc {
								w += float64(c0[i*ldc+j])
							}
							if math.Abs(got-w) > tol*(1+math.Abs(w)) {
								t.Fatalf("(%d,%d) = %v, want %v", i, j, got, w)
							}
						}
					}
				})
			}
		}
	}
}

// TestWorkersBitIdentical checks that the result does not depend on the
// number of workers.
func TestWorkersBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 201, 270, 600
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	at := randSlice(r, k*m)
	var prev, prevT []float32
	for _, w := range []int{1, 2, 5} {
		e := New(w)
		c, ct := make([]float32, m*n), make([]float32, m*n)
		e.AB(c, n, a, k, b, n, m, n, k, false)
		e.AtB(ct, n, at, m, b, n, m, n, k, false)
		if prev != nil && (!slices.Equal(c, prev) || !slices.Equal(ct, prevT)) {
			t.Fatalf("workers=%d: result differs from workers=1", w)
		}
		prev, prevT = c, ct
	}
}

func TestTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols := 37, 70
	src := randSlice(r, rows*(cols+1))
	dst := make([]float32, cols*(rows+2))
	Transpose(dst, rows+2, src, cols+1, rows, cols)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			if dst[j*(rows+2)+i] != src[i*(cols+1)+j] {
				t.Fatalf("(%d,%d) not transposed", i, j)
			}
		}
	}
}

func TestBadShapePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a too-short C did not panic")
		}
	}()
	New(1).AB(make([]float32, 3), 2, make([]float32, 4), 2, make([]float32, 4), 2, 2, 2, 2, false)
}
