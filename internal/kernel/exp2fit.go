//go:build ignore

// exp2fit fits the AVX-512 exponential's polynomial Exp2C1 … Exp2C6 of
// generic.go: 2^r ≈ 1 + Exp2C1·r + … + Exp2C6·r⁶ on |r| ≤ 1/2 (and with
// -deg 4 -name Exp2B the bfloat16 store's Exp2B1 … Exp2B4), the
// constant term held at 1 (exact at r = 0, so exp(0) = 1), minimising the
// largest relative error (Lawson's iteratively reweighted least squares on
// 2000 Chebyshev nodes, in float64), then rounds the coefficients to
// float32 and reports the error of the rounded polynomial: in float64
// (the fit error) and evaluated as the kernel does (float32 Horner's rule,
// one fused multiply-add per step) on every float32 r in [-1/2, 1/2].
//
//	go run exp2fit.go [-deg 6] [-name Exp2C]
package main

import (
	"flag"
	"fmt"
	"math"
)

func main() {
	deg := flag.Int("deg", 6, "degree of the polynomial")
	name := flag.String("name", "Exp2C", "the coefficients' name, before their index")
	flag.Parse()
	const nodes = 2000
	xs := make([]float64, nodes)
	for i := range xs {
		xs[i] = 0.5 * math.Cos(math.Pi*(float64(i)+0.5)/nodes)
	}
	w := make([]float64, nodes)
	for i := range w {
		w[i] = 1.0 / nodes
	}
	var c []float64
	for it := 0; it < 200; it++ {
		c = fit(xs, w, *deg)
		// Lawson: weights grow with the error, toward equal ripple.
		var s float64
		for i, x := range xs {
			w[i] *= math.Abs(relErr(c, x))
			s += w[i]
		}
		for i := range w {
			w[i] /= s
		}
	}
	c32 := make([]float32, len(c))
	for k := range c {
		c32[k] = float32(c[k])
	}
	var fitErr float64
	for i := 0; i <= 1<<20; i++ {
		x := -0.5 + float64(i)/(1<<20)
		c64 := make([]float64, len(c32))
		for k := range c32 {
			c64[k] = float64(c32[k])
		}
		fitErr = math.Max(fitErr, math.Abs(relErr(c64, x)))
	}
	// Every float32 r in [-1/2, 1/2], the float32 Horner evaluation.
	var worst float64
	var worstR float32
	for _, sign := range []uint32{0, 0x80000000} {
		for b := uint32(0); b <= math.Float32bits(0.5); b++ {
			r := math.Float32frombits(b | sign)
			p := c32[len(c32)-1]
			for k := len(c32) - 2; k >= 0; k-- {
				p = float32(math.FMA(float64(p), float64(r), float64(c32[k])))
			}
			p = float32(math.FMA(float64(p), float64(r), 1))
			want := math.Exp2(float64(r))
			ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
			if e := math.Abs(float64(p)-want) / ulp; e > worst {
				worst, worstR = e, r
			}
		}
	}
	for k, v := range c32 {
		fmt.Printf("\t%s%d = %.10e\n", *name, k+1, v)
	}
	fmt.Printf("degree %d: fit (relative) error %.3g = 2^%.2f; float32 Horner: %.3f ulp at r=%v\n",
		*deg, fitErr, math.Log2(fitErr), worst, worstR)
}

// relErr is the relative error of 1 + c[0]·x + … + c[d-1]·x^d against 2^x.
func relErr(c []float64, x float64) float64 {
	p := 0.0
	for k := len(c) - 1; k >= 0; k-- {
		p = (p + c[k]) * x
	}
	return (1+p)/math.Exp2(x) - 1
}

// fit returns c minimising Σ w·((1 + Σ c_k x^k)/2^x − 1)², by the normal
// equations (Gaussian elimination).
func fit(xs, w []float64, deg int) []float64 {
	a := make([][]float64, deg)
	for i := range a {
		a[i] = make([]float64, deg+1)
	}
	for n, x := range xs {
		e := math.Exp2(x)
		row := make([]float64, deg)
		for k := range row {
			row[k] = math.Pow(x, float64(k+1)) / e
		}
		rhs := 1 - 1/e
		for i := range row {
			for j := range row {
				a[i][j] += w[n] * row[i] * row[j]
			}
			a[i][deg] += w[n] * row[i] * rhs
		}
	}
	for i := 0; i < deg; i++ {
		for j := i + 1; j < deg; j++ {
			f := a[j][i] / a[i][i]
			for k := i; k <= deg; k++ {
				a[j][k] -= f * a[i][k]
			}
		}
	}
	c := make([]float64, deg)
	for i := deg - 1; i >= 0; i-- {
		s := a[i][deg]
		for j := i + 1; j < deg; j++ {
			s -= a[i][j] * c[j]
		}
		c[i] = s / a[i][i]
	}
	return c
}
