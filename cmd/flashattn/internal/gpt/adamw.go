package gpt

import "math"

// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter), applied
// to the tensors whose TensorInfo.Decay is set.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64

	m, v []float32
	t    int
}

// NewAdamW returns AdamW with GPT-style settings (β = 0.9, 0.95; ε = 1e-8)
// and the given weight decay, for n parameters.
func NewAdamW(n int, weightDecay float64) *AdamW {
	return &AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: weightDecay, m: make([]float32, n), v: make([]float32, n)}
}

// Step updates p with gradients g at learning rate lr.
func (o *AdamW) Step(p, g *Params, lr float64) {
	o.t++
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	c1 := float32(1 / (1 - math.Pow(o.Beta1, float64(o.t))))
	c2 := float32(1 / (1 - math.Pow(o.Beta2, float64(o.t))))
	step, eps := float32(lr), float32(o.Eps)
	for _, ti := range p.Tensors {
		decay := float32(1)
		if ti.Decay {
			decay = float32(1 - lr*o.WeightDecay)
		}
		x := p.Data[ti.Offset : ti.Offset+ti.Size]
		gr := g.Data[ti.Offset : ti.Offset+ti.Size]
		m := o.m[ti.Offset : ti.Offset+ti.Size]
		v := o.v[ti.Offset : ti.Offset+ti.Size]
		for i, gi := range gr {
			m[i] = b1*m[i] + (1-b1)*gi
			v[i] = b2*v[i] + (1-b2)*gi*gi
			mh, vh := m[i]*c1, v[i]*c2
			x[i] = x[i]*decay - step*mh/(float32(math.Sqrt(float64(vh)))+eps)
		}
	}
}

// ClipGradients scales g so that its L2 norm is at most maxNorm (if
// maxNorm > 0) and returns the norm before clipping.
func ClipGradients(g *Params, maxNorm float64) float64 {
	var s float64
	for _, x := range g.Data {
		s += float64(x) * float64(x)
	}
	norm := math.Sqrt(s)
	if maxNorm > 0 && norm > maxNorm {
		f := float32(maxNorm / norm)
		for i := range g.Data {
			g.Data[i] *= f
		}
	}
	return norm
}

// Schedule is a learning rate that rises linearly over Warmup steps to
// Peak and then follows a cosine down to Min at step Total. Steps count
// from 1.
type Schedule struct {
	Peak, Min     float64
	Warmup, Total int
}

// LR returns the learning rate of step (1-based).
func (s Schedule) LR(step int) float64 {
	if step <= s.Warmup {
		return s.Peak * float64(step) / float64(s.Warmup)
	}
	if step >= s.Total {
		return s.Min
	}
	f := float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	return s.Min + 0.5*(s.Peak-s.Min)*(1+math.Cos(math.Pi*f))
}
