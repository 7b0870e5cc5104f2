package kernel

import "math"

// Generic is the pure-Go implementation, used on CPUs without AVX2+FMA and
// as the reference the assembly kernels are tested against. Its matrix
// products are register-blocked 4×4 so that the Go compiler keeps the
// accumulators in registers.
var Generic = Impl{
	Name:      "generic",
	MulABt:    mulABtGeneric,
	MulAddAB:  mulAddABGeneric,
	MulAB:     clearThen(mulAddABGeneric),
	MulAddAtB: mulAddAtBGeneric,
	ExpSum:    expSumGeneric,
	// ExpSumBF16 is set in init: expSumThenBF16 of ExpSum and F32ToBF16.
	Max:       maxGeneric,
	Scale:     scaleGeneric,
	DsFromDp:  dsFromDpGeneric,
	Dot:       dotGeneric,
	Dot4T:     dot4TGeneric,
	Softcap:   softcapGeneric,
	ALiBi:     alibiGeneric,
	BF16ToF32: bf16ToF32Generic,
	F16ToF32:  f16ToF32Generic,
	F32ToBF16: f32ToBF16Generic,
	F32ToF16:  f32ToF16Generic,

	PackVNNIInto:   PackVNNIInto,
	PackVNNI16Into: PackVNNI16Into,
	TransposeRound: transposeRoundGeneric,
	RoundF32:       roundF32Generic,
}

// mulABtGeneric sums every element in the order p = 0, 1, … with each
// product rounded to float32 before the add: the explicit conversions
// keep a compiler from fusing them (Go may fuse x*y + z, and does on arm64
// and with GOAMD64=v3), so the scores are the plain algorithm's bit for bit
// on every architecture (see Impl.MulABt).
func mulABtGeneric(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int) {
	for s := 0; s < n; s += W {
		strip := bt[s*k : (s+W)*k]
		for jj := 0; jj < W; jj += 4 {
			i := 0
			for ; i+4 <= m; i += 4 {
				a0 := a[i*lda : i*lda+k]
				a1 := a[(i+1)*lda : (i+1)*lda+k]
				a2 := a[(i+2)*lda : (i+2)*lda+k]
				a3 := a[(i+3)*lda : (i+3)*lda+k]
				var c00, c01, c02, c03, c10, c11, c12, c13 float32
				var c20, c21, c22, c23, c30, c31, c32, c33 float32
				for p := range a0 {
					b := strip[p*W+jj : p*W+jj+4 : p*W+jj+4]
					b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
					x0, x1, x2, x3 := a0[p], a1[p], a2[p], a3[p]
					c00 += float32(x0 * b0)
					c01 += float32(x0 * b1)
					c02 += float32(x0 * b2)
					c03 += float32(x0 * b3)
					c10 += float32(x1 * b0)
					c11 += float32(x1 * b1)
					c12 += float32(x1 * b2)
					c13 += float32(x1 * b3)
					c20 += float32(x2 * b0)
					c21 += float32(x2 * b1)
					c22 += float32(x2 * b2)
					c23 += float32(x2 * b3)
					c30 += float32(x3 * b0)
					c31 += float32(x3 * b1)
					c32 += float32(x3 * b2)
					c33 += float32(x3 * b3)
				}
				j := s + jj
				store4(c[i*ldc+j:], c00, c01, c02, c03)
				store4(c[(i+1)*ldc+j:], c10, c11, c12, c13)
				store4(c[(i+2)*ldc+j:], c20, c21, c22, c23)
				store4(c[(i+3)*ldc+j:], c30, c31, c32, c33)
			}
			for ; i < m; i++ {
				a0 := a[i*lda : i*lda+k]
				var c00, c01, c02, c03 float32
				for p, x0 := range a0 {
					b := strip[p*W+jj : p*W+jj+4 : p*W+jj+4]
					c00 += float32(x0 * b[0])
					c01 += float32(x0 * b[1])
					c02 += float32(x0 * b[2])
					c03 += float32(x0 * b[3])
				}
				store4(c[i*ldc+s+jj:], c00, c01, c02, c03)
			}
		}
	}
}

// mulABtFused is MulABt in the fused arithmetic (Impl.FusedScores): each
// element is the chain s = FMA32(a[i*lda+p], B[j][p], s), p = 0, 1, …, from
// s = 0, one dotFused per element. It is the twin of the fused assembly
// (mulABtNEON, mulABtAVX512, mulABtAVX2) in the self-check and the tests,
// not a kernel to run.
func mulABtFused(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int) {
	col := make([]float32, k)
	for j := 0; j < n; j++ {
		strip := bt[j/W*k*W : (j/W+1)*k*W]
		for p := range col {
			col[p] = strip[p*W+j%W]
		}
		for i := 0; i < m; i++ {
			c[i*ldc+j] = dotFused(a[i*lda:i*lda+k], col)
		}
	}
}

// scoresTwin returns the pure-Go MulABt and Dot with the arithmetic of
// im's (Impl.FusedScores): what im's are compared with bit for bit.
func scoresTwin(im Impl) (mulABt func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int), dot func(a, b []float32) float32) {
	if im.FusedScores {
		return mulABtFused, dotFused
	}
	return Generic.MulABt, Generic.Dot
}

func store4(c []float32, x0, x1, x2, x3 float32) {
	c = c[:4]
	c[0], c[1], c[2], c[3] = x0, x1, x2, x3
}

func add4(c []float32, x0, x1, x2, x3 float32) {
	c = c[:4]
	c[0] += x0
	c[1] += x1
	c[2] += x2
	c[3] += x3
}

// clearThen returns MulAB made of a MulAddAB f: C cleared, then f adds
// A·B to it (the bits of a kernel that stores its sums).
func clearThen(f func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)) func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	return func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
		clearRows(c, ldc, m, n)
		f(c, ldc, a, lda, b, ldb, m, n, k)
	}
}

// clearRows sets the m rows of n elements of c, ldc apart, to zero.
func clearRows(c []float32, ldc, m, n int) {
	for i := 0; i < m; i++ {
		clear(c[i*ldc : i*ldc+n])
	}
}

// mulAddABGeneric and mulAddAtBGeneric share one body: A is read at
// a[i*ri + p*rp], so A·B and Aᵀ·B differ only in the strides.
func mulAddABGeneric(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	mulAddStrided(c, ldc, a, lda, 1, b, ldb, m, n, k)
}

func mulAddAtBGeneric(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	mulAddStrided(c, ldc, a, 1, lda, b, ldb, m, n, k)
}

func mulAddStrided(c []float32, ldc int, a []float32, ri, rp int, b []float32, ldb int, m, n, k int) {
	if m == 0 || k == 0 {
		return
	}
	_ = a[(m-1)*ri+(k-1)*rp]
	for j := 0; j < n; j += 4 {
		i := 0
		for ; i+4 <= m; i += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			var c20, c21, c22, c23, c30, c31, c32, c33 float32
			for p := 0; p < k; p++ {
				bb := b[p*ldb+j : p*ldb+j+4 : p*ldb+j+4]
				b0, b1, b2, b3 := bb[0], bb[1], bb[2], bb[3]
				o := i*ri + p*rp
				x0, x1, x2, x3 := a[o], a[o+ri], a[o+2*ri], a[o+3*ri]
				c00 += x0 * b0
				c01 += x0 * b1
				c02 += x0 * b2
				c03 += x0 * b3
				c10 += x1 * b0
				c11 += x1 * b1
				c12 += x1 * b2
				c13 += x1 * b3
				c20 += x2 * b0
				c21 += x2 * b1
				c22 += x2 * b2
				c23 += x2 * b3
				c30 += x3 * b0
				c31 += x3 * b1
				c32 += x3 * b2
				c33 += x3 * b3
			}
			add4(c[i*ldc+j:], c00, c01, c02, c03)
			add4(c[(i+1)*ldc+j:], c10, c11, c12, c13)
			add4(c[(i+2)*ldc+j:], c20, c21, c22, c23)
			add4(c[(i+3)*ldc+j:], c30, c31, c32, c33)
		}
		for ; i < m; i++ {
			var c00, c01, c02, c03 float32
			for p := 0; p < k; p++ {
				bb := b[p*ldb+j : p*ldb+j+4 : p*ldb+j+4]
				x0 := a[i*ri+p*rp]
				c00 += x0 * bb[0]
				c01 += x0 * bb[1]
				c02 += x0 * bb[2]
				c03 += x0 * bb[3]
			}
			add4(c[i*ldc+j:], c00, c01, c02, c03)
		}
	}
}

// Constants of the float32 exponential shared by every implementation:
// exp(x) = 2^n · exp(r) with n = round(x·log2 e), r = x − n·ln 2 (ln 2 split
// in two for exactness) and exp(r) a degree-7 polynomial on |r| ≤ ln2/2
// (1 + r + r²·(ExpP5 + … + ExpP0·r⁵)); AVX-512 reduces in base 2 instead
// (the Exp2C… form below).
// The assembly generators read these (and tanhT0 …) from this file
// (internal/kernel/_kconst): literal values only.
const (
	ExpLog2e = 1.44269504088896341
	ExpLn2Hi = 0.693359375
	ExpLn2Lo = -2.12194440e-4
	ExpMin   = -87.33654 // below: result 0 (float32 exp would be subnormal)
	ExpMax   = 88.37626  // above: +Inf (keeps 2^n finite)
	ExpP0    = 1.9875691500e-4
	ExpP1    = 1.3981999507e-3
	ExpP2    = 8.3334519073e-3
	ExpP3    = 4.1665795894e-2
	ExpP4    = 1.6666665459e-1
	ExpP5    = 5.0000001201e-1
	// Exp2C1 … Exp2C6: 2^r ≈ 1 + Exp2C1·r + … + Exp2C6·r⁶ on |r| ≤ 1/2,
	// the AVX-512 kernels' polynomial: exp(t) = 2^n · 2^r with
	// u = float32(t·log2 e), n = round(u), r = u − n (exact), 2^r by
	// Horner's rule (6 FMAs) and 2^n by VSCALEFPS. Fitted by exp2fit.go
	// (minimax relative error, constant term held at 1, rounded to
	// float32): fit error 1.6e-8 (2^-25.9); evaluated in float32 within
	// 0.95 ulp of 2^r on every float32 r in [-1/2, 1/2]. (Degree 5 is
	// 2.04 ulp: too much at t ≈ 0.) The rounding of u costs the rest:
	// see Impl.ExpSum.
	Exp2C1 = 6.9314718246e-01
	Exp2C2 = 2.4022647738e-01
	Exp2C3 = 5.5503323674e-02
	Exp2C4 = 9.6184369177e-03
	Exp2C5 = 1.3398875017e-03
	Exp2C6 = 1.5353361960e-04
	// Exp2B1 … Exp2B4: the same form of degree 4, 2^r ≈ 1 + Exp2B1·r + …
	// + Exp2B4·r⁴ on |r| ≤ 1/2, for the exponential that rounds its values
	// to bfloat16 (Impl.ExpSumBF16 on AVX512_BF16): fitted by exp2fit.go
	// -deg 4 -name Exp2B, fit (relative) error 2.83e-6 (2^-18.43), 43 ulp
	// of float32 evaluated in float32 — far below bfloat16's half ulp
	// (2^-9 relative), and one FMA per degree fewer.
	Exp2B1 = 6.9312417507e-01
	Exp2B2 = 2.4024099112e-01
	Exp2B3 = 5.5906426162e-02
	Exp2B4 = 9.5828529447e-03
)

// Exp is the float32 exponential used by the generic kernels. It returns 0
// for x < ExpMin (including -Inf), +Inf for x > ExpMax and NaN for NaN.
func Exp(x float32) float32 {
	if !(x >= ExpMin) { // also catches NaN
		if x != x {
			return x
		}
		return 0
	}
	if x > ExpMax {
		return float32(math.Inf(1))
	}
	n := float32(math.Floor(float64(x*ExpLog2e) + 0.5))
	r := x - n*ExpLn2Hi
	r -= n * ExpLn2Lo
	p := float32(ExpP0)
	p = p*r + ExpP1
	p = p*r + ExpP2
	p = p*r + ExpP3
	p = p*r + ExpP4
	p = p*r + ExpP5
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

func expSumGeneric(x []float32, scale, sub float32) float32 {
	var s0, s1, s2, s3 float32
	for j := 0; j+4 <= len(x); j += 4 {
		v := x[j : j+4 : j+4]
		e0 := Exp(float32(v[0]*scale) - sub)
		e1 := Exp(float32(v[1]*scale) - sub)
		e2 := Exp(float32(v[2]*scale) - sub)
		e3 := Exp(float32(v[3]*scale) - sub)
		v[0], v[1], v[2], v[3] = e0, e1, e2, e3
		s0 += e0
		s1 += e1
		s2 += e2
		s3 += e3
	}
	return (s0 + s1) + (s2 + s3)
}

func init() {
	Generic.ExpSumBF16 = expSumThenBF16(Generic.ExpSum, Generic.F32ToBF16)
	Generic.ScaleBF16 = scaleThenBF16(Generic.Scale, Generic.F32ToBF16)
}

// scaleThenBF16 returns ScaleBF16 made of an implementation's Scale and
// F32ToBF16: the products written to x, then the first len(dst) rounded
// into dst (the twin of a fused store, and the kernel of those without
// one).
func scaleThenBF16(scale func(x []float32, a float32), toBF16 func(dst []uint16, src []float32)) func(dst []uint16, x []float32, a float32) {
	return func(dst []uint16, x []float32, a float32) {
		if len(dst) > len(x) {
			bad("ScaleBF16: dst longer than x")
		}
		scale(x, a)
		toBF16(dst, x[:len(dst)])
	}
}

// expSumThenBF16 returns ExpSumBF16 made of an implementation's ExpSum
// and F32ToBF16: the exponentials written to x, then rounded into dst
// (the twin of a fused store, and the kernel of those without one).
func expSumThenBF16(expSum func(x []float32, scale, sub float32) float32, toBF16 func(dst []uint16, src []float32)) func(dst []uint16, x []float32, scale, sub float32) float32 {
	return func(dst []uint16, x []float32, scale, sub float32) float32 {
		if len(dst) < len(x) {
			bad("ExpSumBF16: dst shorter than x")
		}
		s := expSum(x, scale, sub)
		toBF16(dst, x)
		return s
	}
}

func maxGeneric(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

func scaleGeneric(x []float32, a float32) {
	for j := range x {
		x[j] *= a
	}
}

func dsFromDpGeneric(dp, p []float32, d float32) {
	p = p[:len(dp)]
	for j, v := range dp {
		dp[j] = p[j] * (v - d)
	}
}

// dotGeneric is Generic's Dot: the arithmetic of one element of its MulABt
// (products rounded, then added in index order). The implementations that
// fuse (Impl.FusedScores) use dotFused.
func dotGeneric(a, b []float32) float32 {
	b = b[:len(a)]
	var acc float32
	for i, x := range a {
		acc += float32(x * b[i])
	}
	return acc
}

func dot4TGeneric(c []float32, ldc int, a, b []float32, ldb, n, k int) {
	a0, a1, a2, a3 := a[:k], a[k:2*k], a[2*k:3*k], a[3*k:4*k]
	for j := 0; j < n; j++ {
		bj := b[j*ldb : j*ldb+k]
		var s0, s1, s2, s3 float32
		for p, x := range bj {
			s0 += a0[p] * x
			s1 += a1[p] * x
			s2 += a2[p] * x
			s3 += a3[p] * x
		}
		store4(c[j*ldc:], s0, s1, s2, s3)
	}
}

// The assembly Softcap (amd64: softcapAVX2) computes tanh in float32 as
// Cephes' tanhf does: for |y| ≤ tanhSmall the odd polynomial
//
//	tanh y = y + y·z·((((tanhT0·z + tanhT1)·z + tanhT2)·z + tanhT3)·z + tanhT4),  z = y²
//
// and beyond it 1 − 2/(e^{2|y|} + 1) with the sign of y, e^{2|y|} by the
// exponential's reduction and polynomial (the Exp constants) with 2|y|
// clamped to tanhExpClamp, which keeps it finite. softcapGeneric uses
// math.Tanh; these constants are those of the generated table, which a
// test compares with them.
const (
	tanhT0       = -5.70498872745e-3
	tanhT1       = 2.06390887954e-2
	tanhT2       = -5.37397155531e-2
	tanhT3       = 1.33314422036e-1
	tanhT4       = -3.33332819422e-1
	tanhSmall    = 0.625
	tanhExpClamp = 88
)

func softcapGeneric(x, g []float32, c float32) {
	inv := 1 / float64(c)
	for j, v := range x {
		t := math.Tanh(float64(v) * inv)
		x[j] = c * float32(t)
		if g != nil {
			g[j] = float32(1 - t*t)
		}
	}
}

func alibiGeneric(x []float32, slope, pos float32) {
	for j := range x {
		d := pos - float32(j)
		if d < 0 {
			d = -d
		}
		x[j] -= float32(slope * d) // the product rounded, as the assembly and the plain algorithm do
	}
}
