package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestImplGuardPages runs the float32 kernels of every implementation on
// operands that start right after or end right before an inaccessible
// page (Linux; elsewhere plain slices), so that a kernel reading or
// writing one element outside its operands faults instead of passing, and
// compares the results with Generic: the matrix products on every row
// tail and short k (the vector kernels' k tails), Dot4T, Dot, and the row
// kernels on their shortest lengths.
func TestImplGuardPages(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	fill := func(x []float32) []float32 {
		for i := range x {
			x[i] = r.Float32()*2 - 1
		}
		return x
	}
	near := func(what string, got, want []float32, tol float64) {
		t.Helper()
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); !(d <= tol*(1+math.Abs(float64(want[i])))) {
				t.Fatalf("%s: element %d = %v, generic %v", what, i, got[i], want[i])
			}
		}
	}
	g := Generic
	for _, im := range testedImpls() {
		for _, after := range []bool{true, false} {
			ga := func(n int) []float32 { return fill(guarded[float32](t, n, after)) }
			for _, m := range []int{1, 2, 3, 4, 5, 6, 7, 13} {
				for _, n := range []int{16, 32} {
					for _, k := range []int{1, 3, 4, 5, 8, 17} {
						tag := fmt.Sprintf("%s after=%v m=%d n=%d k=%d", im.Name, after, m, n, k)
						a := ga((m-1)*(k+1) + k)
						bt := ga(n * k)
						c := guarded[float32](t, (m-1)*(n+2)+n, !after)
						want := make([]float32, len(c))
						im.MulABt(c, n+2, a, k+1, bt, m, n, k)
						g.MulABt(want, n+2, a, k+1, bt, m, n, k)
						near("MulABt "+tag, c, want, 1e-5)
						b := ga((k-1)*(n+1) + n)
						copy(want, c)
						im.MulAddAB(c, n+2, a, k+1, b, n+1, m, n, k)
						g.MulAddAB(want, n+2, a, k+1, b, n+1, m, n, k)
						near("MulAddAB "+tag, c, want, 1e-5)
						at := ga((k-1)*(m+1) + m)
						copy(want, c)
						im.MulAddAtB(c, n+2, at, m+1, b, n+1, m, n, k)
						g.MulAddAtB(want, n+2, at, m+1, b, n+1, m, n, k)
						near("MulAddAtB "+tag, c, want, 1e-5)
					}
				}
			}
			for _, n := range []int{1, 2, 5} {
				const k, ldb = 8, 11
				a, b := ga(4*k), ga((n-1)*ldb+k)
				c := guarded[float32](t, (n-1)*5+4, !after)
				want := make([]float32, len(c))
				im.Dot4T(c, 5, a, b, ldb, n, k)
				g.Dot4T(want, 5, a, b, ldb, n, k)
				near(fmt.Sprintf("Dot4T %s n=%d", im.Name, n), c, want, 1e-5)
			}
			for n := 0; n <= 9; n++ {
				a, b := ga(n), ga(n)
				near(fmt.Sprintf("Dot %s n=%d", im.Name, n), []float32{im.Dot(a, b)}, []float32{g.Dot(a, b)}, 1e-5)
			}
			for _, n := range []int{16, 48} {
				tag := fmt.Sprintf("%s after=%v n=%d", im.Name, after, n)
				x := ga(n)
				y := append([]float32(nil), x...)
				if got, want := im.Max(x), g.Max(y); got != want {
					t.Fatalf("Max %s: %v, generic %v", tag, got, want)
				}
				s1, s2 := im.ExpSum(x, 0.7, 0.1), g.ExpSum(y, 0.7, 0.1)
				near("ExpSum "+tag, append(x, s1), append(y, s2), 1e-5)
				im.Scale(x, 1.5)
				g.Scale(y, 1.5)
				p := ga(n)
				im.DsFromDp(x, p, 0.25)
				g.DsFromDp(y, p, 0.25)
				near("Scale/DsFromDp "+tag, x, y, 1e-6)
				gx, gy := guarded[float32](t, n, !after), make([]float32, n)
				im.Softcap(x, gx, 0.9)
				g.Softcap(y, gy, 0.9)
				near("Softcap "+tag, append(x, gx...), append(y, gy...), 1e-5)
				im.Softcap(x, nil, 0.9)
				g.Softcap(y, nil, 0.9)
				im.ALiBi(x, 0.25, 5)
				g.ALiBi(y, 0.25, 5)
				near("Softcap/ALiBi "+tag, x, y, 1e-5)
			}
		}
	}
}
