package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randHalf returns n random elements of type e, uniform in (-1, 1) before
// rounding.
func randHalf(r *rand.Rand, e Elem, n int) []uint16 {
	x := make([]uint16, n)
	for i := range x {
		x[i] = e.FromF32(r.Float32()*2 - 1)
	}
	return x
}

// testedHalf lists every path for e this CPU can run, whether or not it
// passed its start-up self-check (so that a failing one is tested, and its
// failure reported, rather than silently dropped).
func testedHalf(e Elem) []Half {
	return append(archHalf(e), f32Half(e, Active().Impl), GenericHalf(e))
}

// vnniIndex is the position of element (p, j) in the packed layout.
func vnniIndex(p, j, k int) int {
	kp := k + k%2
	return (j/W)*W*kp + (p/2)*2*W + (j%W)*2 + p%2
}

func TestPackVNNI(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, e := range []Elem{BF16, F16} {
		for _, k := range []int{1, 2, 5, 16, 33} {
			for _, n := range []int{1, 15, 16, 17, 40} {
				ld := max(k, n) + 3
				src := make([]float32, max(k, n)*ld)
				for i := range src {
					src[i] = r.Float32()*4 - 2
				}
				for _, tr := range []bool{false, true} {
					dst := make([]uint16, VNNILen(k, n)+5)
					for i := range dst {
						dst[i] = canary16
					}
					PackVNNI(dst, src, ld, k, n, tr, e)
					// The same matrix as 16-bit elements, packed unchanged.
					src16 := make([]uint16, len(src))
					for i, v := range src {
						src16[i] = e.FromF32(v)
					}
					dst16 := make([]uint16, VNNILen(k, n))
					PackVNNI16(dst16, src16, ld, k, n, tr)
					kp, np := k+k%2, Pad(n)
					if VNNILen(k, n) != kp*np {
						t.Fatalf("VNNILen(%d, %d) = %d", k, n, VNNILen(k, n))
					}
					seen := make([]bool, kp*np)
					for p := 0; p < kp; p++ {
						for j := 0; j < np; j++ {
							idx := vnniIndex(p, j, k)
							seen[idx] = true
							want := uint16(0)
							if p < k && j < n {
								if tr {
									want = e.FromF32(src[j*ld+p])
								} else {
									want = e.FromF32(src[p*ld+j])
								}
							}
							if dst[idx] != want || dst16[idx] != want {
								t.Fatalf("%s k=%d n=%d transposed=%v: (%d, %d) = %#04x / %#04x, want %#04x",
									e, k, n, tr, p, j, dst[idx], dst16[idx], want)
							}
						}
					}
					for i, s := range seen {
						if !s {
							t.Fatalf("position %d not covered by the layout", i)
						}
					}
					for _, v := range dst[kp*np:] {
						if v != canary16 {
							t.Fatalf("%s k=%d n=%d: PackVNNI wrote past VNNILen", e, k, n)
						}
					}
					// UnpackVNNI inverts the packing (zero padding included).
					un := make([]float32, k*np)
					UnpackVNNI(un, np, dst, W*kp, k, n, e)
					for p := 0; p < k; p++ {
						for j := 0; j < np; j++ {
							if un[p*np+j] != e.ToF32(dst[vnniIndex(p, j, k)]) {
								t.Fatalf("UnpackVNNI (%d, %d)", p, j)
							}
						}
					}
				}
			}
		}
	}
}

var (
	halfMs = []int{1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 16, 17, 31, 33, 64}
	halfNs = []int{16, 32, 48, 64, 80, 128}
	halfKs = []int{0, 2, 4, 6, 30, 32, 34, 38, 64, 66, 130}
)

// TestHalfMul checks Mul and MulAdd of every available path for both
// element types against float64 sums of the exact products, on shapes that
// cover every row tail of the register-blocked kernels (6 rows) and of the
// AMX tiles (16 rows), both column passes, and k tails of the AMX blocks
// (32). A, B and C each end at a guard page; canaries around C catch
// stray writes.
//
// Tolerance: float32 accumulation of k products (exact in float32) in any
// order errs by at most k·2⁻²⁴·Σ|terms|; we allow (k+2)·2⁻²³·(Σ|A·B| + |C₀|).
func TestHalfMul(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	ms, ks := halfMs, halfKs
	if raceEnabled || testing.Short() {
		ms, ks = []int{1, 5, 6, 7, 17}, []int{0, 6, 38}
	}
	for _, e := range []Elem{BF16, F16} {
		for _, h := range testedHalf(e) {
			t.Run(e.String()+"/"+h.Name, func(t *testing.T) {
				for _, m := range ms {
					for _, n := range halfNs {
						for _, k := range ks {
							if h.Name == "generic" && m*n*k > 64*64*66 {
								continue
							}
							testHalfMul(t, r, h, m, n, k, (m+n+k)%3)
						}
					}
				}
			})
		}
	}
}

// testHalfMul checks one product. B is rows [p0, p0+k) of a longer
// packed matrix (strip stride 16·(p0+k+extra)) with p0 = 2·extra, filled
// with other values outside those rows, so that a path that ignores ldb
// or reads rows of the wrong range fails; the slice of B ends where the
// last strip's rows end, at a guard page.
func testHalfMul(t *testing.T, r *rand.Rand, h Half, m, n, k, extra int) {
	e := h.Elem
	lda, ldc := k+3, n+5
	a := guardedU16(t, (m-1)*lda+k)
	copy(a, randHalf(r, e, len(a)))
	bsrc := randHalf(r, e, k*n)
	p0, ldb := 2*extra, W*(k+3*extra)
	full := guardedU16(t, max(VNNIIntoLen(ldb, p0, k, n), W*p0))
	copy(full, randHalf(r, e, len(full)))
	PackVNNI16Into(full, ldb, p0, bsrc, n, k, n, false)
	b := full[W*p0:]
	tag := fmt.Sprintf("%s %s m=%d n=%d k=%d ldb=%d", e, h.Name, m, n, k, ldb)
	for _, acc := range []bool{false, true} {
		// C: m rows of ldc, the last ending at the guard page; canaries
		// everywhere outside the m×n block.
		c := guardedF32(t, (m-1)*ldc+n)
		c0 := make([]float64, m*n)
		for i := range c {
			c[i] = canary
		}
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				v := float32(0)
				if acc {
					v = r.Float32()*2 - 1
				} else {
					v = float32(math.NaN()) // Mul must overwrite
				}
				c[i*ldc+j] = v
				if acc {
					c0[i*n+j] = float64(v)
				}
			}
		}
		if acc {
			h.MulAdd(c, ldc, a, lda, b, ldb, m, n, k)
		} else {
			h.Mul(c, ldc, a, lda, b, ldb, m, n, k)
		}
		for idx, got := range c {
			i, j := idx/ldc, idx%ldc
			if j >= n {
				if got != canary {
					t.Fatalf("%s acc=%v: wrote %v outside C at (%d, %d)", tag, acc, got, i, j)
				}
				continue
			}
			want, mag := c0[i*n+j], math.Abs(c0[i*n+j])
			for p := 0; p < k; p++ {
				x := float64(e.ToF32(a[i*lda+p])) * float64(e.ToF32(bsrc[p*n+j]))
				want += x
				mag += math.Abs(x)
			}
			if d := math.Abs(float64(got) - want); !(d <= float64(k+2)*0x1p-23*mag) {
				t.Fatalf("%s acc=%v: C[%d, %d] = %v, want %v (diff %g, mag %g)", tag, acc, i, j, got, want, d, mag)
			}
		}
	}
}

// TestHalfMatchesGeneric: the VDPBF16PS kernel does the same float32
// operations in the same order as the generic twin, so on normal-range
// data (no product or sum below 2^-126) the two agree bit for bit. The f32
// and AMX paths sum in other orders and are covered by TestHalfMul.
func TestHalfMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, h := range testedHalf(BF16) {
		if h.Name != "avx512bf16" {
			continue
		}
		g := GenericHalf(BF16)
		for _, m := range []int{1, 5, 6, 7, 13} {
			for _, n := range []int{16, 48} {
				for _, k := range []int{2, 38, 130} {
					a := randHalf(r, BF16, m*k)
					b := randHalf(r, BF16, VNNILen(k, n))
					c1 := make([]float32, m*n)
					for i := range c1 {
						c1[i] = r.Float32()
					}
					c2 := append([]float32(nil), c1...)
					h.MulAdd(c1, n, a, k, b, W*k, m, n, k)
					g.MulAdd(c2, n, a, k, b, W*k, m, n, k)
					for i := range c1 {
						if math.Float32bits(c1[i]) != math.Float32bits(c2[i]) {
							t.Fatalf("m=%d n=%d k=%d: element %d: %v (asm) vs %v (generic)", m, n, k, i, c1[i], c2[i])
						}
					}
				}
			}
		}
	}
}

// TestHalfSubnormals documents what each bf16 path does with subnormal
// inputs and results: VDPBF16PS (and the generic twin, and AMX) read
// subnormal bfloat16 as zero and flush subnormal sums to zero; the f32
// path keeps them (IEEE arithmetic).
func TestHalfSubnormals(t *testing.T) {
	const m, n, k = 1, 16, 2
	sub := uint16(0x0040)  // 2^-127, a bfloat16 subnormal
	tiny := uint16(0x0180) // 2^-124, normal; tiny/8 is subnormal
	for _, h := range testedHalf(BF16) {
		a := []uint16{sub, BF16.FromF32(1)}
		b := make([]uint16, VNNILen(k, n))
		for j := 0; j < n; j++ {
			b[vnniIndex(0, j, k)] = BF16.FromF32(1) // × sub
			b[vnniIndex(1, j, k)] = sub             // × 1
		}
		c := make([]float32, n)
		h.Mul(c, n, a, k, b, W*k, m, n, k)
		want := float32(0)
		if h.Name == "f32" {
			want = 2 * BF16ToF32(sub)
		}
		if c[0] != want {
			t.Errorf("%s: subnormal inputs give %v, want %v", h.Name, c[0], want)
		}
		a = []uint16{tiny, 0}
		for j := 0; j < n; j++ {
			b[vnniIndex(0, j, k)] = BF16.FromF32(0.125)
			b[vnniIndex(1, j, k)] = 0
		}
		h.Mul(c, n, a, k, b, W*k, m, n, k)
		want = 0
		if h.Name == "f32" {
			want = BF16ToF32(tiny) / 8
		}
		if c[0] != want {
			t.Errorf("%s: subnormal result %v, want %v", h.Name, c[0], want)
		}
	}
}

func halfNames(hs []Half) []string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Name)
	}
	return s
}

func TestHalfWrapperPanics(t *testing.T) {
	for _, e := range []Elem{BF16, F16} {
		for _, h := range testedHalf(e) {
			mustPanic := func(name string, f func()) {
				t.Helper()
				defer func() {
					if recover() == nil {
						t.Errorf("%s %s: no panic", h.Name, name)
					}
				}()
				f()
			}
			c, a, b := make([]float32, 100), make([]uint16, 100), make([]uint16, 100)
			mustPanic("odd k", func() { h.Mul(c, 16, a, 4, b, 48, 1, 16, 3) })
			mustPanic("bad n", func() { h.Mul(c, 20, a, 4, b, 64, 1, 17, 4) })
			mustPanic("short b", func() { h.MulAdd(c, 16, a, 4, b[:63], 64, 1, 16, 4) })
			mustPanic("short b, stride", func() { h.MulAdd(c, 32, a, 4, b, 70, 1, 32, 2) })
			mustPanic("stride below 16k", func() { h.MulAdd(c, 32, a, 4, b, 63, 1, 32, 4) })
			mustPanic("short a", func() { h.MulAdd(c, 16, a[:5], 4, b, 64, 2, 16, 4) })
			mustPanic("short c", func() { h.Mul(c[:31], 16, a, 4, b, 64, 2, 16, 4) })
			// The exact bound is accepted: (n/16−1)·ldb + 16k = 100.
			h.MulAdd(c, 32, a, 4, b, 68, 1, 32, 2)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("HalfAvailable(0): no panic")
		}
	}()
	HalfAvailable(0)
}

// TestHalfSubRange: a long matrix (V of a sequence: K rows by n columns),
// packed once in chunks of rows with a strip stride above the minimum and
// then multiplied by an even-aligned range of its rows, gives bit for bit
// what packing that range alone gives, on every path. The ranges include
// the first and the last pair row (whose second row is the zero pad of an
// odd K).
func TestHalfSubRange(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const K, n, m = 75, 48, 7
	chunks := []int{6, 16, 2, 30, 8, 13} // even sizes, then the odd rest
	for _, e := range []Elem{BF16, F16} {
		src := randSlice(r, K*n)
		ldb := W * (K + K%2 + 2)
		long := make([]uint16, Pad(n)/W*ldb)
		for p0, i := 0, 0; p0 < K; p0, i = p0+chunks[i], i+1 {
			PackVNNIInto(long, ldb, p0, src[p0*n:], n, chunks[i], n, false, e)
		}
		const lda = K + 1
		a := randHalf(r, e, m*lda)
		for _, h := range testedHalf(e) {
			for _, rg := range [][2]int{{0, 2}, {0, 76}, {10, 32}, {40, 34}, {74, 2}, {2, 64}} {
				p0, k := rg[0], rg[1]
				alone := make([]uint16, VNNILen(k, n))
				PackVNNI(alone, src[p0*n:], n, min(k, K-p0), n, false, e)
				for _, acc := range []bool{false, true} {
					c1, c2 := make([]float32, m*n), make([]float32, m*n)
					for i := range c1 {
						c1[i] = float32(i%5) - 2
						c2[i] = c1[i]
					}
					if acc {
						h.MulAdd(c1, n, a[p0:], lda, long[W*p0:], ldb, m, n, k)
						h.MulAdd(c2, n, a[p0:], lda, alone, W*k, m, n, k)
					} else {
						h.Mul(c1, n, a[p0:], lda, long[W*p0:], ldb, m, n, k)
						h.Mul(c2, n, a[p0:], lda, alone, W*k, m, n, k)
					}
					for i := range c1 {
						if math.Float32bits(c1[i]) != math.Float32bits(c2[i]) {
							t.Fatalf("%s %s rows [%d, %d) acc=%v: element %d: %v from the long matrix, %v packed alone",
								e, h.Name, p0, p0+k, acc, i, c1[i], c2[i])
						}
					}
				}
			}
		}
	}
}
