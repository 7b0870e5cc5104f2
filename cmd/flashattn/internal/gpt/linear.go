package gpt

import "github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"

// linear sets y = x·w + b (n rows, din → dout; w is [din, dout]); with res
// not nil it adds the residual: y = res + x·w + b (y may alias res).
func linear(e *gemm.Engine, y, x, w, b, res []float32, n, din, dout int) {
	for i := 0; i < n; i++ {
		yr := y[i*dout : (i+1)*dout]
		if res != nil {
			rr := res[i*dout : (i+1)*dout]
			for j := range yr {
				yr[j] = rr[j] + b[j]
			}
		} else {
			copy(yr, b)
		}
	}
	e.AB(y, dout, x, din, w, dout, n, dout, din, true)
}

// linearBackward adds xᵀ·dy to dw and the column sums of dy to db, and
// sets dx = dy·wᵀ unless dx is nil.
func linearBackward(e *gemm.Engine, dx, dw, db, x, w, dy []float32, n, din, dout int) {
	e.AtB(dw, dout, x, din, dy, dout, din, dout, n, true)
	for i := 0; i < n; i++ {
		for j, v := range dy[i*dout : (i+1)*dout] {
			db[j] += v
		}
	}
	if dx != nil {
		e.ABt(dx, din, dy, dout, w, dout, n, din, dout, false)
	}
}
