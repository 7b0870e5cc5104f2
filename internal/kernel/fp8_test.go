package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ofp8 is an independent definition of an OCP fp8 format from its field
// widths alone: value(code) by the textbook formula, and the nearest code
// of a value by searching all 256 codes.
type ofp8 struct {
	f           Format
	ebits, bias int
	ieee        bool // e5m2: E all ones is Inf/NaN; e4m3fn: only S.1111.111 is NaN
}

var ofp8s = []ofp8{{FormatE4M3, 4, 7, false}, {FormatE5M2, 5, 15, true}}

func (o ofp8) value(c byte) float64 {
	mbits := 7 - o.ebits
	s := 1.0
	if c>>7 == 1 {
		s = -1
	}
	e, m := int(c>>mbits)&(1<<o.ebits-1), float64(int(c)&(1<<mbits-1))
	all := 1<<o.ebits - 1
	switch {
	case o.ieee && e == all && m == 0:
		return s * math.Inf(1)
	case o.ieee && e == all, !o.ieee && e == all && int(m) == 1<<mbits-1:
		return math.NaN()
	case e == 0:
		return s * m / float64(int(1)<<mbits) * math.Pow(2, float64(1-o.bias))
	}
	return s * (1 + m/float64(int(1)<<mbits)) * math.Pow(2, float64(e-o.bias))
}

// maxFinite is the largest finite value.
func (o ofp8) maxFinite() float64 {
	m := 0.0
	for c := 0; c < 128; c++ {
		if v := o.value(byte(c)); !math.IsInf(v, 0) && v > m {
			m = v
		}
	}
	return m
}

// nearest is the code of x: the finite code nearest to x, ties to the
// even code (mantissa's last bit 0), beyond the largest finite value the
// largest (saturation), NaN a NaN.
func (o ofp8) nearest(x float64) byte {
	if math.IsNaN(x) {
		return 0xff // any NaN; compared by value
	}
	best, bestD, maxFinite := -1, math.Inf(1), o.maxFinite()
	for c := 0; c < 256; c++ {
		v := o.value(byte(c))
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Signbit(v) != math.Signbit(x) {
			continue // a code of the other sign is never nearer than ±0
		}
		d := math.Abs(v - x)
		if math.Abs(x) > maxFinite {
			d = -math.Abs(v) // saturation: the largest magnitude
		}
		if d < bestD || d == bestD && c&1 == 0 {
			best, bestD = c, d
		}
	}
	return byte(best)
}

// TestFP8Decode: the 256 codes of each format decode exactly to the
// independent definition (NaN to NaN, ±0 with its sign), through
// Dequantize and through every decode kernel set.
func TestFP8Decode(t *testing.T) {
	for _, o := range ofp8s {
		codes := make([]byte, 256)
		for c := range codes {
			codes[c] = byte(c)
		}
		got := make([]float32, 256)
		if err := o.f.Dequantize(got, codes); err != nil {
			t.Fatal(err)
		}
		for c, g := range got {
			want := o.value(byte(c))
			if math.IsNaN(want) != math.IsNaN(float64(g)) || !math.IsNaN(want) && (float64(g) != want || math.Signbit(float64(g)) != math.Signbit(want)) {
				t.Errorf("%v code %#02x = %v, want %v", o.f, c, g, want)
			}
		}
		// The kernels: Accum with P = 1 of a cache of one key per code.
		for _, dk := range decodeSets() {
			const d = 16
			o1 := make([]float32, d)
			for c0 := 0; c0 < 256; c0 += d {
				clear(o1)
				dk.Accum[o.f](o1, d, []float32{1}, 1, 1, codes[c0:c0+d], d, 1, d)
				for i, g := range o1 {
					want := o.value(byte(c0 + i))
					if math.IsNaN(want) != math.IsNaN(float64(g)) || !math.IsNaN(want) && float64(g) != want {
						t.Errorf("%s %v: code %#02x reads as %v, want %v", dk.Name, o.f, c0+i, g, want)
					}
				}
			}
		}
	}
}

// TestFP8Encode: QuantizeFP8 rounds to the nearest code, ties to even,
// saturates beyond the largest finite value and at ±Inf, keeps NaN NaN
// and ±0's sign, for every code's value, the midpoints between
// neighbouring codes (ties) and just beside them, the subnormal range and
// random float32s; with a scale, the code of x/scale.
func TestFP8Encode(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, o := range ofp8s {
		var xs []float32
		var finite []float64
		for c := 0; c < 256; c++ {
			if v := o.value(byte(c)); !math.IsNaN(v) && !math.IsInf(v, 0) {
				finite = append(finite, v)
			}
		}
		slices.Sort(finite)
		for i, v := range finite {
			xs = append(xs, float32(v))
			if i+1 < len(finite) { // the midpoint to the next code (a tie) and beside it
				w := finite[i+1]
				mid := float32((v + w) / 2) // exact: few bits
				xs = append(xs, mid, math.Nextafter32(mid, float32(v)), math.Nextafter32(mid, float32(w)))
			}
		}
		for i := 0; i < 3000; i++ {
			e := r.IntN(60) - 30
			xs = append(xs, float32(math.Ldexp(r.Float64()*2-1, e)))
		}
		inf := float32(math.Inf(1))
		xs = append(xs, inf, -inf, float32(math.NaN()), 0, float32(math.Copysign(0, -1)), 1e30, -1e30, math.SmallestNonzeroFloat32)
		got := make([]byte, len(xs))
		if err := QuantizeFP8(o.f, got, xs, 0); err != nil {
			t.Fatal(err)
		}
		for i, x := range xs {
			want := o.nearest(float64(x))
			if g, w := o.value(got[i]), o.value(want); !(g == w && math.Signbit(g) == math.Signbit(w) || math.IsNaN(g) && math.IsNaN(w)) {
				t.Fatalf("%v: %v (%#08x) stored as %#02x = %v, want %#02x = %v", o.f, x, math.Float32bits(x), got[i], g, want, w)
			}
		}
		// A scale: stored = fp8(x / scale), value = stored·scale.
		const scale = 0.0625
		sc := make([]byte, len(xs))
		if err := QuantizeFP8(o.f, sc, xs, scale); err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(xs))
		if err := DequantizeFP8(o.f, back, sc, scale); err != nil {
			t.Fatal(err)
		}
		for i, x := range xs {
			want := o.nearest(float64(x / scale))
			if wv := float32(o.value(want)) * scale; !(back[i] == wv || math.IsNaN(float64(wv)) && math.IsNaN(float64(back[i]))) {
				t.Fatalf("%v scale %v: %v reads back as %v, want %v", o.f, scale, x, back[i], wv)
			}
		}
	}
	for _, bad := range []float32{-1, float32(math.NaN()), float32(math.Inf(1))} {
		if err := QuantizeFP8(FormatE4M3, make([]byte, 1), []float32{1}, bad); err == nil {
			t.Errorf("QuantizeFP8 accepted scale %v", bad)
		}
	}
	if err := QuantizeFP8(FormatQ8, make([]byte, 1), []float32{1}, 1); err == nil {
		t.Error("QuantizeFP8 accepted q8_0")
	}
}
