package gpt

import "github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"

// embed sets row i of x to wte[tokens[i]] + wpe[pos0 + i%seq] for n rows
// of width d.
func embed(e *gemm.Engine, x, wte, wpe []float32, tokens []int32, n, seq, pos0, d int) {
	e.Parallel(rowBlocks(n), func(t int) {
		for i := t * rowBlock; i < min(n, (t+1)*rowBlock); i++ {
			xr := x[i*d : (i+1)*d]
			tr := wte[int(tokens[i])*d:][:d]
			pr := wpe[(pos0+i%seq)*d:][:d]
			for j := range xr {
				xr[j] = tr[j] + pr[j]
			}
		}
	})
}

// embedBackward adds row i of dx to the gradients of the token and the
// position it came from, in row order (rows that share a token add up in
// a fixed order).
func embedBackward(dwte, dwpe, dx []float32, tokens []int32, n, seq, d int) {
	for i := 0; i < n; i++ {
		g := dx[i*d : (i+1)*d]
		tr := dwte[int(tokens[i])*d:][:d]
		pr := dwpe[(i%seq)*d:][:d]
		for j, v := range g {
			tr[j] += v
			pr[j] += v
		}
	}
}
