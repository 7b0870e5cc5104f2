package kernel

import (
	"fmt"
	"math"
	"slices"
)

// selfCheck runs every kernel of im once on a small ragged problem and
// compares it with Generic (MulABt and Dot with their pure-Go twins in im's
// arithmetic, scoresTwin). It is a guard for CPUs the assembly was never
// run on in development (an assembly kernel that disagrees is not used);
// the kernel tests check far more thoroughly.
func selfCheck(im Impl) (err error) {
	defer recoverAs(&err, "kernel "+im.Name)
	const m, n, k, ld = 7, 32, 19, 37
	a, b := make([]float32, ld*ld), make([]float32, ld*ld)
	for i := range a {
		a[i] = float32(math.Sin(float64(i)))
	}
	for i := range b {
		b[i] = float32(math.Cos(float64(3 * i)))
	}
	bt := make([]float32, n*k)
	PackBt(bt, b, ld, n, k)
	near := func(name string, x, y []float32) error {
		for i := range x {
			if d := math.Abs(float64(x[i] - y[i])); !(d <= 1e-4*(1+math.Abs(float64(y[i])))) {
				return fmt.Errorf("kernel %s: %s disagrees with generic at %d: %v vs %v", im.Name, name, i, x[i], y[i])
			}
		}
		return nil
	}
	mulABt, dot := scoresTwin(im) // fused or not, as im's
	type mm func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)
	for _, f := range []struct {
		name     string
		got, ref mm
	}{
		{"MulABt", func(c []float32, ldc int, a []float32, lda int, b []float32, _ int, m, n, k int) {
			im.MulABt(c, ldc, a, lda, bt, m, n, k)
		}, func(c []float32, ldc int, a []float32, lda int, b []float32, _ int, m, n, k int) {
			mulABt(c, ldc, a, lda, bt, m, n, k)
		}},
		{"MulAddAB", im.MulAddAB, Generic.MulAddAB},
		{"MulAB", im.MulAB, Generic.MulAB},
		{"MulAddAtB", im.MulAddAtB, Generic.MulAddAtB},
	} {
		c1, c2 := make([]float32, m*n), make([]float32, m*n)
		for i := range c1 {
			c1[i], c2[i] = 1, 1
		}
		f.got(c1, n, a, ld, b, ld, m, n, k)
		f.ref(c2, n, a, ld, b, ld, m, n, k)
		if err := near(f.name, c1, c2); err != nil {
			return err
		}
	}
	x1, x2 := append([]float32(nil), b[:n]...), append([]float32(nil), b[:n]...)
	x1[3], x2[3] = float32(math.Inf(-1)), float32(math.Inf(-1))
	if m1, m2 := im.Max(x1), Generic.Max(x2); m1 != m2 {
		return fmt.Errorf("kernel %s: Max %v, generic %v", im.Name, m1, m2)
	}
	for _, at := range []int{n - 1, n/2 + 1} { // the largest in the last, then an inner vector
		y := append([]float32(nil), x1...)
		y[at] = 2
		if m1 := im.Max(y); m1 != 2 {
			return fmt.Errorf("kernel %s: Max %v, want 2 (at %d)", im.Name, m1, at)
		}
	}
	xe := append([]float32(nil), x1...) // for ExpSumBF16, below
	s1, s2 := im.ExpSum(x1, 1.5, 0.25), Generic.ExpSum(x2, 1.5, 0.25)
	if err := near("ExpSum", append(x1, s1), append(x2, s2)); err != nil {
		return err
	}
	im.Scale(x1, 0.5)
	Generic.Scale(x2, 0.5)
	im.DsFromDp(x1, b[:n], 0.3)
	Generic.DsFromDp(x2, b[:n], 0.3)
	if err := near("Scale/DsFromDp", x1, x2); err != nil {
		return err
	}
	if err := near("Dot", []float32{im.Dot(a[:k], b[:k])}, []float32{dot(a[:k], b[:k])}); err != nil {
		return err
	}
	d1, d2 := make([]float32, 5*6), make([]float32, 5*6)
	im.Dot4T(d1, 6, a, b, ld, 5, 16)
	Generic.Dot4T(d2, 6, a, b, ld, 5, 16)
	if err := near("Dot4T", d1, d2); err != nil {
		return err
	}
	c1, c2 := append([]float32(nil), a[:n]...), append([]float32(nil), a[:n]...)
	g1, g2 := make([]float32, n), make([]float32, n)
	im.Softcap(c1, g1, 0.7)
	Generic.Softcap(c2, g2, 0.7)
	if err := near("Softcap", append(c1, g1...), append(c2, g2...)); err != nil {
		return err
	}
	im.ALiBi(c1, 0.3, 17)
	Generic.ALiBi(c2, 0.3, 17)
	if err := near("ALiBi", c1, c2); err != nil {
		return err
	}
	if err := selfCheckConvert(im, a[:37]); err != nil {
		return err
	}
	// ExpSumBF16: bit for bit its twin (Impl.expSumBF16Twin): im's ExpSum
	// then its F32ToBF16 (ExpSum checked against generic above), or the
	// shorter exponential's Go twin.
	h1, h2 := make([]uint16, n), make([]uint16, n)
	e1 := im.ExpSumBF16(h1, append([]float32(nil), xe...), 1.5, 0.25)
	e2 := im.expSumBF16Twin()(h2, xe, 1.5, 0.25)
	if e1 != e2 || !slices.Equal(h1, h2) {
		return fmt.Errorf("kernel %s: ExpSumBF16 differs from its Go twin (sum %v vs %v)", im.Name, e1, e2)
	}
	// ScaleBF16 likewise, bit for bit its Scale then its F32ToBF16, on a
	// dst with a tail.
	im.ScaleBF16(h1[:n-3], append([]float32(nil), xe...), 0.37)
	scaleThenBF16(im.Scale, im.F32ToBF16)(h2[:n-3], xe, 0.37)
	if !slices.Equal(h1, h2) {
		return fmt.Errorf("kernel %s: ScaleBF16 differs from its Scale then F32ToBF16", im.Name)
	}
	return selfCheckPack(im, a, b)
}

// selfCheckPack compares the packers, TransposeRound and RoundF32 of im
// with Generic's, bit for bit, on ragged shapes (an odd k, a partial strip
// and a partial block of 32, a chunk at p0 > 0 with a strip stride above
// the minimum) taken from a and b (at least 37×37 elements each).
func selfCheckPack(im Impl, a, b []float32) error {
	const k, n, p0, ld = 35, 21, 2, 37
	const ldb = W * (p0 + k + 1 + 4)
	a16 := make([]uint16, len(a))
	im.F32ToBF16(a16, a)
	size := VNNIIntoLen(ldb, p0, k, n)
	for _, tr := range []bool{false, true} {
		for _, e := range []Elem{BF16, F16, 0} {
			x, y := make([]uint16, size), make([]uint16, size)
			if e == 0 {
				im.PackVNNI16Into(x, ldb, p0, a16, ld, k, n, tr)
				Generic.PackVNNI16Into(y, ldb, p0, a16, ld, k, n, tr)
			} else {
				im.PackVNNIInto(x, ldb, p0, a, ld, k, n, tr, e)
				Generic.PackVNNIInto(y, ldb, p0, a, ld, k, n, tr, e)
			}
			for i := range x {
				if x[i] != y[i] {
					return fmt.Errorf("kernel %s: packing (%v, transposed %v) disagrees with generic at %d", im.Name, e, tr, i)
				}
			}
		}
	}
	for _, e := range []Elem{BF16, F16} {
		const rows, cols, ldd = 17, 35, 19
		x, y := make([]uint16, cols*ldd), make([]uint16, cols*ldd)
		im.TransposeRound(x, ldd, b, ld, rows, cols, e)
		Generic.TransposeRound(y, ldd, b, ld, rows, cols, e)
		for i := range x {
			if x[i] != y[i] {
				return fmt.Errorf("kernel %s: TransposeRound (%v) disagrees with generic at %d", im.Name, e, i)
			}
		}
		f, g := append([]float32(nil), b[:37]...), append([]float32(nil), b[:37]...)
		im.RoundF32(f, e)
		Generic.RoundF32(g, e)
		for i := range f {
			if math.Float32bits(f[i]) != math.Float32bits(g[i]) {
				return fmt.Errorf("kernel %s: RoundF32 (%v) disagrees with generic at %d", im.Name, e, i)
			}
		}
	}
	return nil
}

// selfCheckConvert compares the four converters of im with the scalar
// conversions, bit for bit, on x (whose length leaves a tail).
func selfCheckConvert(im Impl, x []float32) error {
	h := make([]uint16, len(x))
	f := make([]float32, len(x))
	for _, e := range []Elem{BF16, F16} {
		if e == BF16 {
			im.F32ToBF16(h, x)
			im.BF16ToF32(f, h)
		} else {
			im.F32ToF16(h, x)
			im.F16ToF32(f, h)
		}
		for i, v := range x {
			if w := e.FromF32(v); h[i] != w || math.Float32bits(f[i]) != math.Float32bits(e.ToF32(w)) {
				return fmt.Errorf("kernel %s: %s conversion of %v gives %#04x → %v, want %#04x → %v",
					im.Name, e, v, h[i], f[i], w, e.ToF32(w))
			}
		}
	}
	return nil
}

// selfCheckHalf runs h once on a small ragged problem (row blocks and a
// row tail, a k tail of 6, odd leading dimensions, B a range of rows of a
// longer packed matrix, so with a strip stride above 16·k) and compares it
// with the generic path. It guards CPUs the assembly never ran on in development: a
// path that disagrees is not used. The tolerance covers a different order
// of float32 additions: |Δ| ≤ 1e-5·(Σ|A·B| + |C₀|) per element, about 40
// times the worst rounding drift of k = 38 float32 additions.
func selfCheckHalf(h Half) (err error) {
	defer recoverAs(&err, h.Elem.String()+" path "+h.Name)
	const m, n, k, lda, ldc = 19, 48, 38, 41, 53
	e := h.Elem
	a := make([]uint16, m*lda)
	for i := range a {
		a[i] = e.FromF32(float32(math.Sin(float64(i))))
	}
	bf := make([]float32, n*k)
	for i := range bf {
		bf[i] = float32(math.Cos(float64(3 * i)))
	}
	// B is rows [p0, p0+k) of a packed (p0+k+4)×n matrix.
	const p0, ldb = 4, W * (4 + k + 4)
	buf := make([]uint16, VNNIIntoLen(ldb, p0, k, n))
	PackVNNIInto(buf, ldb, p0, bf, k, k, n, true, e)
	b := buf[W*p0:]
	g := GenericHalf(e)
	bu := make([]float32, k*n) // B as packed, widened
	UnpackVNNI(bu, n, b, ldb, k, n, e)
	mag := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s := 1.0
			for p := 0; p < k; p++ {
				s += math.Abs(float64(e.ToF32(a[i*lda+p])) * float64(bu[p*n+j]))
			}
			mag[i*n+j] = s
		}
	}
	for _, acc := range []bool{false, true} {
		c1, c2 := make([]float32, m*ldc), make([]float32, m*ldc)
		for i := range c1 {
			c1[i], c2[i] = 1, 1
		}
		if acc {
			h.MulAdd(c1, ldc, a, lda, b, ldb, m, n, k)
			g.MulAdd(c2, ldc, a, lda, b, ldb, m, n, k)
		} else {
			h.Mul(c1, ldc, a, lda, b, ldb, m, n, k)
			g.Mul(c2, ldc, a, lda, b, ldb, m, n, k)
		}
		for i := 0; i < m; i++ {
			for j := 0; j < ldc; j++ {
				x, y := c1[i*ldc+j], c2[i*ldc+j]
				tol := 0.0
				if j < n {
					tol = 1e-5 * mag[i*n+j]
				}
				if d := math.Abs(float64(x - y)); !(d <= tol) {
					return fmt.Errorf("%s path %s (accumulate %v) disagrees with generic at (%d, %d): %v vs %v",
						e, h.Name, acc, i, j, x, y)
				}
			}
		}
	}
	return nil
}

// recoverAs, deferred by a self-check, turns a panic of the kernel under
// check (a violated precondition in a wrapper) into *err, prefixed by what
// names the kernel.
func recoverAs(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %v", what, r)
	}
}
