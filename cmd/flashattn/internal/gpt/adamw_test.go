package gpt

import (
	"math"
	"testing"
)

// TestAdamW runs three steps on a tiny model's parameters and compares
// every parameter with AdamW computed in float64.
func TestAdamW(t *testing.T) {
	c := Config{Vocab: 3, Context: 2, Layers: 1, Heads: 1, Dim: 2}
	p, g := NewParams(c), NewParams(c)
	initParams(p, c, 1)
	n := len(p.Data)
	x := make([]float64, n)
	m, v := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i] = float64(p.Data[i])
	}
	decay := make([]bool, n)
	for _, ti := range p.Tensors {
		for i := ti.Offset; i < ti.Offset+ti.Size; i++ {
			decay[i] = ti.Decay
		}
	}
	o := NewAdamW(n, 0.1)
	for step := 1; step <= 3; step++ {
		lr := 0.01 * float64(step)
		for i := range g.Data {
			g.Data[i] = float32(math.Sin(float64(i*step)) * 0.1)
		}
		o.Step(p, g, lr)
		for i := range x {
			gi := float64(g.Data[i])
			m[i] = 0.9*m[i] + 0.1*gi
			v[i] = 0.95*v[i] + 0.05*gi*gi
			mh := m[i] / (1 - math.Pow(0.9, float64(step)))
			vh := v[i] / (1 - math.Pow(0.95, float64(step)))
			if decay[i] {
				x[i] *= 1 - lr*0.1
			}
			x[i] -= lr * mh / (math.Sqrt(vh) + 1e-8)
		}
	}
	for i := range x {
		if d := math.Abs(float64(p.Data[i]) - x[i]); d > 1e-6 {
			t.Fatalf("parameter %d: %v, float64 AdamW %v", i, p.Data[i], x[i])
		}
	}
}

func TestClipGradients(t *testing.T) {
	c := Config{Vocab: 3, Context: 2, Layers: 1, Heads: 1, Dim: 2}
	g := NewParams(c)
	g.Data[0], g.Data[1] = 3, 4
	if n := ClipGradients(g, 10); n != 5 || g.Data[0] != 3 {
		t.Fatalf("norm %v, g %v: nothing should be clipped", n, g.Data[:2])
	}
	if n := ClipGradients(g, 1); n != 5 || math.Abs(float64(g.Data[0])-0.6) > 1e-7 || math.Abs(float64(g.Data[1])-0.8) > 1e-7 {
		t.Fatalf("norm %v, g %v: want 5 and (0.6, 0.8)", n, g.Data[:2])
	}
}

func TestSchedule(t *testing.T) {
	s := Schedule{Peak: 1e-2, Min: 1e-3, Warmup: 10, Total: 100}
	if got := s.LR(1); math.Abs(got-1e-3) > 1e-15 {
		t.Errorf("LR(1) = %v, want peak/warmup", got)
	}
	if got := s.LR(10); got != 1e-2 {
		t.Errorf("LR(10) = %v, want the peak", got)
	}
	if got := s.LR(100); got != 1e-3 {
		t.Errorf("LR(100) = %v, want the floor", got)
	}
	if got, want := s.LR(55), 1e-3+0.5*9e-3; math.Abs(got-want) > 1e-12 {
		t.Errorf("LR(55) = %v, want %v (half way down the cosine)", got, want)
	}
	for step := 11; step <= 100; step++ {
		if s.LR(step) > s.LR(step-1) {
			t.Fatalf("LR rises at step %d after the warm-up", step)
		}
	}
	if got := (Schedule{Peak: 1, Min: 0.5, Warmup: 0, Total: 4}).LR(1); !(got < 1 && got > 0.5) {
		t.Errorf("no warm-up: LR(1) = %v", got)
	}
}
