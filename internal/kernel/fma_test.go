package kernel_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

// exactFMA32 is x·y + z rounded once to float32, by big.Float.
func exactFMA32(x, y, z float32) float32 {
	if math.IsInf(float64(x), 0) || math.IsInf(float64(y), 0) || math.IsInf(float64(z), 0) {
		return float32(float64(x)*float64(y) + float64(z))
	}
	p := new(big.Float).SetPrec(200).Mul(big.NewFloat(float64(x)), big.NewFloat(float64(y)))
	s := new(big.Float).SetPrec(200).Add(p, big.NewFloat(float64(z)))
	f, _ := s.Float32() // to nearest even
	if f == 0 && math.Signbit(float64(x*y)) && math.Signbit(float64(z)) {
		return float32(math.Copysign(0, -1))
	}
	return f
}

// TestFMA32: FMA32 rounds x·y + z once, to nearest even, as the float32
// hardware does: on random operands of every magnitude, at the halfway
// points where rounding through float64 first would round twice, and at
// the edges (overflow, subnormal results, signed zeros, NaN).
func TestFMA32(t *testing.T) {
	tiny := float32(math.Ldexp(1, -100))
	cases := [][3]float32{
		// 3·(1+2⁻²³) = 3 + 1.5 ulp: halfway between two float32 values;
		// a tiny z decides, and is lost in a float64 sum.
		{3, 1 + 0x1p-23, -tiny},
		{3, 1 + 0x1p-23, tiny},
		{-3, 1 + 0x1p-23, tiny},
		{1 + 0x1p-12, 1 + 0x1p-12, -0x1p-24},
		{0x1p100, 0x1p100, 1},  // overflow to +Inf
		{0x1p-100, 0x1p-40, 0}, // subnormal
		{0x1p-100, 0x1p-49, 0x1p-149},
		{0, -1, 0}, {0, -1, float32(math.Copysign(0, -1))},
		{1, 1, -1},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		v := func() float32 {
			return float32(r.NormFloat64() * math.Ldexp(1, r.IntN(60)-30))
		}
		cases = append(cases, [3]float32{v(), v(), v()})
		// z near -x·y: cancellation, the exact sum's low bits matter.
		x, y := v(), v()
		cases = append(cases, [3]float32{x, y, -x * y * float32(1+r.IntN(3)-1)})
	}
	for _, c := range cases {
		got, want := kernel.FMA32(c[0], c[1], c[2]), exactFMA32(c[0], c[1], c[2])
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("FMA32(%g, %g, %g) = %g (%#x), want %g (%#x)", c[0], c[1], c[2], got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	if got := kernel.FMA32(float32(math.NaN()), 1, 1); got == got {
		t.Errorf("FMA32(NaN, 1, 1) = %v, want NaN", got)
	}
	// The double rounding FMA32 avoids: float64 first, then float32.
	if d := float32(math.FMA(3, 1+0x1p-23, -float64(tiny))); d == kernel.FMA32(3, 1+0x1p-23, -tiny) {
		t.Errorf("float32(math.FMA) = FMA32 at a halfway point: the case tests nothing")
	}
}
