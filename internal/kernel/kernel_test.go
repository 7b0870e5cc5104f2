package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// canary marks memory a kernel must not write.
const canary = float32(-12345.5)

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}

var (
	testMs = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 64}
	testNs = []int{16, 32, 48, 64, 80, 128}
	testKs = []int{1, 2, 7, 16, 40, 64, 65, 128, 257}
)

// gemmCase runs one matrix product on a C with canaries around the m×n
// region and checks the result against want (float64) within a tolerance
// relative to mag = Σ|a||b| per element.
func checkC(t *testing.T, name string, c []float32, ldc, m, n int, want, mag []float64, k int) {
	t.Helper()
	tol := 1e-5 * float64(k+1)
	for i := 0; i < len(c); i++ {
		row, col := i/ldc, i%ldc
		if row < m && col < n {
			w := want[row*n+col]
			if d := math.Abs(float64(c[i]) - w); !(d <= tol*mag[row*n+col]+1e-30) {
				t.Fatalf("%s: c[%d,%d] = %v, want %v (diff %g, mag %g)", name, row, col, c[i], w, d, mag[row*n+col])
			}
		} else if c[i] != canary {
			t.Fatalf("%s: wrote %v outside the output at row %d col %d", name, c[i], row, col)
		}
	}
}

func newC(r *rand.Rand, m, n, ldc int, accumulate bool) ([]float32, []float64) {
	// One extra row after the last to catch overruns; canaries everywhere
	// outside the m×n region.
	c := make([]float32, (m+1)*ldc)
	init := make([]float64, m*n)
	for i := range c {
		c[i] = canary
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			v := float32(0)
			if accumulate {
				v = r.Float32()*2 - 1
			}
			c[i*ldc+j] = v
			init[i*n+j] = float64(v)
		}
	}
	return c, init
}

func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ms, ks := testMs, testKs
	if raceEnabled || testing.Short() {
		// The race detector makes the float64 reference loops slow; a
		// subset still covers every row tail and both column passes.
		ms, ks = []int{1, 2, 3, 4, 5, 6, 7, 13}, []int{1, 7, 65}
	}
	for _, im := range Available() {
		t.Run(im.Name, func(t *testing.T) {
			for _, m := range ms {
				for _, n := range testNs {
					for _, k := range ks {
						testMatMul(t, r, im, m, n, k)
					}
				}
			}
		})
	}
}

func testMatMul(t *testing.T, r *rand.Rand, im Impl, m, n, k int) {
	lda, ldb, ldc := k+3, n+3, n+3
	// A is m×k (lda); for Aᵀ·B it is k×m with leading dimension m+3.
	a := randSlice(r, m*lda)
	at := randSlice(r, k*(m+3))
	b := randSlice(r, k*ldb)    // k×n row-major for A·B
	bn := randSlice(r, n*(k+3)) // n×k row-major for A·Bᵀ
	bt := make([]float32, Pad(n)*k)
	PackBt(bt, bn, k+3, n, k)

	want := make([]float64, m*n)
	mag := make([]float64, m*n)
	tag := fmt.Sprintf("%s m=%d n=%d k=%d", im.Name, m, n, k)

	// C = A·Bᵀ
	c, _ := newC(r, m, n, ldc, false)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, g float64
			for p := 0; p < k; p++ {
				x, y := float64(a[i*lda+p]), float64(bn[j*(k+3)+p])
				s += x * y
				g += math.Abs(x * y)
			}
			want[i*n+j], mag[i*n+j] = s, g+1
		}
	}
	im.MulABt(c, ldc, a, lda, bt, m, n, k)
	checkC(t, "MulABt "+tag, c, ldc, m, n, want, mag, k)

	// C += A·B
	c, init := newC(r, m, n, ldc, true)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s, g := init[i*n+j], math.Abs(init[i*n+j])
			for p := 0; p < k; p++ {
				x, y := float64(a[i*lda+p]), float64(b[p*ldb+j])
				s += x * y
				g += math.Abs(x * y)
			}
			want[i*n+j], mag[i*n+j] = s, g+1
		}
	}
	im.MulAddAB(c, ldc, a, lda, b, ldb, m, n, k)
	checkC(t, "MulAddAB "+tag, c, ldc, m, n, want, mag, k)

	// C += Aᵀ·B
	c, init = newC(r, m, n, ldc, true)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s, g := init[i*n+j], math.Abs(init[i*n+j])
			for p := 0; p < k; p++ {
				x, y := float64(at[p*(m+3)+i]), float64(b[p*ldb+j])
				s += x * y
				g += math.Abs(x * y)
			}
			want[i*n+j], mag[i*n+j] = s, g+1
		}
	}
	im.MulAddAtB(c, ldc, at, m+3, b, ldb, m, n, k)
	checkC(t, "MulAddAtB "+tag, c, ldc, m, n, want, mag, k)
}

// TestMatMulExactLength runs the three products of every implementation
// on operands that end exactly at the last element each may touch, with
// an inaccessible page right after them (then right before them), so that
// a read or write even one element outside faults. The results must agree
// with Generic's, and the columns of C between rows (ldc > n) must be
// untouched.
func TestMatMulExactLength(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ms, ks := []int{1, 5, 6, 7, 13}, []int{1, 5, 16, 33}
	if raceEnabled || testing.Short() {
		ms, ks = []int{1, 7}, []int{5}
	}
	for _, im := range Available() {
		for _, after := range []bool{true, false} {
			for _, m := range ms {
				for _, n := range []int{16, 48, 64, 112} {
					for _, k := range ks {
						testExactLength(t, r, im, after, m, n, k)
					}
				}
			}
		}
	}
}

func testExactLength(t *testing.T, r *rand.Rand, im Impl, after bool, m, n, k int) {
	lda, ldat, ldb, ldc := k+1, m+1, n+1, n+2
	fill := func(n int) []float32 {
		x := guarded[float32](t, n, after)
		for i := range x {
			x[i] = r.Float32()*2 - 1
		}
		return x
	}
	a := fill((m-1)*lda + k)   // m×k
	at := fill((k-1)*ldat + m) // k×m: Aᵀ
	b := fill((k-1)*ldb + n)   // k×n
	bt := fill(n * k)          // n×k packed: the operand of MulABt
	abs := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float32(math.Abs(float64(v)))
		}
		return y
	}
	for _, op := range []struct {
		name string
		run  func(im Impl, c, a, at, b, bt []float32)
	}{
		{"MulABt", func(im Impl, c, a, _, _, bt []float32) { im.MulABt(c, ldc, a, lda, bt, m, n, k) }},
		{"MulAddAB", func(im Impl, c, a, _, b, _ []float32) { im.MulAddAB(c, ldc, a, lda, b, ldb, m, n, k) }},
		{"MulAddAtB", func(im Impl, c, _, at, b, _ []float32) { im.MulAddAtB(c, ldc, at, ldat, b, ldb, m, n, k) }},
	} {
		c := guarded[float32](t, (m-1)*ldc+n, after)
		for i := range c {
			c[i] = canary
			if i%ldc < n {
				c[i] = r.Float32()*2 - 1
			}
		}
		want := append([]float32(nil), c...)
		mag := make([]float32, len(c)) // Σ|terms|, by the same product on magnitudes
		for i := range mag {
			mag[i] = float32(math.Abs(float64(c[i])))
		}
		op.run(im, c, a, at, b, bt)
		op.run(Generic, want, a, at, b, bt)
		op.run(Generic, mag, abs(a), abs(at), abs(b), abs(bt))
		for i := range c {
			tol := 1e-6 * float64(k+1) * float64(mag[i]+1)
			if i%ldc >= n {
				tol = 0 // between rows: untouched
			}
			if d := math.Abs(float64(c[i] - want[i])); !(d <= tol) {
				t.Fatalf("%s %s m=%d n=%d k=%d (guard after: %v): c[%d] = %v, generic %v",
					im.Name, op.name, m, n, k, after, i, c[i], want[i])
			}
		}
	}
}

func TestWrapperPanics(t *testing.T) {
	for _, im := range Available() {
		if im.Name == "generic" {
			continue
		}
		mustPanic := func(name string, f func()) {
			t.Helper()
			defer func() {
				if recover() == nil {
					t.Errorf("%s %s: no panic", im.Name, name)
				}
			}()
			f()
		}
		x := make([]float32, 100)
		mustPanic("MulABt short c", func() { im.MulABt(x[:30], 16, x, 4, x, 2, 16, 4) })
		mustPanic("MulABt bad n", func() { im.MulABt(x, 20, x, 4, x, 2, 17, 4) })
		mustPanic("MulAddAB short b", func() { im.MulAddAB(x, 16, x, 4, x[:40], 16, 2, 16, 4) })
		mustPanic("MulAddAtB short a", func() { im.MulAddAtB(x, 16, x[:10], 2, x, 16, 2, 16, 8) })
		mustPanic("ExpSum len", func() { im.ExpSum(x[:17], 1, 0) })
		mustPanic("Max empty", func() { im.Max(x[:0]) })
		mustPanic("DsFromDp short p", func() { im.DsFromDp(x[:32], x[:16], 0) })
	}
}

func TestExpSum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	inf := float32(math.Inf(1))
	for _, im := range Available() {
		for _, n := range []int{0, 16, 32, 48, 64, 80, 144, 1008} {
			x := make([]float32, n)
			for i := range x {
				switch r.IntN(8) {
				case 0:
					x[i] = -inf
				default:
					x[i] = r.Float32()*40 - 30
				}
			}
			scale, sub := float32(0.37), float32(2.5)
			want := append([]float32(nil), x...)
			wsum := Generic.ExpSum(want, scale, sub)
			got := append([]float32(nil), x...)
			gsum := im.ExpSum(got, scale, sub)
			for i := range got {
				ref := math.Exp(float64(x[i])*float64(scale) - float64(sub))
				if d := math.Abs(float64(got[i]) - ref); d > 4e-6*ref {
					t.Fatalf("%s: exp(%v*%v-%v) = %v, want %v", im.Name, x[i], scale, sub, got[i], ref)
				}
				if x[i] == -inf && got[i] != 0 {
					t.Fatalf("%s: exp(-Inf) = %v", im.Name, got[i])
				}
			}
			if d := math.Abs(float64(gsum - wsum)); d > 1e-5*math.Abs(float64(wsum)) {
				t.Fatalf("%s n=%d: sum %v, generic %v", im.Name, n, gsum, wsum)
			}
		}
	}
}

func TestExpSpecial(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	in := []float32{-inf, inf, nan, 0, ExpMin, ExpMin - 1e-3, -1000, -1e30, ExpMax, ExpMax + 1e-3, 89, 1000, 1e30, negZero, 1, -1}
	for len(in)%W != 0 {
		in = append(in, 0.5)
	}
	for _, im := range Available() {
		x := append([]float32(nil), in...)
		im.ExpSum(x, 1, 0)
		for i, v := range in {
			got := x[i]
			want := Exp(v)
			switch {
			case v != v:
				if got == got {
					t.Errorf("%s: exp(NaN) = %v", im.Name, got)
				}
			case v < ExpMin:
				if got != 0 {
					t.Errorf("%s: exp(%v) = %v, want 0", im.Name, v, got)
				}
			case v > ExpMax:
				if !math.IsInf(float64(got), 1) {
					t.Errorf("%s: exp(%v) = %v, want +Inf", im.Name, v, got)
				}
			default:
				if !expWithin(im.Name, got, v) {
					t.Errorf("%s: exp(%v) = %v, want %v (generic %v)", im.Name, v, got, math.Exp(float64(v)), want)
				}
			}
		}
	}
}

func ulps(a, b float32) int64 {
	if a == b {
		return 0
	}
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if (ia < 0x80000000) != (ib < 0x80000000) {
		return math.MaxInt64
	}
	if d := ia - ib; d < 0 {
		return -d
	} else {
		return d
	}
}

// TestExpULP sweeps float32 bit patterns in [ExpMin, 0] (every stride-th
// one) and evenly spaced points of [0, ExpMax], checking every
// implementation against its bound of Impl.ExpSum (expBound: 2 ulp of the
// correctly rounded exp, plus |x|·2^-23 relative for AVX-512's base-2
// reduction) and within 2 ulp on |x| ≤ 1.
func TestExpULP(t *testing.T) {
	xs := expNegSweep()
	const npos = 1 << 18
	for i := 0; i <= npos; i++ {
		xs = append(xs, float32(float64(ExpMax)*float64(i)/npos))
	}
	for len(xs)%W != 0 {
		xs = append(xs, 0)
	}
	ref := make([]float32, len(xs))
	for i, x := range xs {
		ref[i] = float32(math.Exp(float64(x)))
	}
	buf := make([]float32, len(xs))
	for _, im := range Available() {
		copy(buf, xs)
		for off := 0; off < len(buf); off += 4096 {
			im.ExpSum(buf[off:min(off+4096, len(buf))], 1, 0)
		}
		var worst, worstNear int64 // worstNear: on |x| ≤ 1
		var worstX, worstNearX, worstBoundX float32
		var worstBound float64 // the largest error / the documented bound
		hist := [4]int{}
		for i, got := range buf {
			x := xs[i]
			u := ulps(got, ref[i])
			if u > worst {
				worst, worstX = u, x
			}
			if u > worstNear && x >= -1 && x <= 1 {
				worstNear, worstNearX = u, x
			}
			e := math.Exp(float64(x))
			if f := math.Abs(float64(got)-e) / expBound(im.Name, x); f > worstBound {
				worstBound, worstBoundX = f, x
			}
			hist[min(u, 3)]++
		}
		t.Logf("%s: %d points, max %d ulp (at x=%v), %d on |x| ≤ 1, ulp histogram 0:%d 1:%d 2:%d >2:%d; "+
			"largest error %.3f of the bound (at x=%v)",
			im.Name, len(xs), worst, worstX, worstNear, hist[0], hist[1], hist[2], hist[3], worstBound, worstBoundX)
		if worstNear > 2 {
			t.Errorf("%s: exp error %d ulp at x=%v", im.Name, worstNear, worstNearX)
		}
		if worstBound > 1 {
			t.Errorf("%s: exp error %d ulp at x=%v: %.3f times the bound of Impl.ExpSum",
				im.Name, ulps(buf[slices.Index(xs, worstBoundX)], float32(math.Exp(float64(worstBoundX)))),
				worstBoundX, worstBound)
		}
	}
}

// expGrowth is the documented error of implementation name's exponential
// that grows with its argument (Impl.ExpSum), relative to exp(t) and per
// unit of |t|: 2^-23 for the AVX-512 ones (base-2 reduction: u = t·log2 e
// is rounded), none for the others.
func expGrowth(name string) float64 {
	if strings.HasPrefix(name, "avx512") {
		return 0x1p-23
	}
	return 0
}

// expBound is the documented bound of |exp(x) − e^x| for implementation
// name (Impl.ExpSum): 2 ulp of the correctly rounded value plus
// expGrowth(name)·|x|·e^x.
func expBound(name string, x float32) float64 {
	e := math.Exp(float64(x))
	r := float32(e)
	ulp := float64(math.Nextafter32(r, float32(math.Inf(1))) - r)
	return 2*ulp + expGrowth(name)*math.Abs(float64(x))*e
}

// expWithin reports whether got is within implementation name's bound of
// e^x (expBound).
func expWithin(name string, got, x float32) bool {
	return math.Abs(float64(got)-math.Exp(float64(x))) <= expBound(name, x)
}

func TestMaxScaleDs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	inf := float32(math.Inf(-1))
	for _, im := range Available() {
		for _, n := range []int{16, 32, 48, 64, 80, 96, 112, 1024, 1040} {
			x := randSlice(r, n)
			for i := range x {
				if r.IntN(5) == 0 {
					x[i] = inf
				}
			}
			x[r.IntN(n)] = 7 // put the max anywhere
			if got, want := im.Max(x), Generic.Max(x); got != want {
				t.Fatalf("%s: Max = %v, want %v", im.Name, got, want)
			}
			all := make([]float32, n)
			for i := range all {
				all[i] = inf
			}
			if got := im.Max(all); got != inf {
				t.Fatalf("%s: Max(all -Inf) = %v", im.Name, got)
			}

			y := append([]float32(nil), x...)
			z := append([]float32(nil), x...)
			im.Scale(y, 0.3)
			Generic.Scale(z, 0.3)
			for i := range y {
				if y[i] != z[i] {
					t.Fatalf("%s: Scale[%d] = %v, want %v", im.Name, i, y[i], z[i])
				}
			}

			dp := randSlice(r, n)
			p := randSlice(r, n+16)
			w := append([]float32(nil), dp...)
			im.DsFromDp(dp, p, 0.25)
			Generic.DsFromDp(w, p, 0.25)
			for i := range dp {
				if dp[i] != w[i] {
					t.Fatalf("%s: DsFromDp[%d] = %v, want %v", im.Name, i, dp[i], w[i])
				}
			}
		}
	}
}

func TestFMAPeak(t *testing.T) {
	if f := FMAPeak(10); f <= 0 {
		t.Fatalf("FMAPeak flops/iter = %d", f)
	}
	if fmaPeakGeneric(3) != 24 {
		t.Fatal("generic FLOPs")
	}
}

// TestDot4T compares Dot4T of every implementation with float64 sums,
// including odd key counts (the pair loop's tail) and strided keys, and
// checks nothing past the 4 outputs of each key row is written.
func TestDot4T(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, im := range Available() {
		for _, n := range []int{1, 2, 3, 7, 64, 257} {
			for _, k := range []int{8, 16, 64, 128, 136} {
				const ldc = 7
				ldb := k + 5
				a, b := randSlice(r, 4*k), randSlice(r, n*ldb)
				c := make([]float32, n*ldc)
				for i := range c {
					c[i] = 42
				}
				im.Dot4T(c, ldc, a, b, ldb, n, k)
				for j := 0; j < n; j++ {
					for rr := 0; rr < ldc; rr++ {
						got := float64(c[j*ldc+rr])
						if rr >= 4 {
							if got != 42 {
								t.Fatalf("%s n%d k%d: wrote c[%d][%d]", im.Name, n, k, j, rr)
							}
							continue
						}
						var want, mag float64
						for p := 0; p < k; p++ {
							x := float64(a[rr*k+p]) * float64(b[j*ldb+p])
							want += x
							mag += math.Abs(x)
						}
						if math.Abs(got-want) > 1e-5*mag+1e-6 {
							t.Fatalf("%s n%d k%d: c[%d][%d] = %v, want %v", im.Name, n, k, j, rr, got, want)
						}
					}
				}
			}
		}
	}
}

// TestPhilox8 compares the vector Philox with the scalar one on random
// counters and keys, and the scalar one with Random123's known answers.
func TestPhilox8(t *testing.T) {
	if got := Philox4x32([4]uint32{}, [2]uint32{}); got != [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8} {
		t.Fatalf("Philox4x32(0, 0) = %x", got)
	}
	r := rand.New(rand.NewPCG(8, 8))
	for range 1000 {
		c := [4]uint32{r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()}
		k := [2]uint32{r.Uint32(), r.Uint32()}
		var got, want [32]uint32
		Philox8(&got, c[0], c[1], c[2], c[3], k[0], k[1])
		philox8Generic(&want, c[0], c[1], c[2], c[3], k[0], k[1])
		if got != want {
			t.Fatalf("Philox8(%x, %x) = %x, want %x", c, k, got, want)
		}
	}
}

// TestSoftcap compares every implementation with float64 tanh over a sweep
// of arguments and caps, with the derivative factor, and special values.
func TestSoftcap(t *testing.T) {
	for _, im := range Available() {
		for _, c := range []float32{0.5, 2.5, 30, 50} {
			var x []float32
			for v := float32(-300); v <= 300; v += 0.0731 {
				x = append(x, v)
			}
			x = append(x, float32(math.Inf(1)), float32(math.Inf(-1)), 0, 1e-30)
			for len(x)%W != 0 {
				x = append(x, 0.5)
			}
			in := append([]float32(nil), x...)
			g := make([]float32, len(x))
			im.Softcap(x, g, c)
			for j, v := range in {
				tw := math.Tanh(float64(v) / float64(c))
				want, wantG := float64(c)*tw, 1-tw*tw
				if d := math.Abs(float64(x[j]) - want); d > 4e-7*math.Abs(want)+1e-37 {
					t.Fatalf("%s c=%v: softcap(%v) = %v, want %v", im.Name, c, v, x[j], want)
				}
				if d := math.Abs(float64(g[j]) - wantG); d > 1e-6 {
					t.Fatalf("%s c=%v: g(%v) = %v, want %v", im.Name, c, v, g[j], wantG)
				}
			}
			nan := make([]float32, W)
			nan[3] = float32(math.NaN())
			im.Softcap(nan, nil, c)
			if !math.IsNaN(float64(nan[3])) || nan[4] != 0 {
				t.Fatalf("%s: NaN handling: %v", im.Name, nan[:5])
			}
		}
	}
}

// TestALiBi compares every implementation with the bias in float64.
func TestALiBi(t *testing.T) {
	for _, im := range Available() {
		for _, pos := range []float32{-40, 0, 7.0, 33, 1000} {
			x := randSlice(rand.New(rand.NewPCG(3, 3)), 64)
			in := append([]float32(nil), x...)
			im.ALiBi(x, 0.125, pos)
			for j, v := range in {
				want := float64(v) - 0.125*math.Abs(float64(pos)-float64(j))
				if math.Abs(float64(x[j])-want) > 1e-6*(1+math.Abs(want)) {
					t.Fatalf("%s pos %v: x[%d] = %v, want %v", im.Name, pos, j, x[j], want)
				}
			}
		}
	}
}

// TestImplComplete: no implementation leaves a kernel unset.
func TestImplComplete(t *testing.T) {
	for _, im := range append(archImpls(), Generic) {
		v := reflect.ValueOf(im)
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.Kind() == reflect.Func && f.IsNil() {
				t.Errorf("%s: %s is nil", im.Name, v.Type().Field(i).Name)
			}
		}
	}
}

// expNegSweep returns float32 bit patterns of [ExpMin, 0], every stride-th
// one from −0 down (61, or 997 with -short or -race).
func expNegSweep() []float32 {
	stride := uint32(61)
	if raceEnabled || testing.Short() {
		stride = 997
	}
	var xs []float32
	lo := math.Float32bits(ExpMin) // negative: bits grow with magnitude
	for b := uint32(0x80000000); b <= lo; b += stride {
		xs = append(xs, math.Float32frombits(b))
	}
	return xs
}
