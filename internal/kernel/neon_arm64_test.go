//go:build !purego

package kernel

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestNEONIsSelected: on arm64 the NEON kernels are what runs (they
// passed their self-checks and come first), unless FLASHATTN_KERNEL says
// otherwise; the 16-bit paths are offered exactly when their features are
// detected.
func TestNEONIsSelected(t *testing.T) {
	if got := Available()[0].Name; got != "neon" {
		t.Errorf("Available()[0] is %q, want neon", got)
	}
	if got := DecodeAvailable()[0].Name; got != "neon" {
		t.Errorf("DecodeAvailable()[0] is %q, want neon", got)
	}
	if os.Getenv("FLASHATTN_KERNEL") == "" {
		if got := Active().Impl.Name; got != "neon" {
			t.Errorf("Active().Impl is %q, want neon", got)
		}
		if got := Active().Decode.Name; got != "neon" {
			t.Errorf("Active().Decode is %q, want neon", got)
		}
	}
	for _, c := range []struct {
		e    Elem
		name string
		has  bool
	}{{BF16, "neonbf16", hasBF16}, {F16, "neonfp16", hasFHM}} {
		_, err := LookupHalf(c.e, c.name)
		if (err == nil) != c.has {
			t.Errorf("%s: feature detected %v, path available %v", c.name, c.has, err == nil)
		}
		if c.has && HalfAvailable(c.e)[0].Name != c.name {
			t.Errorf("%s: not first among %v", c.name, halfNames(HalfAvailable(c.e)))
		}
	}
	t.Logf("%s/%s: FEAT_BF16 %v, FEAT_FHM %v", runtime.GOOS, runtime.GOARCH, hasBF16, hasFHM)
}

// TestNEONDotMatchesMulABt: Impl.Dot promises the arithmetic of one
// element of MulABt; on NEON Dot is dotFused and mulABtNEON chains fused
// multiply-adds in the order of k from zero, so they agree bit for bit
// (on every k tail of the 4-k loop and every row tail of the 6-row tile).
func TestNEONDotMatchesMulABt(t *testing.T) {
	im, err := Lookup("neon")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(51, 52))
	for _, k := range []int{1, 3, 4, 7, 64, 65, 130} {
		const m, n = 7, 32
		a, b := randSlice(r, m*k), randSlice(r, n*k)
		bt := make([]float32, n*k)
		PackBt(bt, b, k, n, k)
		c := make([]float32, m*n)
		im.MulABt(c, n, a, k, bt, m, n, k)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				d := im.Dot(a[i*k:(i+1)*k], b[j*k:(j+1)*k])
				if math.Float32bits(d) != math.Float32bits(c[i*n+j]) {
					t.Fatalf("k=%d (%d, %d): Dot %v, MulABt %v", k, i, j, d, c[i*n+j])
				}
			}
		}
	}
}

// TestNEONF16MatchesGeneric: neonfp16 does the generic fp16 twin's
// float32 operations in its order (odd then even k of a pair, products
// exact), so the two agree bit for bit.
func TestNEONF16MatchesGeneric(t *testing.T) {
	h, err := LookupHalf(F16, "neonfp16")
	if err != nil {
		t.Skip("no FEAT_FHM")
	}
	g := GenericHalf(F16)
	r := rand.New(rand.NewPCG(53, 54))
	for _, m := range []int{1, 4, 5, 6, 11} {
		for _, n := range []int{16, 48} {
			for _, k := range []int{2, 8, 10, 38, 130} {
				a := randHalf(r, F16, m*k)
				b := randHalf(r, F16, VNNILen(k, n))
				c1 := make([]float32, m*n)
				for i := range c1 {
					c1[i] = r.Float32()
				}
				c2 := append([]float32(nil), c1...)
				h.MulAdd(c1, n, a, k, b, W*k, m, n, k)
				g.MulAdd(c2, n, a, k, b, W*k, m, n, k)
				for i := range c1 {
					if math.Float32bits(c1[i]) != math.Float32bits(c2[i]) {
						t.Fatalf("m=%d n=%d k=%d: element %d: %v (neonfp16) vs %v (generic)", m, n, k, i, c1[i], c2[i])
					}
				}
			}
		}
	}
}

// TestNEONSelfCheckRejects is the negative control of the start-up
// checks on arm64: the real NEON assembly, called wrongly so that it
// computes something else (a term dropped, the wrong widening, the strip
// stride ignored), is rejected by selfCheck, selfCheckDecode and
// selfCheckHalf, while the correct sets pass.
func TestNEONSelfCheckRejects(t *testing.T) {
	im := archImpls()[0]
	if err := selfCheck(im); err != nil {
		t.Fatalf("the NEON kernels fail their self-check: %v", err)
	}
	for name, broken := range map[string]func(Impl) Impl{
		"MulABt without the last k": func(b Impl) Impl {
			b.MulABt = wrapMulABt(func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int) {
				mulABtNEON(c, ldc, a, lda, bt, m, n, k-1)
			})
			return b
		},
		"MulAddAtB one row short": func(b Impl) Impl {
			b.MulAddAtB = wrapMulAdd(true, func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
				mulAddAtBNEON(c, ldc, a, lda, b, ldb, m-1, n, k)
			})
			return b
		},
		"ExpSum with scale 0.1% off": func(b Impl) Impl {
			b.ExpSum = wrapExpSum(func(x []float32, scale, sub float32) float32 {
				return expSumNEON(x, scale*1.001, sub)
			})
			return b
		},
		"Dot4T on 8 fewer k": func(b Impl) Impl {
			b.Dot4T = wrapDot4T(func(c []float32, ldc int, a, b []float32, ldb, n, k int) {
				dot4TNEON(c, ldc, a, b, ldb, n, k-8)
			})
			return b
		},
		"F32ToBF16 by the fp16 kernel": func(b Impl) Impl {
			b.F32ToBF16 = wrapConv(f32ToF16NEON, f32ToBF16Generic)
			return b
		},
		"PackVNNI16Into without the pair interleave": func(b Impl) Impl {
			b.PackVNNI16Into = func(dst []uint16, ldb, p0 int, src []uint16, ld, k, n int, tr bool) {
				neonPack16.run(copy16, dst, ldb, p0, src, ld, k, n, !tr) // the other layout's kernel
			}
			return b
		},
	} {
		if err := selfCheck(broken(im)); err == nil {
			t.Errorf("selfCheck accepted NEON with %s", name)
		}
	}

	dk := archDecode()[0]
	if err := selfCheckDecode(dk); err != nil {
		t.Fatalf("the NEON decode kernels fail their self-check: %v", err)
	}
	wrong := dk
	neon := decodeISA{name: "neon", minD: 1}
	wrong.Accum[FormatF16] = wrapAccum(neon, FormatF16, GenericDecode.Accum[FormatF16], kernelsOf(nil, []accumKern[uint16]{accumBF16M1NEON, accumBF16M2NEON, accumBF16M4NEON, accumBF16M8NEON}, nil, nil).accum)
	if err := selfCheckDecode(wrong); err == nil {
		t.Error("selfCheckDecode accepted fp16 values widened as bfloat16")
	}
	wrong = dk
	wrong.Scores[FormatQ8] = wrapScores(neon, FormatQ8, GenericDecode.Scores[FormatQ8], kernelsOf([]scoresKern[byte]{scoresQ8M1NEON, scoresQ8M1NEON, scoresQ8M1NEON, scoresQ8M1NEON}, nil, nil, nil).scores)
	if err := selfCheckDecode(wrong); err == nil {
		t.Error("selfCheckDecode accepted q8 score tiles that do one row of 2, 4 or 8")
	}
	// q4_0: the real kernels on codes with their nibbles swapped compute
	// what a kernel that took the nibbles apart the wrong way round (USHR
	// for values 0-15, AND for 16-31) would; and accum tiles of one row
	// where there are 2, 4 or 8.
	wrong = dk
	wrong.Scores[FormatQ4] = func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) {
		sw := append([]byte(nil), k...)
		for j := 0; j < n; j++ {
			for b := 0; b < d/Q4Block; b++ {
				codes := sw[j*ldk+b*Q4BlockBytes+2 : j*ldk+(b+1)*Q4BlockBytes]
				for i, c := range codes {
					codes[i] = c<<4 | c>>4
				}
			}
		}
		dk.Scores[FormatQ4](s, lds, q, m, sw, ldk, n, d)
	}
	if err := selfCheckDecode(wrong); err == nil {
		t.Error("selfCheckDecode accepted q4 scores with the nibbles of the codes swapped")
	}
	wrong = dk
	wrong.Accum[FormatQ4] = wrapAccum(neon, FormatQ4, GenericDecode.Accum[FormatQ4], kernelsOf(nil, []accumKern[byte]{accumQ4M1NEON, accumQ4M1NEON, accumQ4M1NEON, accumQ4M1NEON}, nil, nil).accum)
	if err := selfCheckDecode(wrong); err == nil {
		t.Error("selfCheckDecode accepted q4 accum tiles that do one row of 2, 4 or 8")
	}
	// The multi-head entries against the one-head kernels: heads that
	// skip the head stride (every head reads head 0's rows).
	wrong = dk
	wrong.ScoresHeads[FormatQ4] = func(s []float32, lds int, q []float32, heads int, k []byte, ldk, hs, n, d int) {
		dk.ScoresHeads[FormatQ4](s, lds, q, heads, k, ldk, 0, n, d)
	}
	if err := selfCheckDecode(wrong); err == nil {
		t.Error("selfCheckDecode accepted ScoresHeads q4_0 that read head 0 for every head")
	}

	for _, h := range append(archHalf(BF16), archHalf(F16)...) {
		if err := selfCheckHalf(h); err != nil {
			t.Fatalf("%s fails its self-check: %v", h.Name, err)
		}
		kern := map[string]func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int){
			"neonbf16": mulBF16NEON, "neonbfmmla": withStripBuf(mulBF16MMLANEON, mmlaBufLen), "neonfp16": withStripBuf(mulF16NEON, f16BufLen)}[h.Name]
		tight := h
		tight.Mul = wrapHalf("tight", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
			kern(c, ldc, a, lda, b, W*k, m, n, k) // ignores the strip stride
		})
		if err := selfCheckHalf(tight); err == nil {
			t.Errorf("selfCheckHalf accepted %s ignoring the strip stride", h.Name)
		}
	}
}

// TestNEONBFMMLAPeak runs FMAPeakBFMMLANEON where FEAT_BF16 (which has
// BFMMLA) is detected: its WORDs are checked against GNU as by the
// generator's tests; this test checks that the CPU (or qemu -cpu max)
// executes them (an undefined instruction would kill the process).
func TestNEONBFMMLAPeak(t *testing.T) {
	if !hasBF16 {
		t.Skip("no FEAT_BF16")
	}
	FMAPeakBFMMLANEON(1000)
	FMAPeakBFMMLANEON(0)
}

// BenchmarkBFMMLAPeak times the BFMMLA peak loop interleaved with the BFDOT
// one (FMAPeakBF16NEON, the neonbf16 path's bound) and the float32 FMLA one,
// and reports BFMMLA's GFLOP/s and its ratios to both: whether a BFMMLA
// path could beat BFDOT on this CPU (llvm-mca 19 predicts 2× on Neoverse
// V1, V2 and N2; Arm's tables give less).
func BenchmarkBFMMLAPeak(b *testing.B) {
	if !hasBF16 {
		b.Skip("no FEAT_BF16")
	}
	const iters = 1 << 14
	var tm, td, tf time.Duration
	for b.Loop() {
		t0 := time.Now()
		FMAPeakBFMMLANEON(iters)
		t1 := time.Now()
		FMAPeakBF16NEON(iters)
		t2 := time.Now()
		FMAPeakNEON(iters)
		tm += t1.Sub(t0)
		td += t2.Sub(t1)
		tf += time.Since(t2)
	}
	rate := func(flops int, d time.Duration) float64 {
		return float64(flops) * iters * float64(b.N) / d.Seconds() / 1e9
	}
	gm, gd, gf := rate(24*2*2*4*2, tm), rate(24*4*2*2, td), rate(24*4*2, tf)
	b.ReportMetric(gm, "GFLOP/s")
	b.ReportMetric(gm/gd, "x-bfdot")
	b.ReportMetric(gm/gf, "x-f32")
}
