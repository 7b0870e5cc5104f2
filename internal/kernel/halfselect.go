package kernel

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"
)

// The half-precision product paths are chosen by measurement: which one is
// fastest differs by CPU in ways feature bits do not tell (VDPBF16PS runs
// at twice the float32 FMA rate on AMD Zen 4 but at half of it on Intel
// Sapphire Rapids, where AMX is far ahead of both).

// halfAvailable[e-1] is computed once: the assembly paths this CPU supports
// that pass selfCheckHalf, then "f32" and "generic".
var halfAvailable = [2]func() []Half{
	sync.OnceValue(func() []Half { return availableHalf(BF16) }),
	sync.OnceValue(func() []Half { return availableHalf(F16) }),
}

func availableHalf(e Elem) []Half {
	var hs []Half
	for _, h := range archHalf(e) {
		if err := selfCheckHalf(h); err == nil {
			hs = append(hs, h)
		}
	}
	return append(hs, f32Half(e, Select()), GenericHalf(e))
}

// HalfAvailable lists the half-precision paths for e that this CPU can run:
// the assembly ones ("amx", "avx512bf16") that passed their start-up
// self-check, then "f32" and "generic", which are always there.
func HalfAvailable(e Elem) []Half {
	checkElem(e)
	return slices.Clone(halfAvailable[e-1]())
}

// LookupHalf returns the available path for e with the given name.
func LookupHalf(e Elem, name string) (Half, error) {
	checkElem(e)
	for _, h := range halfAvailable[e-1]() {
		if h.Name == name {
			return h, nil
		}
	}
	return Half{}, fmt.Errorf("%s path %q is not available on this CPU", e, name)
}

// HalfEnv is the environment variable that forces the path for e:
// FLASHATTN_BF16 or FLASHATTN_F16 (amx, avx512bf16, f32 or generic).
func HalfEnv(e Elem) string {
	if e == F16 {
		return "FLASHATTN_F16"
	}
	return "FLASHATTN_BF16"
}

// halfChosen[e-1] is the measured fastest path, measured once per process.
var halfChosen = [2]func() Half{
	sync.OnceValue(func() Half { return fastestHalf(BF16) }),
	sync.OnceValue(func() Half { return fastestHalf(F16) }),
}

func fastestHalf(e Elem) Half {
	h, err := LookupHalf(e, MeasureHalf(e)[0].Name)
	if err != nil {
		bad(err.Error())
	}
	return h
}

// HalfPath returns the path to use for e: the one named by HalfEnv(e) if
// it is set and available, else the fastest available one, measured on
// this machine at the first call (a few milliseconds, once per process).
// The "f32" path means: widen the inputs once to float32 and use the
// float32 kernels of Select.
func HalfPath(e Elem) Half {
	checkElem(e)
	if name := os.Getenv(HalfEnv(e)); name != "" {
		if h, err := LookupHalf(e, name); err == nil {
			return h
		}
	}
	return halfChosen[e-1]()
}

// HalfTiming is the measured speed of one path.
type HalfTiming struct {
	Name   string
	GFLOPS float64
}

// The fixed problem the paths are timed on: an attention tile, 48 query
// rows against 64 keys of head dimension 64 (S = Q·Kᵀ's shape; O += P·V
// has the same with k and n swapped).
const measureM, measureN, measureK = 48, 64, 64

// MeasureHalf times every available path for e on a fixed tile-sized
// product (best of three rounds of about half a millisecond each) and
// returns them fastest first. The "f32" path is timed as the float32
// kernel on float32 data, which is what it runs in steady state; the
// conversions happen once per tile outside the product.
func MeasureHalf(e Elem) []HalfTiming {
	checkElem(e)
	const m, n, k = measureM, measureN, measureK
	a := make([]uint16, m*k)
	af := make([]float32, m*k)
	for i := range a {
		af[i] = float32(math.Sin(float64(i)))
		a[i] = e.FromF32(af[i])
	}
	bf := make([]float32, k*n)
	for i := range bf {
		bf[i] = float32(math.Cos(float64(i)))
	}
	b := make([]uint16, VNNILen(k, n))
	PackVNNI(b, bf, n, k, n, false, e)
	c := make([]float32, m*n)
	var out []HalfTiming
	for _, h := range halfAvailable[e-1]() {
		run := func() { h.MulAdd(c, n, a, k, b, W*k, m, n, k) }
		if h.Name == "f32" {
			im := Select()
			run = func() { im.MulAddAB(c, n, af, k, bf, n, m, n, k) }
		}
		best := math.Inf(1)
		for round := 0; round < 3; round++ {
			calls, start := 0, time.Now()
			for calls < 3 || time.Since(start) < 500*time.Microsecond {
				run()
				calls++
			}
			best = min(best, time.Since(start).Seconds()/float64(calls))
		}
		out = append(out, HalfTiming{h.Name, 2 * m * n * k / best / 1e9})
	}
	slices.SortStableFunc(out, func(x, y HalfTiming) int {
		switch {
		case x.GFLOPS > y.GFLOPS:
			return -1
		case x.GFLOPS < y.GFLOPS:
			return 1
		}
		return 0
	})
	return out
}

// selfCheckHalf runs h once on a small ragged problem (row blocks and a
// row tail, a k tail of 6, odd leading dimensions, B a range of rows of a
// longer packed matrix, so with a strip stride above 16·k) and compares it
// with the generic path. It guards CPUs the assembly never ran on in development: a
// path that disagrees is not used. The tolerance covers a different order
// of float32 additions: |Δ| ≤ 1e-5·(Σ|A·B| + |C₀|) per element, about 40
// times the worst rounding drift of k = 38 float32 additions.
func selfCheckHalf(h Half) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s path %s: %v", h.Elem, h.Name, r)
		}
	}()
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
