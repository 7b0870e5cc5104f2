package kernel

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExpSumBF16 checks every implementation's ExpSumBF16 bit for bit
// against its twin (Impl.expSumBF16Twin: the same implementation's ExpSum
// followed by its F32ToBF16, or on AVX512_BF16 expSumBF16Short, the Go
// twin of its shorter polynomial), over lengths with an odd number of vectors
// (the fused store's pipeline tail) and arguments that reach every branch
// of the store: ±Inf, NaN, huge values, 0, and the float32 values just
// above ExpMin, where a subnormal exp(t) would be flushed to zero by
// VCVTNEPS2BF16 but not by the twin's rounding — none is subnormal (the
// fused store relies on it, and the test asserts it of the twin's
// bfloat16 values). dst beyond len(x) is not written. It runs on the
// candidates of archImpls, so that a wrong kernel fails here, not only
// in the registry (TestRegistry).
func TestExpSumBF16(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	special := []float32{-inf, inf, nan, 0, -1e30, 1e30, ExpMax, ExpMax + 1e-3, 89, 1000, -1000, ExpMin - 1e-3}
	// Every float32 from ExpMin up, 2048 of them: t runs through the
	// range where n = −126.
	low := make([]float32, 2048)
	for i := range low {
		low[i] = math.Float32frombits(math.Float32bits(ExpMin) - uint32(i))
	}
	r := rand.New(rand.NewPCG(29, 16))
	for _, im := range append(archImpls(), Generic) { // the candidates, even one selfCheck rejects
		twin := im.expSumBF16Twin()
		subnormals := 0
		for _, n := range []int{0, 16, 48, 80, 144, 1008, 2064} {
			x := make([]float32, n)
			for i := range x {
				switch r.IntN(4) {
				case 0:
					x[i] = special[r.IntN(len(special))]
				case 1:
					x[i] = low[r.IntN(len(low))]
				default:
					x[i] = r.Float32()*40 - 30
				}
			}
			if n >= len(low) {
				copy(x, low)
			}
			want, wx := make([]uint16, n+5), slices.Clone(x)
			for i := range want {
				want[i] = 0xbeef
			}
			scale, sub := float32(1), float32(0)
			if n%32 == 16 { // a scale and a subtrahend where the fused argument counts
				scale, sub = 0.088388346, -2.7182817
			}
			wsum := twin(want[:n], wx, scale, sub)
			for _, h := range want[:n] {
				if h&0x7f80 == 0 && h&0x7f != 0 { // a bfloat16 subnormal
					subnormals++
				}
			}
			got, gx := make([]uint16, n+5), slices.Clone(x)
			for i := range got {
				got[i] = 0xbeef
			}
			gsum := im.ExpSumBF16(got, gx, scale, sub)
			if math.Float32bits(gsum) != math.Float32bits(wsum) && !(gsum != gsum && wsum != wsum) {
				t.Errorf("%s n=%d: sum %v, its twin's %v", im.Name, n, gsum, wsum)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s n=%d: dst[%d] = %#04x, want %#04x (x %v)", im.Name, n, i, got[i], want[i], x[min(i, n-1)])
				}
			}
		}
		if subnormals > 0 {
			t.Errorf("%s: %d subnormal bfloat16 exponentials (exp(t) for t ≥ ExpMin must be ≥ 2^−126)", im.Name, subnormals)
		}
	}
}

// expBF16Args returns every float32 t in [ExpMin, 0] (stride as
// TestExpULP: bit patterns stride apart, 997 with -short or -race), every
// float32 from ExpMax − 0.01 to 88.73 (past ln MaxFloat32 ≈ 88.7228, where
// p·2^128 overflows: the range without a mask on AVX512_BF16; stride 7
// with -short or -race), 0 to 89 by 0.01, then the special values and
// those just outside the range, padded with 0 to a multiple of W.
func expBF16Args() []float32 {
	xs := expNegSweep()
	stride := uint32(1)
	if raceEnabled || testing.Short() {
		stride = 7
	}
	for b := math.Float32bits(ExpMax - 0.01); b <= math.Float32bits(88.73); b += stride {
		xs = append(xs, math.Float32frombits(b))
	}
	for i := range 8901 {
		xs = append(xs, float32(i)/100)
	}
	inf := float32(math.Inf(1))
	xs = append(xs, ExpMin, -inf, inf, float32(math.NaN()), 0, -1e30, 1e30, ExpMax, ExpMax+1e-3, 89, 1000, -1000, ExpMin-1e-3,
		math.Nextafter32(ExpMin, -inf), math.Nextafter32(ExpMax, inf), 0x1p-149, -0x1p-149)
	for len(xs)%W != 0 {
		xs = append(xs, 0)
	}
	return xs
}

// TestExpSumBF16Sweep checks every implementation's ExpSumBF16 bit for
// bit against its twin (Impl.expSumBF16Twin) on every float32 argument
// of expBF16Args, 4096 at a time (the sums too): on AVX512_BF16 the
// assembly against expSumBF16Short, operation for operation.
func TestExpSumBF16Sweep(t *testing.T) {
	xs := expBF16Args()
	for _, im := range append(archImpls(), Generic) { // the candidates, even one selfCheck rejects
		twin := im.expSumBF16Twin()
		bad := 0
		for off := 0; off < len(xs); off += 4096 {
			x := xs[off:min(off+4096, len(xs))]
			got, want := make([]uint16, len(x)), make([]uint16, len(x))
			gsum := im.ExpSumBF16(got, slices.Clone(x), 1, 0)
			wsum := twin(want, slices.Clone(x), 1, 0)
			if math.Float32bits(gsum) != math.Float32bits(wsum) && !(gsum != gsum && wsum != wsum) {
				t.Errorf("%s x[%d:]: sum %v, its twin's %v", im.Name, off, gsum, wsum)
				bad++
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("%s: exp(%v) = bf16 %#04x, its twin %#04x", im.Name, x[i], got[i], want[i])
					bad++
				}
				if bad > 10 {
					t.Fatalf("%s: too many differences", im.Name)
				}
			}
		}
	}
}

// TestExpBF16ShortBound checks the bound Impl.ExpSumBF16 states for the
// shorter polynomial (expSumBF16Short, which TestExpSumBF16Sweep ties to
// the assembly bit for bit): each value before its rounding within a
// relative 3e-6 + |t|·2^-23 of exp(t) on every argument of expBF16Args
// (0 below ExpMin, the special values as ExpSum's), and the sum of a row
// of them within the same relative bound plus its float32 additions.
func TestExpBF16ShortBound(t *testing.T) {
	xs := expBF16Args()
	var worst float64
	var worstX float32
	for _, x := range xs {
		got, want := expBF16Short(x), math.Exp(float64(x))
		switch {
		case x != x:
			if got == got {
				t.Errorf("exp(NaN) = %v", got)
			}
			continue
		case x < ExpMin || math.IsInf(float64(x), 1):
			if w := Exp(x); got != w {
				t.Errorf("exp(%v) = %v, want %v", x, got, w)
			}
			continue
		case math.IsInf(float64(got), 1):
			// Above ExpMax: +Inf once exp(t), within the bound, may
			// exceed MaxFloat32.
			if want*(1+3e-6+math.Abs(float64(x))*0x1p-23) < math.MaxFloat32 {
				t.Errorf("exp(%v) = +Inf, want %v", x, want)
			}
			continue
		}
		if got != 0 && math.Abs(float64(got)) < 0x1p-126 {
			t.Errorf("exp(%v) = %v: subnormal", x, got)
		}
		if e := math.Abs(float64(got)-want) / want / (3e-6 + math.Abs(float64(x))*0x1p-23); e > worst {
			worst, worstX = e, x
		}
	}
	if worst > 1 {
		t.Errorf("exp(%v): error %.3g of the bound 3e-6 + |t|·2^-23", worstX, worst)
	}
	t.Logf("largest error %.3g of the bound (at t = %v)", worst, worstX)
	// A row of scores within 10 of its maximum: the sum.
	r := rand.New(rand.NewPCG(29, 17))
	x := make([]float32, 4096)
	dst := make([]uint16, len(x))
	for i := range x {
		x[i] = -10 * r.Float32()
	}
	var want float64
	for _, v := range x {
		want += math.Exp(float64(v))
	}
	got := expSumBF16Short(dst, x, 1, 0)
	// The additions: 4096/32 + 4 in a row at most, 2^-24 each.
	if e := math.Abs(float64(got)-want) / want; e > 3e-6+10*0x1p-23+(4096/32+4)*0x1p-24 {
		t.Errorf("sum %v, want %v: relative error %.3g", got, want, e)
	}
}

// TestExpSumBF16Fused checks that the argument of ExpSumBF16 on
// AVX512_BF16 (and of its twin, expSumBF16Short) is the fused
// scale·x − sub, rounded once: rows of one repeated x whose product
// scale·x (near 2^20, a float32 grid of 1/8) is far from a float32, and a
// subtrahend that leaves t near −1, so that rounding the product first
// would move every exponential by the same relative error, up to 2^-4.
// The sum must be within Impl.ExpSumBF16's bound of the exact
// Σ exp(scale·x − sub): 3e-6 + |t|·2^-23, plus |t|·2^-24 for the rounding
// of t, plus the float32 additions.
func TestExpSumBF16Fused(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 18))
	impls := []struct {
		name string
		f    func(dst []uint16, x []float32, scale, sub float32) float32
	}{{"expSumBF16Short", expSumBF16Short}}
	for _, im := range append(archImpls(), Generic) {
		if im.shortExpBF16 {
			impls = append(impls, struct {
				name string
				f    func(dst []uint16, x []float32, scale, sub float32) float32
			}{im.Name, im.ExpSumBF16})
		}
	}
	const n = 64
	x, dst := make([]float32, n), make([]uint16, n)
	worst := 0.0
	for range 200 {
		scale := float32(0.05 + 0.1*r.Float64())
		xv := float32(0x1p20 / float64(scale) * (1 + 0.01*r.Float64()))
		exact := float64(scale) * float64(xv) // exact: 48 bits
		sub := float32(exact + 1)             // t = exact − sub ≈ −1
		tt := exact - float64(sub)
		want := n * math.Exp(tt)
		bound := 3e-6 + math.Abs(tt)*(0x1p-23+0x1p-24) + (n/32+4)*0x1p-24
		for _, im := range impls {
			for i := range x {
				x[i] = xv
			}
			got := im.f(dst, x, scale, sub)
			e := math.Abs(float64(got)-want) / want
			worst = max(worst, e/bound)
			if e > bound {
				t.Fatalf("%s: scale %v, x %v, sub %v: sum %v, want %v: relative error %.3g > %.3g", im.name, scale, xv, sub, got, want, e, bound)
			}
		}
	}
	t.Logf("largest error %.3g of the bound", worst)
}
