package gpt

import "math"

// refLoss is the model's forward pass written naively in float64 from the
// definitions (no dropout): the oracle for Model.Forward.
func refLoss(c Config, p *Params, b Batch) float64 {
	d, hd, H, V := c.Dim, c.HeadDim(), c.Heads, c.Vocab
	f := func(x []float32) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(v)
		}
		return y
	}
	ln := func(x []float64, g, bb []float32) []float64 {
		var mu, v float64
		for _, a := range x {
			mu += a
		}
		mu /= float64(len(x))
		for _, a := range x {
			v += (a - mu) * (a - mu)
		}
		v /= float64(len(x))
		y := make([]float64, len(x))
		for j, a := range x {
			y[j] = (a-mu)/math.Sqrt(v+lnEps)*float64(g[j]) + float64(bb[j])
		}
		return y
	}
	mat := func(x []float64, w, bias []float32, din, dout int) []float64 {
		y := f(bias[:dout])
		for j := 0; j < dout; j++ {
			for k := 0; k < din; k++ {
				y[j] += x[k] * float64(w[k*dout+j])
			}
		}
		return y
	}
	var total float64
	for s := 0; s < b.Size; s++ {
		T := b.Seq
		x := make([][]float64, T)
		for t := range x {
			tok := int(b.Inputs[s*T+t])
			x[t] = make([]float64, d)
			for j := range x[t] {
				x[t][j] = float64(p.Wte[tok*d+j]) + float64(p.Wpe[t*d+j])
			}
		}
		for l := 0; l < c.Layers; l++ {
			L := &p.Layers[l]
			qkv := make([][]float64, T)
			for t := range x {
				qkv[t] = mat(ln(x[t], L.Ln1G, L.Ln1B), L.Wqkv, L.Bqkv, d, 3*d)
			}
			for t := 0; t < T; t++ {
				att := make([]float64, d)
				for h := 0; h < H; h++ {
					q := qkv[t][h*hd : (h+1)*hd]
					sc := make([]float64, t+1)
					mx := math.Inf(-1)
					for j := 0; j <= t; j++ {
						k := qkv[j][d+h*hd : d+(h+1)*hd]
						for i := range q {
							sc[j] += q[i] * k[i]
						}
						sc[j] /= math.Sqrt(float64(hd))
						mx = math.Max(mx, sc[j])
					}
					var z float64
					for j := range sc {
						sc[j] = math.Exp(sc[j] - mx)
						z += sc[j]
					}
					for j := range sc {
						v := qkv[j][2*d+h*hd : 2*d+(h+1)*hd]
						for i := range v {
							att[h*hd+i] += sc[j] / z * v[i]
						}
					}
				}
				y := mat(att, L.Wo, L.Bo, d, d)
				for j := range y {
					y[j] += x[t][j]
				}
				u := mat(ln(y, L.Ln2G, L.Ln2B), L.W1, L.B1, d, c.Hidden())
				for j := range u {
					u[j] = 0.5 * u[j] * (1 + math.Tanh(geluC*(u[j]+geluA*u[j]*u[j]*u[j])))
				}
				z := mat(u, L.W2, L.B2, c.Hidden(), d)
				for j := range z {
					z[j] += y[j]
				}
				x[t] = z
			}
		}
		for t := 0; t < T; t++ {
			hf := ln(x[t], p.LnfG, p.LnfB)
			logits := make([]float64, V)
			mx := math.Inf(-1)
			for v := range logits {
				for j := 0; j < d; j++ {
					logits[v] += hf[j] * float64(p.Wte[v*d+j])
				}
				mx = math.Max(mx, logits[v])
			}
			var z float64
			for _, l := range logits {
				z += math.Exp(l - mx)
			}
			total += math.Log(z) + mx - logits[b.Targets[s*T+t]]
		}
	}
	return total / float64(b.Size*b.Seq)
}
