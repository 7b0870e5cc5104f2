package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMulAddAddsOnce checks the accumulating products' contract (see
// Impl.MulAddAB): the sum starts from zero and is added to C once, so
// MulAdd into C equals, bit for bit, C + (MulAdd into zeros), on every
// float32 implementation and every half-precision path. C holds values
// large enough (±1e3) that adding the products into C one by one would
// round them away differently.
func TestMulAddAddsOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	shapes := [][3]int{{1, 16, 1}, {6, 32, 40}, {7, 48, 130}, {13, 16, 64}}
	check := func(t *testing.T, name string, m, n int, mulAdd func(c []float32)) {
		t.Helper()
		c0 := make([]float32, m*n)
		for i := range c0 {
			c0[i] = float32(r.NormFloat64() * 1e3)
		}
		c := append([]float32(nil), c0...)
		mulAdd(c)
		sum := make([]float32, m*n)
		mulAdd(sum)
		for i := range c {
			if want := c0[i] + sum[i]; math.Float32bits(c[i]) != math.Float32bits(want) {
				t.Fatalf("%s m=%d n=%d: element %d: %v, want C + product %v + %v = %v", name, m, n, i, c[i], c0[i], sum[i], want)
			}
		}
	}
	for _, im := range Available() {
		t.Run(im.Name, func(t *testing.T) {
			for _, s := range shapes {
				m, n, k := s[0], s[1], s[2]
				a, at, b := randSlice(r, m*k), randSlice(r, k*m), randSlice(r, k*n)
				check(t, "MulAddAB", m, n, func(c []float32) { im.MulAddAB(c, n, a, k, b, n, m, n, k) })
				check(t, "MulAddAtB", m, n, func(c []float32) { im.MulAddAtB(c, n, at, m, b, n, m, n, k) })
			}
		})
	}
	for _, e := range []Elem{BF16, F16} {
		for _, h := range HalfAvailable(e) {
			t.Run(e.String()+"/"+h.Name, func(t *testing.T) {
				for _, s := range shapes {
					m, n, k := s[0], s[1], s[2]+s[2]%2
					a, b := randHalf(r, e, m*k), randHalf(r, e, VNNILen(k, n))
					check(t, "MulAdd", m, n, func(c []float32) { h.MulAdd(c, n, a, k, b, W*k, m, n, k) })
				}
			})
		}
	}
}

// TestMulABStoresTheSum checks Impl.MulAB against its contract: C = A·B
// with, bit for bit, what MulAddAB adds to a cleared C, on every float32
// implementation, whatever C held (NaN here), for k = 0 (C cleared), a
// row stride wider than n, and products of −0 (a sum from +0 is +0).
func TestMulABStoresTheSum(t *testing.T) {
	r := rand.New(rand.NewPCG(73, 74))
	negZero := float32(math.Copysign(0, -1))
	shapes := [][3]int{{1, 16, 1}, {6, 32, 40}, {7, 48, 130}, {13, 16, 64}, {5, 32, 0}, {3, 64, 3}}
	for _, im := range Available() {
		t.Run(im.Name, func(t *testing.T) {
			for si, s := range shapes {
				m, n, k := s[0], s[1], s[2]
				ldc := n + 16*(si%2)
				a, b := randSlice(r, m*k), randSlice(r, k*n)
				if si == len(shapes)-1 {
					// Every product −0: −0·x and x·−0.
					for i := range a {
						a[i] = negZero
					}
				}
				want := make([]float32, m*ldc)
				im.MulAddAB(want, ldc, a, k, b, n, m, n, k)
				got := make([]float32, m*ldc)
				for i := range got {
					got[i] = float32(math.NaN())
				}
				im.MulAB(got, ldc, a, k, b, n, m, n, k)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						g, w := got[i*ldc+j], want[i*ldc+j]
						if math.Float32bits(g) != math.Float32bits(w) {
							t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, want %v (MulAddAB into zeros)", m, n, k, i, j, g, w)
						}
					}
					for j := n; j < ldc; j++ {
						if g := got[i*ldc+j]; g == g {
							t.Fatalf("m=%d n=%d k=%d: C[%d,%d] beyond n written: %v", m, n, k, i, j, g)
						}
					}
				}
			}
		})
	}
}
