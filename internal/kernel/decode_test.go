package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
)

// cacheType is a cache format under test (every Format).
type cacheType = Format

var cacheTypes = func() (fs []Format) {
	for f := range NumFormats {
		fs = append(fs, f)
	}
	return fs
}()

// quant reports whether c is a block format (q8_0, q4_0).
func quant(c Format) bool { return c.Block() > 1 }

// decodeSets are the kernel sets under test: every assembly set this CPU
// supports, whether or not it passed the self-check (so that a failure
// shows here in detail), and the generic one.
func decodeSets() []Decode { return append(archDecode(), GenericDecode) }

// roundedFor returns x rounded to bfloat16 for a bf16 cache (else x):
// the package rounds Q and P to the cache's 16-bit type before the
// products (see Decode), and the native bf16 kernels of the set
// "avx512bf16" round them themselves (TestDecodeBF16Native).
func roundedFor(typ cacheType, x float32) float32 {
	if typ != FormatBF16 {
		return x
	}
	return BF16ToF32(F32ToBF16(x))
}

// canaryF32 marks float32 positions a kernel must not write.
var canaryF32 = math.Float32frombits(0x7fa5a5a5)

// testCache is a cache of n rows in its storage format, in a guarded
// slice that ends (or starts) exactly at the last (first) byte of the
// rows, with the gaps between rows (stride ld > row length) poisoned with
// NaN (0xff bytes: a NaN in every format but q8_0 and q4_0), and its
// values as float64 for the reference.
type testCache struct {
	typ  cacheType
	data []byte
	ld   int // row stride in bytes
	vals []float64
}

func newTestCache(t *testing.T, r *rand.Rand, typ cacheType, n, d, pad int, after bool) testCache {
	c := testCache{typ: typ, vals: make([]float64, n*d)}
	x := make([]float32, n*d)
	for i := range x {
		x[i] = r.Float32()*2 - 1
		if i%17 == 5 {
			x[i] *= 100 // a spread of magnitudes
		}
	}
	rb := typ.RowBytes(d)
	c.ld = rb + pad*formatTable[typ].unit
	k := guarded[byte](t, max(0, (n-1)*c.ld+rb), after)
	for i := range k {
		k[i] = 0xff
	}
	row := make([]float32, d)
	for j := 0; j < n; j++ {
		if err := typ.Quantize(k[j*c.ld:j*c.ld+rb], x[j*d:(j+1)*d]); err != nil {
			t.Fatal(err)
		}
		if err := typ.Dequantize(row, k[j*c.ld:j*c.ld+rb]); err != nil {
			t.Fatal(err)
		}
		for p, v := range row {
			c.vals[j*d+p] = float64(v)
		}
	}
	c.data = k
	return c
}

func (c testCache) scores(dk Decode, s []float32, lds int, q []float32, m, n, d int) {
	dk.Scores[c.typ](s, lds, q, m, c.data, c.ld, n, d)
}

func (c testCache) accum(dk Decode, o []float32, ldo int, p []float32, ldp, m, n, d int) {
	dk.Accum[c.typ](o, ldo, p, ldp, m, c.data, c.ld, n, d)
}

// decodeShape is one problem: m query rows, n cache rows of d values, the
// cache stride padded by padK and the strides of S, P and O by padS.
type decodeShape struct{ m, n, d, padK, padS int }

func (sh decodeShape) String() string {
	return fmt.Sprintf("m=%d,n=%d,d=%d,padK=%d,padS=%d", sh.m, sh.n, sh.d, sh.padK, sh.padS)
}

// decodeShapes are the problems of the tests: every row count up to 17 and
// a few beyond (several tiles), head dimensions that leave every tail of
// 16 and 8 lanes (with 1, 3, 4 and 16 rows: every bf16 tile of
// "avx512bf16" on the dimensions it takes, between guard pages), key
// counts around the key tiles, and cache blocks (a large m with enough
// keys for several blocks of rows).
func decodeShapes(quant bool) []decodeShape {
	dims := []int{1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 33, 45, 64, 100, 128, 130, 256}
	if quant {
		dims = []int{32, 64, 96, 128, 160, 256}
	}
	mid := dims[len(dims)/2]
	var shs []decodeShape
	for m := 1; m <= 17; m++ {
		shs = append(shs, decodeShape{m, 37, mid, 3, 2})
	}
	for _, m := range []int{24, 31, 33} {
		shs = append(shs, decodeShape{m, 21, mid, 0, 0})
	}
	for _, d := range dims {
		for _, m := range []int{1, 3, 4, 16} {
			shs = append(shs, decodeShape{m, 19, d, d % 5, 1})
		}
	}
	for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65} {
		for _, m := range []int{0, 1, 2, 5, 8} {
			shs = append(shs, decodeShape{m, n, mid, 1, 0})
		}
	}
	shs = append(shs, decodeShape{19, 700, dims[len(dims)-1], 0, 3}, decodeShape{3, 5, 0, 0, 0})
	return shs
}

func TestDecodeScores(t *testing.T) { forDecodeCases(t, 5, 6, checkScoresCase) }

// forDecodeCases runs check, in a subtest per decode set with a random
// source seeded by seed1 and seed2, on every cache type and shape, with
// the cache's guard page after and before it (and that of Q or P and S or
// O alternating between shapes).
func forDecodeCases(t *testing.T, seed1, seed2 uint64, check func(t *testing.T, r *rand.Rand, dk Decode, typ cacheType, sh decodeShape, after, afterIO bool)) {
	for _, dk := range decodeSets() {
		t.Run(dk.Name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed1, seed2))
			for _, typ := range cacheTypes {
				for i, sh := range decodeShapes(quant(typ)) {
					if sh.d == 0 && quant(typ) {
						continue
					}
					for _, after := range []bool{true, false} {
						check(t, r, dk, typ, sh, after, i%2 == 0)
					}
				}
			}
		})
	}
}

func checkScoresCase(t *testing.T, r *rand.Rand, dk Decode, typ cacheType, sh decodeShape, after, afterIO bool) {
	t.Helper()
	m, n, d := sh.m, sh.n, sh.d
	c := newTestCache(t, r, typ, n, d, sh.padK, after)
	q := guarded[float32](t, m*d, afterIO)
	for i := range q {
		q[i] = roundedFor(typ, r.Float32()*2-1)
	}
	lds := n + sh.padS
	s := guarded[float32](t, max(0, (m-1)*lds+n), !afterIO)
	for i := range s {
		s[i] = canaryF32
	}
	c.scores(dk, s, lds, q, m, n, d)
	for i, got := range s {
		rr, j := i/lds, i%lds
		if j >= n {
			if math.Float32bits(got) != math.Float32bits(canaryF32) {
				t.Fatalf("%s %v: S[%d][%d] (beyond n) was written: %v", typ, sh, rr, j, got)
			}
			continue
		}
		var want, mag float64
		for p := 0; p < d; p++ {
			x := float64(q[rr*d+p]) * c.vals[j*d+p]
			want += x
			mag += math.Abs(x)
		}
		// A float32 dot product of d terms is within (d+2)·2⁻²⁴·Σ|terms|
		// of the exact sum, in any order.
		if e := math.Abs(float64(got) - want); !(e <= float64(d+2)*0x1p-24*mag) {
			t.Fatalf("%s %v guard-after=%v: S[%d][%d] = %v, want %v (error %.3g, magnitude %.3g)",
				typ, sh, after, rr, j, got, want, e, mag)
		}
	}
}

func TestDecodeAccum(t *testing.T) { forDecodeCases(t, 7, 8, checkAccumCase) }

func checkAccumCase(t *testing.T, r *rand.Rand, dk Decode, typ cacheType, sh decodeShape, after, afterIO bool) {
	t.Helper()
	m, n, d := sh.m, sh.n, sh.d
	c := newTestCache(t, r, typ, n, d, sh.padK, after)
	ldp, ldo := n+sh.padS, d+sh.padS
	p := guarded[float32](t, max(0, (m-1)*ldp+n), afterIO)
	for i := range p {
		p[i] = roundedFor(typ, r.Float32()*2-1)
		if i%ldp >= n {
			p[i] = float32(math.NaN()) // gaps between rows: never read
		}
	}
	o := guarded[float32](t, max(0, (m-1)*ldo+d), !afterIO)
	o0 := make([]float32, len(o))
	for i := range o {
		o[i] = r.Float32()*2 - 1
		if i%ldo >= d {
			o[i] = canaryF32
		}
		o0[i] = o[i]
	}
	c.accum(dk, o, ldo, p, ldp, m, n, d)
	for i, got := range o {
		rr, col := i/ldo, i%ldo
		if col >= d {
			if math.Float32bits(got) != math.Float32bits(canaryF32) {
				t.Fatalf("%s %v: O[%d][%d] (beyond d) was written: %v", typ, sh, rr, col, got)
			}
			continue
		}
		want, mag := float64(o0[i]), math.Abs(float64(o0[i]))
		for j := 0; j < n; j++ {
			x := float64(p[rr*ldp+j]) * c.vals[j*d+col]
			want += x
			mag += math.Abs(x)
		}
		if e := math.Abs(float64(got) - want); !(e <= float64(n+2)*0x1p-24*mag) {
			t.Fatalf("%s %v guard-after=%v: O[%d][%d] = %v, want %v (error %.3g, magnitude %.3g)",
				typ, sh, after, rr, col, got, want, e, mag)
		}
	}
}

// TestDecodeSpecialValues: infinities and NaN in the cache reach exactly
// the results they belong to (a kernel that multiplied lanes outside the
// row by zero would turn neighbours into NaN).
func TestDecodeSpecialValues(t *testing.T) {
	const m, n, d = 3, 5, 21
	for _, dk := range decodeSets() {
		for _, typ := range []cacheType{FormatF32, FormatBF16, FormatF16, FormatE5M2} { // the formats with infinities
			r := rand.New(rand.NewPCG(9, 10))
			c := newTestCache(t, r, typ, n, d, 3, true)
			inf := float32(math.Inf(1))
			rb := typ.RowBytes(d)
			last := c.data[2*c.ld+rb-formatTable[typ].unit : 2*c.ld+rb] // key 2, last element
			if err := typ.Quantize(last, []float32{inf}); err != nil {
				t.Fatal(err)
			}
			if typ == FormatE5M2 {
				last[0] = 0x7c // +Inf (Quantize saturates)
			}
			q := make([]float32, m*d)
			for i := range q {
				q[i] = 1
			}
			s := make([]float32, m*n)
			c.scores(dk, s, n, q, m, n, d)
			for i, v := range s {
				if j := i % n; (j == 2) != math.IsInf(float64(v), 1) || math.IsNaN(float64(v)) {
					t.Errorf("%s %s: S[%d][%d] = %v", dk.Name, typ, i/n, j, v)
				}
			}
			pm := make([]float32, m*n)
			for i := range pm {
				pm[i] = 0.5
			}
			o := make([]float32, m*d)
			c.accum(dk, o, d, pm, n, m, n, d)
			for i, v := range o {
				if col := i % d; (col == d-1) != math.IsInf(float64(v), 1) || math.IsNaN(float64(v)) {
					t.Errorf("%s %s: O[%d][%d] = %v", dk.Name, typ, i/d, col, v)
				}
			}
		}
	}
}

func TestDecodeReadSum(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{0, 3, 4, 255, 256, 257, 1000, 4096, 70001} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		var want uint32
		for i := 0; i+4 <= n; i += 4 {
			want += uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
		}
		for _, dk := range decodeSets() {
			if got := dk.ReadSum(b); got != want {
				t.Errorf("%s: ReadSum of %d bytes = %#x, want %#x", dk.Name, n, got, want)
			}
		}
	}
}

// TestDecodeNoAllocs: the kernels run once per head per decoded token, so
// a call allocates nothing, whatever the number of row tiles (m = 31 takes
// 16+8+4+2+1 on AVX-512, 8+8+8+4+2+1 on AVX2; the float32 and fp16 tiles
// of 16 rows pack Qᵀ and widen keys on the stack).
func TestDecodeNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const n, d = 100, 64
	for _, dk := range decodeSets() {
		for _, m := range []int{1, 3, 12, 31} {
			s, q, o := make([]float32, m*n), make([]float32, m*d), make([]float32, m*d)
			k := make([]byte, 2*n*d)
			if a := testing.AllocsPerRun(10, func() { dk.Scores[FormatBF16](s, n, q, m, k, 2*d, n, d) }); a != 0 {
				t.Errorf("%s: Scores bf16 with m = %d allocates %v times per call", dk.Name, m, a)
			}
			if a := testing.AllocsPerRun(10, func() { dk.Scores[FormatF32](s, n, q, m, k, 4*d, n/2, d) }); a != 0 {
				t.Errorf("%s: Scores f32 with m = %d allocates %v times per call", dk.Name, m, a)
			}
			if a := testing.AllocsPerRun(10, func() { dk.Scores[FormatF16](s, n, q, m, k, 2*d, n, d) }); a != 0 {
				t.Errorf("%s: Scores fp16 with m = %d allocates %v times per call", dk.Name, m, a)
			}
			if a := testing.AllocsPerRun(10, func() { dk.Accum[FormatBF16](o, d, s, n, m, k, 2*d, n, d) }); a != 0 {
				t.Errorf("%s: Accum bf16 with m = %d allocates %v times per call", dk.Name, m, a)
			}
			// The multi-head kernels, m heads side by side (the stack chunk
			// of the scores).
			kh := make([]byte, 2*n*m*d)
			if a := testing.AllocsPerRun(10, func() { dk.ScoresHeads[FormatBF16](s, n, q, m, kh, 2*m*d, 2*d, n, d) }); a != 0 {
				t.Errorf("%s: ScoresHeads bf16 with %d heads allocates %v times per call", dk.Name, m, a)
			}
			if a := testing.AllocsPerRun(10, func() { dk.AccumHeads[FormatBF16](o, d, s, n, m, kh, 2*m*d, 2*d, n, d) }); a != 0 {
				t.Errorf("%s: AccumHeads bf16 with %d heads allocates %v times per call", dk.Name, m, a)
			}
		}
	}
}

func TestDecodePreconditions(t *testing.T) {
	dk := Active().Decode
	k := make([]byte, 4*64*10)
	k8 := make([]byte, 34*10)
	k4 := make([]byte, 18*10)
	s, q := make([]float32, 100), make([]float32, 100)
	f32, q8, q4 := dk.Scores[FormatF32], dk.Scores[FormatQ8], dk.Scores[FormatQ4]
	for _, c := range []struct {
		name string
		call func()
	}{
		{"negative m", func() { f32(s, 10, q, -1, k, 256, 10, 8) }},
		{"lds < n", func() { f32(s, 9, q, 2, k, 256, 10, 8) }},
		{"S too short", func() { f32(s[:15], 10, q, 2, k, 256, 10, 8) }},
		{"Q too short", func() { f32(s, 10, q[:15], 2, k, 256, 10, 8) }},
		{"ldk < d", func() { f32(s, 10, q, 2, k, 28, 10, 8) }},
		{"ldk not whole float32s", func() { f32(s, 10, q, 2, k, 254, 10, 8) }},
		{"bf16 ldk not whole elements", func() { dk.Accum[FormatBF16](s, 8, q, 10, 2, k, 17, 10, 8) }},
		{"cache too short", func() { f32(s, 10, q, 2, k[:4*(64*9+7)], 256, 10, 8) }},
		{"q8 d not a multiple of 32", func() { q8(s, 10, q, 2, k8, 34, 10, 16) }},
		{"q8 ldk below the row bytes", func() { dk.Accum[FormatQ8](s, 32, q, 10, 2, k8, 33, 10, 32) }},
		{"q4 d not a multiple of 32", func() { dk.Accum[FormatQ4](s, 48, q, 10, 2, k4, 18, 10, 48) }},
		{"q4 ldk below the row bytes", func() { q4(s, 10, q, 2, k4, 17, 10, 32) }},
		{"q4 cache too short", func() { q4(s, 10, q, 2, k4[:18*9+17], 18, 10, 32) }},
		{"fp8 ldk below the row bytes", func() { dk.Scores[FormatE4M3](s, 10, q, 2, k8, 7, 10, 8) }},
		{"ldo < d", func() { dk.Accum[FormatF32](s, 7, q, 10, 2, k, 256, 10, 8) }},
		{"P too short", func() { dk.Accum[FormatF32](s, 8, q[:19], 10, 2, k, 256, 10, 8) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", c.name)
				}
			}()
			c.call()
		}()
	}
}

// TestDecodeAVX2Registers: the AVX2 kernels must run on CPUs without
// AVX-512, so they may use neither zmm nor opmask registers nor the vector
// registers 16-31 (which need EVEX encodings), nor AVX-512 instructions
// (masking, embedded broadcast, opmask instructions, 32x4/64x4 shuffles
// and extractions, the d/q-suffixed logic).
func TestDecodeAVX2Registers(t *testing.T) {
	src, err := os.ReadFile("decode_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	bad := regexp.MustCompile(`\b(Z[0-9]+|K[1-7]|[XY](1[6-9]|2[0-9]|3[01])|K[A-Z]+[BWDQ]|V\w+[0-9]X[248]|VMOVDQU(8|16|32|64)|VP(AND|ANDN|OR|XOR)[DQ])\b|\.(Z|BCST)\b`)
	fn, funcs, evex := "", 0, 0
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "TEXT ") {
			fn = strings.Fields(line)[1]
			if strings.Contains(fn, "AVX2(") {
				funcs++
			}
			continue
		}
		switch {
		case strings.Contains(fn, "AVX2(") && bad.MatchString(line):
			t.Errorf("%s uses AVX-512: %s", fn, strings.TrimSpace(line))
		case strings.Contains(fn, "AVX512(") && bad.MatchString(line):
			evex++
		}
	}
	if evex < 1000 { // the pattern must recognise the AVX-512 kernels' code
		t.Errorf("only %d lines of the AVX-512 kernels match the AVX-512 pattern", evex)
	}
	// every format × (4 row tiles × scores, accum + the two multi-head
	// kernels), float32, bf16 and fp16 × the grouped-query scores and
	// accum of 2 and 4 rows, readSum
	if want := int(NumFormats)*(4*2+2) + 3*2*2 + 1; funcs != want {
		t.Errorf("found %d AVX2 functions, want %d", funcs, want)
	}
}
