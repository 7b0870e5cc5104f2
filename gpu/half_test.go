package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/half"
)

// The conversions Upload, Download and DType.Round use (package half's),
// as functions on bits.
func toBF16(x float32) uint16   { return uint16(half.NewBF16(x)) }
func fromBF16(h uint16) float32 { return half.BF16(h).Float32() }
func toF16(x float32) uint16    { return uint16(half.NewF16(x)) }
func fromF16(h uint16) float32  { return half.F16(h).Float32() }

// nearest checks that h is a correctly rounded encoding of x: no other
// finite value of the type is closer, and ties go to the even encoding.
func nearest(t *testing.T, dt DType, x float32, h uint16, dec func(uint16) float32, maxFinite float64) {
	t.Helper()
	xf := float64(x)
	if math.IsNaN(xf) {
		if v := dec(h); !math.IsNaN(float64(v)) {
			t.Fatalf("%v: NaN encodes to %#04x = %v", dt, h, v)
		}
		return
	}
	got := float64(dec(h))
	if math.IsInf(got, 0) {
		// Inf only for values at or past the rounding boundary of the largest finite value.
		ulp := maxFinite - float64(dec(maxFiniteBits(dt)-1))
		if math.Abs(xf) < maxFinite+ulp/2 || math.Signbit(got) != math.Signbit(xf) {
			t.Fatalf("%v: %v rounds to %v", dt, x, got)
		}
		return
	}
	for _, n := range []uint16{h - 1, h + 1, h ^ 0x8000} {
		v := float64(dec(n))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		dg, dn := math.Abs(xf-got), math.Abs(xf-v)
		if dn < dg || dn == dg && n != h^0x8000 && h&1 == 1 && v != got {
			t.Fatalf("%v: %v encodes to %#04x (%v), but %#04x (%v) is nearer or the even tie", dt, x, h, got, n, v)
		}
	}
}

func maxFiniteBits(dt DType) uint16 {
	if dt == F16 {
		return 0x7bff
	}
	return 0x7f7f
}

func TestRoundingExhaustiveSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cases := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, -65520, 1e-8, 5.9604645e-08, 2.980232e-08, 2.9802326e-08,
		6.1035156e-05, 6.1e-05, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, math.SmallestNonzeroFloat32,
		3.3895314e38, 3.3961776e38, 1.00390625, 1.01171875, 1.0009766, 1.0029297}
	for i := 0; i < 400000; i++ {
		cases = append(cases, math.Float32frombits(rng.Uint32()))
		cases = append(cases, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(40)-30))))
	}
	// Every fp16 and bf16 value, and the midpoints between neighbours.
	for h := 0; h < 1<<16; h++ {
		for _, dec := range []func(uint16) float32{fromF16, fromBF16} {
			a, b := float64(dec(uint16(h))), float64(dec(uint16(h+1)))
			cases = append(cases, float32(a))
			if !math.IsInf(a, 0) && !math.IsInf(b, 0) && !math.IsNaN(a) && !math.IsNaN(b) {
				cases = append(cases, float32((a+b)/2))
			}
		}
	}
	for _, x := range cases {
		nearest(t, F16, x, toF16(x), fromF16, 65504)
		nearest(t, BF16, x, toBF16(x), fromBF16, float64(fromBF16(0x7f7f)))
	}
}

// Decoding is exact and encoding a decoded value gives it back.
func TestRoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		for _, c := range []struct {
			dt  DType
			enc func(float32) uint16
			dec func(uint16) float32
		}{{F16, toF16, fromF16}, {BF16, toBF16, fromBF16}} {
			v := c.dec(uint16(h))
			if math.IsNaN(float64(v)) {
				continue
			}
			if got := c.enc(v); got != uint16(h) {
				t.Fatalf("%v: %#04x decodes to %v, which encodes to %#04x", c.dt, h, v, got)
			}
		}
	}
	if v := fromF16(0x0001); v != float32(math.Ldexp(1, -24)) {
		t.Errorf("smallest fp16 subnormal = %v", v)
	}
	if v := fromF16(0x3c00); v != 1 {
		t.Errorf("fp16 0x3c00 = %v", v)
	}
	if v := fromBF16(0x3f80); v != 1 {
		t.Errorf("bf16 0x3f80 = %v", v)
	}
}
