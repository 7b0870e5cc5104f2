package gpt

import (
	"math"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"
)

// lnEps is LayerNorm's ε (GPT-2's).
const lnEps = 1e-5

// rowBlock is the number of rows one parallel task of an elementwise layer
// handles. Block boundaries do not depend on the worker count, so sums
// reduced block by block are bit-identical for any number of workers.
const rowBlock = 32

func rowBlocks(n int) int { return (n + rowBlock - 1) / rowBlock }

// layerNorm sets y = g·(x − mean)/√(var + ε) + b row by row for n rows of
// width d and records each row's mean and 1/√(var + ε).
func layerNorm(e *gemm.Engine, y, mean, rstd, x, g, b []float32, n, d int) {
	e.Parallel(rowBlocks(n), func(t int) {
		for i := t * rowBlock; i < min(n, (t+1)*rowBlock); i++ {
			xr, yr := x[i*d:(i+1)*d], y[i*d:(i+1)*d]
			var s float32
			for _, v := range xr {
				s += v
			}
			mu := s / float32(d)
			var ss float32
			for _, v := range xr {
				ss += (v - mu) * (v - mu)
			}
			r := float32(1 / math.Sqrt(float64(ss/float32(d))+lnEps))
			mean[i], rstd[i] = mu, r
			for j, v := range xr {
				yr[j] = (v-mu)*r*g[j] + b[j]
			}
		}
	})
}

// layerNormBackward adds to dx the gradient through LayerNorm of dy (if
// acc; else it sets dx), and adds the gains' and biases' gradients to dg
// and db. scratch holds 2·d·rowBlocks(n) floats.
func layerNormBackward(e *gemm.Engine, dx, dg, db, dy, x, mean, rstd, g []float32, n, d int, acc bool, scratch []float32) {
	nb := rowBlocks(n)
	part := scratch[:2*d*nb]
	clear(part)
	e.Parallel(nb, func(t int) {
		pg, pb := part[2*d*t:2*d*t+d], part[2*d*t+d:2*d*(t+1)]
		for i := t * rowBlock; i < min(n, (t+1)*rowBlock); i++ {
			xr, dyr, dxr := x[i*d:(i+1)*d], dy[i*d:(i+1)*d], dx[i*d:(i+1)*d]
			mu, r := mean[i], rstd[i]
			// dxhat = dy·g; dx = r·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat)).
			var s1, s2 float32
			for j, v := range xr {
				xh := (v - mu) * r
				dxh := dyr[j] * g[j]
				s1 += dxh
				s2 += dxh * xh
				pg[j] += dyr[j] * xh
				pb[j] += dyr[j]
			}
			s1 /= float32(d)
			s2 /= float32(d)
			for j, v := range xr {
				xh := (v - mu) * r
				v := r * (dyr[j]*g[j] - s1 - xh*s2)
				if acc {
					dxr[j] += v
				} else {
					dxr[j] = v
				}
			}
		}
	})
	for t := 0; t < nb; t++ {
		for j := 0; j < d; j++ {
			dg[j] += part[2*d*t+j]
			db[j] += part[2*d*t+d+j]
		}
	}
}
