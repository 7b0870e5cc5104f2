package gpt

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"
	"github.com/flashattn/flashattn/internal/kernel"
)

func geluRef(u float64) float64 {
	return 0.5 * u * (1 + math.Tanh(geluC*(u+geluA*u*u*u)))
}

// TestGELU compares gelu and its derivative with float64 over a range
// that covers both saturated tails, on a length that is not a multiple of
// any chunk.
func TestGELU(t *testing.T) {
	e, im := gemm.New(2), kernel.Active().Impl
	const n = 3*geluChunk*rowBlock + 37
	u := make([]float32, n)
	for i := range u {
		u[i] = float32(-12 + 24*float64(i)/n)
	}
	u[0], u[1], u[2], u[3] = 60, -60, 1e13, -1e13
	g, du := make([]float32, n), make([]float32, n)
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	gelu(e, &im, g, u, n)
	geluBackward(e, &im, du, ones, u, n)
	for i, x := range u {
		x := float64(x)
		if math.Abs(x) > 100 { // saturated: gelu(u) = max(u, 0) exactly, gelu' = 0 or 1
			want := max(float32(x), 0)
			if g[i] != want || du[i] != float32(max(math.Copysign(1, x), 0)) {
				t.Fatalf("gelu(%v) = %v, gelu' = %v", x, g[i], du[i])
			}
			continue
		}
		if d := math.Abs(float64(g[i]) - geluRef(x)); d > 2e-6*(1+math.Abs(x)) {
			t.Fatalf("gelu(%v) = %v, want %v", x, g[i], geluRef(x))
		}
		h := 1e-4
		want := (geluRef(x+h) - geluRef(x-h)) / (2 * h)
		if d := math.Abs(float64(du[i]) - want); d > 1e-5*(1+math.Abs(x)) {
			t.Fatalf("gelu'(%v) = %v, want %v", x, du[i], want)
		}
	}
}

// TestLayerNormAndCrossEntropy compares both with float64 on ragged shapes.
func TestLayerNormAndCrossEntropy(t *testing.T) {
	e, im := gemm.New(2), kernel.Active().Impl
	r := rand.New(rand.NewPCG(1, 2))
	n, d, v := 70, 19, 23
	x, g, b := make([]float32, n*d), make([]float32, d), make([]float32, d)
	for i := range x {
		x[i] = float32(3 + 2*r.NormFloat64())
	}
	for j := range g {
		g[j], b[j] = float32(1+0.3*r.NormFloat64()), float32(r.NormFloat64())
	}
	y, mean, rstd := make([]float32, n*d), make([]float32, n), make([]float32, n)
	layerNorm(e, y, mean, rstd, x, g, b, n, d)
	for i := 0; i < n; i++ {
		var mu, va float64
		for j := 0; j < d; j++ {
			mu += float64(x[i*d+j])
		}
		mu /= float64(d)
		for j := 0; j < d; j++ {
			va += (float64(x[i*d+j]) - mu) * (float64(x[i*d+j]) - mu)
		}
		va /= float64(d)
		for j := 0; j < d; j++ {
			want := (float64(x[i*d+j])-mu)/math.Sqrt(va+lnEps)*float64(g[j]) + float64(b[j])
			if math.Abs(float64(y[i*d+j])-want) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("layer norm (%d,%d) = %v, want %v", i, j, y[i*d+j], want)
			}
		}
	}

	ld := kernel.Pad(v)
	logits := make([]float32, n*ld)
	targets := make([]int32, n)
	want := make([][]float64, n)
	var wantLoss float64
	for i := 0; i < n; i++ {
		targets[i] = int32(r.IntN(v))
		var z float64
		for j := 0; j < v; j++ {
			logits[i*ld+j] = float32(4 * r.NormFloat64())
			z += math.Exp(float64(logits[i*ld+j]))
		}
		want[i] = make([]float64, v)
		for j := 0; j < v; j++ {
			want[i][j] = math.Exp(float64(logits[i*ld+j])) / z / float64(n)
		}
		want[i][targets[i]] -= 1 / float64(n)
		wantLoss += (math.Log(z) - float64(logits[i*ld+int(targets[i])])) / float64(n)
	}
	loss := crossEntropy(e, &im, logits, targets, n, v, make([]float64, n))
	if math.Abs(loss-wantLoss) > 1e-5*wantLoss {
		t.Fatalf("loss %v, want %v", loss, wantLoss)
	}
	for i := 0; i < n; i++ {
		for j := 0; j < v; j++ {
			if math.Abs(float64(logits[i*ld+j])-want[i][j]) > 1e-7 {
				t.Fatalf("dlogits (%d,%d) = %v, want %v", i, j, logits[i*ld+j], want[i][j])
			}
		}
	}
}
