package half

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// The reference rounding, independent of the conversion code: for a finite
// float32 x, the nearest representable value is found by binary search in
// the sorted table of the positive finite values of the format (for
// positive floats the bit patterns are ordered like the values), with the
// distance computed exactly in float64; ties go to the even pattern. Above
// the largest finite value the next "value" is 2^(emax+1), the encoding of
// +Inf, as IEEE 754 rounds.
type format struct {
	name     string
	values   []float64 // values[p] = value of positive pattern p, finite ones
	inf      uint16    // the +Inf pattern
	infValue float64   // 2^(emax+1)
	quiet    uint16    // the quiet bit
	shift    int       // float32 mantissa bits dropped
	decode   func(uint16) float32
}

func newFormat(name string, inf uint16, infValue float64, quiet uint16, shift int, decode func(uint16) float32) *format {
	f := &format{name: name, inf: inf, infValue: infValue, quiet: quiet, shift: shift, decode: decode}
	for p := uint16(0); p < inf; p++ {
		f.values = append(f.values, float64(decode(p)))
	}
	if !sort.Float64sAreSorted(f.values) {
		panic("patterns not ordered")
	}
	return f
}

var (
	fmtBF16 = newFormat("bf16", 0x7f80, 0x1p128, 0x40, 16, func(h uint16) float32 {
		return math.Float32frombits(uint32(h) << 16)
	})
	fmtF16 = newFormat("f16", 0x7c00, 65536, 0x200, 13, func(h uint16) float32 {
		// Decoded arithmetically, not with bit manipulation.
		e, m := int(h>>10&0x1f), float64(h&0x3ff)
		if e == 0 {
			return float32(m * 0x1p-24)
		}
		return float32((1 + m/1024) * math.Ldexp(1, e-15))
	})
)

// round is the reference conversion of x.
func (f *format) round(x float32) uint16 {
	b := math.Float32bits(x)
	sign := uint16(b>>16) & 0x8000
	if math.IsNaN(float64(x)) {
		// Defined, not derived: sign, top payload bits, quiet bit.
		return sign | f.inf | f.quiet | uint16(b&0x7fffff>>f.shift)
	}
	ax := math.Abs(float64(x))
	// lo: the largest pattern whose value is <= ax.
	lo := sort.Search(len(f.values), func(p int) bool { return f.values[p] > ax }) - 1
	if lo == len(f.values)-1 && ax == f.values[lo] || math.IsInf(ax, 0) {
		if math.IsInf(ax, 0) {
			return sign | f.inf
		}
		return sign | uint16(lo)
	}
	vlo := f.values[lo]
	vhi := f.infValue
	if lo+1 < len(f.values) {
		vhi = f.values[lo+1]
	}
	dlo, dhi := ax-vlo, vhi-ax
	switch {
	case dlo < dhi:
		return sign | uint16(lo)
	case dhi < dlo:
		return sign | uint16(lo+1)
	case lo%2 == 0:
		return sign | uint16(lo)
	}
	return sign | uint16(lo+1)
}

// sample returns a dense set of float32 bit patterns: every exponent and
// sign with mantissas at and around the rounding boundaries of both
// formats, random mantissas, NaN payloads; plus the subnormals around every
// fp16 subnormal rounding boundary.
func sample(r *rand.Rand) []uint32 {
	var out []uint32
	for e := uint32(0); e < 256; e++ {
		for s := uint32(0); s < 2; s++ {
			base := s<<31 | e<<23
			for _, sh := range []uint32{13, 16} { // fp16, bf16 rounding bit
				for _, q := range []uint32{0, 1, 2, 3, 0x3ff, 0x7f} {
					m := q << sh
					for _, d := range []uint32{0, 1, 1<<(sh-1) - 1, 1 << (sh - 1), 1<<(sh-1) + 1, 1<<sh - 1} {
						out = append(out, base|(m+d)&0x7fffff)
					}
				}
			}
			for i := 0; i < 64; i++ {
				out = append(out, base|r.Uint32()&0x7fffff)
			}
			if e >= 100 && e <= 113 { // fp16 subnormal boundaries
				sh := 126 - min(e, 126)
				for q := uint32(0); q < 8; q++ {
					m := q<<sh | 1<<(sh-1)
					out = append(out, base|(m-1)&0x7fffff, base|m&0x7fffff, base|(m+1)&0x7fffff)
				}
			}
		}
	}
	return out
}

// TestEncodeReference compares NewBF16, NewF16 and the bulk encoders with
// the reference on the dense sample.
func TestEncodeReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	bits := sample(r)
	xs := make([]float32, len(bits))
	for i, b := range bits {
		xs[i] = math.Float32frombits(b)
	}
	bb := make([]BF16, len(xs))
	ff := make([]F16, len(xs))
	EncodeBF16(bb, xs)
	EncodeF16(ff, xs)
	for i, x := range xs {
		if g, w := uint16(NewBF16(x)), fmtBF16.round(x); g != w {
			t.Fatalf("NewBF16(%#08x) = %#04x, want %#04x", bits[i], g, w)
		}
		if g, w := uint16(NewF16(x)), fmtF16.round(x); g != w {
			t.Fatalf("NewF16(%#08x) = %#04x, want %#04x", bits[i], g, w)
		}
		if bb[i] != NewBF16(x) || ff[i] != NewF16(x) {
			t.Fatalf("bulk encoding of %#08x: %#04x %#04x, scalar %#04x %#04x", bits[i], bb[i], ff[i], NewBF16(x), NewF16(x))
		}
	}
}

// TestDecodeExhaustive: every one of the 2^16 patterns of each type widens
// to the value the reference assigns it, bulk and scalar alike, and
// encoding it again gives it back (a signalling NaN comes back quiet).
func TestDecodeExhaustive(t *testing.T) {
	bs := make([]BF16, 1<<16)
	fs := make([]F16, 1<<16)
	for i := range bs {
		bs[i], fs[i] = BF16(i), F16(i)
	}
	db := make([]float32, len(bs))
	df := make([]float32, len(fs))
	DecodeBF16(db, bs)
	DecodeF16(df, fs)
	for i := range bs {
		h := uint16(i)
		for _, c := range []struct {
			f          *format
			got, bulk  float32
			back       uint16
			nan, quiet uint16
		}{
			{fmtBF16, BF16(h).Float32(), db[i], uint16(NewBF16(BF16(h).Float32())), 0x7f80, 0x40},
			{fmtF16, F16(h).Float32(), df[i], uint16(NewF16(F16(h).Float32())), 0x7c00, 0x200},
		} {
			if math.Float32bits(c.got) != math.Float32bits(c.bulk) {
				t.Fatalf("%s %#04x: bulk %v, scalar %v", c.f.name, h, c.bulk, c.got)
			}
			isNaN := h&c.nan == c.nan && h&^(c.nan|0x8000) != 0
			if isNaN != math.IsNaN(float64(c.got)) {
				t.Fatalf("%s %#04x: NaN-ness %v", c.f.name, h, c.got)
			}
			if isNaN {
				if c.back != h|c.quiet || math.Signbit(float64(c.got)) != (h&0x8000 != 0) {
					t.Fatalf("%s NaN %#04x: round trip %#04x", c.f.name, h, c.back)
				}
				continue
			}
			abs := h &^ 0x8000
			want := math.Inf(1)
			if abs < c.f.inf {
				want = c.f.values[abs]
			}
			if h&0x8000 != 0 {
				want = -want
			}
			if float64(c.got) != want || math.Signbit(float64(c.got)) != (h&0x8000 != 0) {
				t.Fatalf("%s %#04x = %v, want %v", c.f.name, h, c.got, want)
			}
			if c.back != h {
				t.Fatalf("%s %#04x: round trip gives %#04x", c.f.name, h, c.back)
			}
		}
	}
}

// TestTies checks hand-computed cases at the rounding boundaries.
func TestTies(t *testing.T) {
	for _, c := range []struct {
		x    float64
		bf16 uint16
		f16  uint16
	}{
		{1, 0x3f80, 0x3c00},
		{1 + 0x1p-8, 0x3f80, 0x3c04},    // bf16 tie → even (1)
		{1 + 3*0x1p-8, 0x3f82, 0x3c0c},  // bf16 tie → even (1+2^-6)
		{1 + 0x1p-11, 0x3f80, 0x3c00},   // fp16 tie → even (1)
		{1 + 3*0x1p-11, 0x3f80, 0x3c02}, // fp16 tie → even
		{1 + 0x1p-11 + 0x1p-20, 0x3f80, 0x3c01},
		{65504, 0x4780, 0x7bff}, // bf16: 1.1111111|111·2^15 rounds up
		{65519, 0x4780, 0x7bff},
		{65520, 0x4780, 0x7c00}, // fp16: tie between max and 2^16 → Inf
		{-65520, 0xc780, 0xfc00},
		{0x1p-24, 0x3380, 0x0001},           // smallest fp16 subnormal
		{0x1p-25, 0x3300, 0x0000},           // tie with 0 → 0
		{1.5 * 0x1p-25, 0x3340, 0x0001},     // above the tie
		{3 * 0x1p-25, 0x33c0, 0x0002},       // tie between 1 and 2 ulps → 2
		{5 * 0x1p-25, 0x3420, 0x0002},       // tie between 2 and 3 → 2
		{0x1p-14 - 0x1p-25, 0x3880, 0x0400}, // tie between largest subnormal and 2^-14 → even 2^-14
		{0x1p-133, 0x0001, 0},               // smallest bf16 subnormal
		{0x1p-134, 0x0000, 0},               // tie with 0
		{0x1p-149, 0x0000, 0},               // smallest float32 subnormal
		{math.MaxFloat32, 0x7f80, 0x7c00},   // bf16 overflows to Inf
		{0x1.fep127, 0x7f7f, 0x7c00},        // largest finite bf16
		{math.Copysign(0, -1), 0x8000, 0x8000},
		{math.Inf(-1), 0xff80, 0xfc00},
	} {
		x := float32(c.x)
		if float64(x) != c.x {
			t.Fatalf("%v is not a float32", c.x)
		}
		if g := uint16(NewBF16(x)); g != c.bf16 {
			t.Errorf("NewBF16(%v) = %#04x, want %#04x", c.x, g, c.bf16)
		}
		if g := uint16(NewF16(x)); g != c.f16 {
			t.Errorf("NewF16(%v) = %#04x, want %#04x", c.x, g, c.f16)
		}
	}
	// NaN: sign and top payload kept, quiet bit set.
	for _, c := range []struct {
		bits      uint32
		bf16, f16 uint16
	}{
		{0x7fc00000, 0x7fc0, 0x7e00},
		{0xff800001, 0xffc0, 0xfe00}, // signalling, payload below both formats
		{0x7fa5a000, 0x7fe5, 0x7f2d},
		{0x7f812345, 0x7fc1, 0x7e09},
	} {
		x := math.Float32frombits(c.bits)
		if g := uint16(NewBF16(x)); g != c.bf16 {
			t.Errorf("NewBF16(NaN %#08x) = %#04x, want %#04x", c.bits, g, c.bf16)
		}
		if g := uint16(NewF16(x)); g != c.f16 {
			t.Errorf("NewF16(NaN %#08x) = %#04x, want %#04x", c.bits, g, c.f16)
		}
	}
}

// TestBulkLengths: the bulk functions convert min(len(dst), len(src))
// elements and leave the rest of dst alone, at every length around the
// 16-element blocks of the vector code.
func TestBulkLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 50; n++ {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(r.NormFloat64() * 1000)
		}
		for _, extra := range []int{-1, 0, 3} {
			m := max(n+extra, 0)
			want := min(n, m)
			bb, ff := make([]BF16, m), make([]F16, m)
			for i := range bb {
				bb[i], ff[i] = 0x1234, 0x1234
			}
			EncodeBF16(bb, src)
			EncodeF16(ff, src)
			back := make([]float32, m)
			for i := range back {
				back[i] = -7
			}
			DecodeBF16(back, bb[:want])
			for i := 0; i < m; i++ {
				if i < want {
					if bb[i] != NewBF16(src[i]) || ff[i] != NewF16(src[i]) || back[i] != bb[i].Float32() {
						t.Fatalf("n=%d m=%d: element %d wrong", n, m, i)
					}
				} else if bb[i] != 0x1234 || ff[i] != 0x1234 || back[i] != -7 {
					t.Fatalf("n=%d m=%d: element %d beyond the shorter slice was written", n, m, i)
				}
			}
			DecodeF16(back, ff)
			for i := 0; i < want; i++ {
				if back[i] != ff[i].Float32() {
					t.Fatalf("DecodeF16 n=%d element %d", n, i)
				}
			}
		}
	}
}

// FuzzConvert checks any float32 bit pattern against the reference, the
// round trip through each type, and the bulk converters at the pattern's
// position in a block (so that the vector code sees it in every lane).
func FuzzConvert(f *testing.F) {
	for _, b := range []uint32{0, 0x80000000, 0x3f800000, 0x7f800000, 0x7fc00001, 0x00000001, 0x477ff000, 0x33000000, 0x387fe000} {
		f.Add(b, uint8(0))
	}
	f.Fuzz(func(t *testing.T, b uint32, pos uint8) {
		x := math.Float32frombits(b)
		hb, hf := NewBF16(x), NewF16(x)
		if g, w := uint16(hb), fmtBF16.round(x); g != w {
			t.Fatalf("NewBF16(%#08x) = %#04x, want %#04x", b, g, w)
		}
		if g, w := uint16(hf), fmtF16.round(x); g != w {
			t.Fatalf("NewF16(%#08x) = %#04x, want %#04x", b, g, w)
		}
		if NewBF16(hb.Float32()) != hb || NewF16(hf.Float32()) != hf {
			t.Fatalf("%#08x: round trip %#04x %#04x", b, hb, hf)
		}
		xs := make([]float32, 37)
		for i := range xs {
			xs[i] = float32(i) - 18.5
		}
		xs[int(pos)%len(xs)] = x
		bb, ff := make([]BF16, len(xs)), make([]F16, len(xs))
		EncodeBF16(bb, xs)
		EncodeF16(ff, xs)
		for i, v := range xs {
			if bb[i] != NewBF16(v) || ff[i] != NewF16(v) {
				t.Fatalf("bulk encode of %#08x at %d", math.Float32bits(v), i)
			}
		}
		back := make([]float32, len(xs))
		DecodeBF16(back, bb)
		if !slices.EqualFunc(back, bb, func(a float32, h BF16) bool { return math.Float32bits(a) == math.Float32bits(h.Float32()) }) {
			t.Fatal("bulk DecodeBF16")
		}
		DecodeF16(back, ff)
		if !slices.EqualFunc(back, ff, func(a float32, h F16) bool { return math.Float32bits(a) == math.Float32bits(h.Float32()) }) {
			t.Fatal("bulk DecodeF16")
		}
	})
}
