package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// tinyConfig is small enough for finite differences and ragged on purpose:
// no width is a multiple of the kernels' 16.
func tinyConfig() Config {
	return Config{Vocab: 13, Context: 9, Layers: 2, Heads: 2, Dim: 12}
}

func randomBatch(r *rand.Rand, vocab, size, seq int) Batch {
	b := Batch{Inputs: make([]int32, size*seq), Targets: make([]int32, size*seq), Size: size, Seq: seq}
	for i := range b.Inputs {
		b.Inputs[i], b.Targets[i] = int32(r.IntN(vocab)), int32(r.IntN(vocab))
	}
	return b
}

// perturb replaces every parameter by a draw large enough that every
// gradient is well above float32 noise (GPT-2's 0.02 makes most tiny).
func perturb(p *Params, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	for _, t := range p.Tensors {
		x := p.Data[t.Offset : t.Offset+t.Size]
		for i := range x {
			x[i] = float32(0.4 * r.NormFloat64())
			if strings.HasSuffix(t.Name, ".g") {
				x[i] += 1
			}
		}
	}
}

func newTestModel(t *testing.T, c Config, attn string, seed uint64) *Model {
	t.Helper()
	a, err := NewAttention(attn, 2)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(c, a, seed, 2)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestForwardMatchesReference compares the loss with a float64 model
// written from the definitions, for both attentions.
func TestForwardMatchesReference(t *testing.T) {
	for _, attn := range []string{"flash", "plain"} {
		for _, c := range []Config{tinyConfig(), {Vocab: 40, Context: 33, Layers: 1, Heads: 3, Dim: 48}} {
			t.Run(fmt.Sprintf("%s/%d-%d", attn, c.Dim, c.Context), func(t *testing.T) {
				m := newTestModel(t, c, attn, 1)
				perturb(m.Params, 2)
				b := randomBatch(rand.New(rand.NewPCG(3, 3)), c.Vocab, 3, c.Context)
				got, err := m.Forward(b, false, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := refLoss(c, m.Params, b)
				if math.Abs(got-want) > 1e-5*math.Abs(want) {
					t.Fatalf("loss %v, float64 reference %v", got, want)
				}
			})
		}
	}
}

// TestGradientFiniteDifferences checks every parameter tensor's gradient
// against central differences of the loss, along a random direction in
// that tensor and element by element for its largest entries; with flash
// attention also under dropout, whose masks the seed fixes.
func TestGradientFiniteDifferences(t *testing.T) {
	for _, tc := range []struct {
		attn    string
		dropout float32
	}{{"flash", 0}, {"flash", 0.2}, {"plain", 0}} {
		t.Run(fmt.Sprintf("%s/dropout=%v", tc.attn, tc.dropout), func(t *testing.T) {
			c := tinyConfig()
			c.Dropout = tc.dropout
			m := newTestModel(t, c, tc.attn, 5)
			perturb(m.Params, 6)
			r := rand.New(rand.NewPCG(7, 7))
			b := randomBatch(r, c.Vocab, 2, 7)
			const seed = 1234
			loss := func() float64 {
				l, err := m.Forward(b, true, seed)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			loss()
			if err := m.Backward(); err != nil {
				t.Fatal(err)
			}
			grad := slices.Clone(m.Grads.Data)
			// Fourth-order central differences: the truncation error is
			// O(h⁴) and the float32 noise of the loss (about 1e-7) is
			// divided by h.
			const h = 1e-2
			fd := func(idx []int, dir []float32) float64 {
				x := m.Params.Data
				old := make([]float32, len(idx))
				for i, k := range idx {
					old[i] = x[k]
				}
				at := func(step float64) float64 {
					for i, k := range idx {
						x[k] = old[i] + float32(step)*dir[i]
					}
					return loss()
				}
				d := (8*(at(h)-at(-h)) - (at(2*h) - at(-2*h))) / (12 * h)
				for i, k := range idx {
					x[k] = old[i]
				}
				return d
			}
			var worst float64
			defer func() { t.Logf("largest error / tolerance: %.3f", worst) }()
			for _, ti := range m.Params.Tensors {
				idx := make([]int, ti.Size)
				g := make([]float32, ti.Size)
				var gnorm float64
				for i := range idx {
					idx[i] = ti.Offset + i
					g[i] = grad[idx[i]]
					gnorm += float64(g[i]) * float64(g[i])
				}
				gnorm = math.Sqrt(gnorm)
				// Along the tensor's gradient the derivative is |g|; along a
				// random unit direction v it is g·v.
				v := make([]float32, ti.Size)
				var vnorm, gv float64
				for i := range v {
					v[i] = float32(r.NormFloat64())
					vnorm += float64(v[i]) * float64(v[i])
				}
				for i := range v {
					v[i] /= float32(math.Sqrt(vnorm))
					gv += float64(v[i]) * float64(g[i])
				}
				dirG := make([]float32, ti.Size)
				for i := range g {
					dirG[i] = float32(float64(g[i]) / gnorm)
				}
				for _, chk := range []struct {
					what string
					dir  []float32
					want float64
				}{{"gradient direction", dirG, gnorm}, {"random direction", v, gv}} {
					num := fd(idx, chk.dir)
					tol := 1e-3*gnorm + 2e-5
					worst = max(worst, math.Abs(num-chk.want)/tol)
					if math.Abs(num-chk.want) > tol {
						t.Errorf("%s, %s: derivative %.6g, finite difference %.6g (|g| = %.3g)", ti.Name, chk.what, chk.want, num, gnorm)
					}
				}
				// The three largest entries, one at a time.
				order := slices.Clone(idx)
				slices.SortFunc(order, func(a, b int) int {
					return -cmpAbs(grad[a], grad[b])
				})
				for _, k := range order[:min(3, len(order))] {
					num := fd([]int{k}, []float32{1})
					tol := 1e-3*math.Abs(float64(grad[k])) + 2e-5
					worst = max(worst, math.Abs(num-float64(grad[k]))/tol)
					if math.Abs(num-float64(grad[k])) > tol {
						t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g", ti.Name, k-ti.Offset, grad[k], num)
					}
				}
			}
		})
	}
}

func cmpAbs(a, b float32) int {
	x, y := math.Abs(float64(a)), math.Abs(float64(b))
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// TestFlashPlainAgree checks that the two attentions give the same loss
// and gradients on the same model and batch.
func TestFlashPlainAgree(t *testing.T) {
	c := Config{Vocab: 50, Context: 40, Layers: 2, Heads: 2, Dim: 32}
	fl, pl := newTestModel(t, c, "flash", 9), newTestModel(t, c, "plain", 9)
	if !slices.Equal(fl.Params.Data, pl.Params.Data) {
		t.Fatal("same seed, different initial parameters")
	}
	b := randomBatch(rand.New(rand.NewPCG(1, 2)), c.Vocab, 3, 37)
	var grads [2][]float32
	var losses [2]float64
	for i, m := range []*Model{fl, pl} {
		l, err := m.Forward(b, true, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(); err != nil {
			t.Fatal(err)
		}
		losses[i], grads[i] = l, m.Grads.Data
	}
	if d := math.Abs(losses[0] - losses[1]); d > 1e-6 {
		t.Errorf("loss flash %v plain %v", losses[0], losses[1])
	}
	var maxg, maxd float64
	for i := range grads[0] {
		maxg = max(maxg, math.Abs(float64(grads[1][i])))
		maxd = max(maxd, math.Abs(float64(grads[0][i]-grads[1][i])))
	}
	if maxd > 1e-4*maxg {
		t.Errorf("gradients differ by %g (largest %g)", maxd, maxg)
	}
}

// TestPlainRejectsDropout checks the error that says plain attention needs
// dropout 0.
func TestPlainRejectsDropout(t *testing.T) {
	c := tinyConfig()
	c.Dropout = 0.1
	m := newTestModel(t, c, "plain", 1)
	_, err := m.Forward(randomBatch(rand.New(rand.NewPCG(1, 1)), c.Vocab, 1, 5), true, 1)
	if err == nil || !strings.Contains(err.Error(), "dropout 0") {
		t.Fatalf("err = %v, want the plain-dropout error", err)
	}
	// Evaluation (no dropout) still works.
	if _, err := m.Forward(randomBatch(rand.New(rand.NewPCG(1, 1)), c.Vocab, 1, 5), false, 1); err != nil {
		t.Fatal(err)
	}
}

// TestBadBatches checks that malformed batches are errors.
func TestBadBatches(t *testing.T) {
	c := tinyConfig()
	m := newTestModel(t, c, "flash", 1)
	good := randomBatch(rand.New(rand.NewPCG(1, 1)), c.Vocab, 2, 4)
	for name, b := range map[string]Batch{
		"too long":     {Inputs: make([]int32, 10), Targets: make([]int32, 10), Size: 1, Seq: 10},
		"short inputs": {Inputs: good.Inputs[:7], Targets: good.Targets, Size: 2, Seq: 4},
		"bad targets":  {Inputs: good.Inputs, Targets: good.Targets[:3], Size: 2, Seq: 4},
		"token range":  {Inputs: []int32{0, 13}, Targets: []int32{0, 0}, Size: 1, Seq: 2},
		"negative":     {Inputs: []int32{-1}, Size: 1, Seq: 1},
		"empty":        {Size: 0, Seq: 3},
	} {
		if _, err := m.Forward(b, true, 0); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := newTestModel(t, c, "flash", 1).Backward(); err == nil {
		t.Error("Backward before Forward: no error")
	}
	if _, err := m.Logits(0); err == nil {
		t.Error("Logits after a failed Forward: no error")
	}
}
