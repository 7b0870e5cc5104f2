package gpt

import (
	"github.com/flashattn/flashattn/internal/gemm"
	"github.com/flashattn/flashattn/internal/kernel"
)

// GELU, tanh form (GPT-2): gelu(u) = ½·u·(1 + tanh(c·(u + a·u³))).
const (
	geluC = 0.7978845608028654 // √(2/π)
	geluA = 0.044715
)

// geluChunk is how many elements one vectorised exp covers.
const geluChunk = 256

// tanhChunk sets t[i] = tanh(c·(u[i] + a·u[i]³)) for len(u) ≤ geluChunk
// elements with the kernel's vectorised exp: tanh(z) = 1 − 2/(e^{2z} + 1).
func tanhChunk(im *kernel.Impl, t *[geluChunk]float32, u []float32) {
	n := kernel.Pad(len(u))
	z := t[:n]
	for i, v := range u {
		w := 2 * geluC * (v + geluA*v*v*v)
		z[i] = min(max(w, -80), 80) // tanh is ±1 in float32 long before
	}
	clear(z[len(u):])
	im.ExpSum(z, 1, 0)
	for i := range u {
		z[i] = 1 - 2/(z[i]+1)
	}
}

// gelu sets g = gelu(u) for n elements.
func gelu(e *gemm.Engine, im *kernel.Impl, g, u []float32, n int) {
	e.Parallel((n+geluChunk*rowBlock-1)/(geluChunk*rowBlock), func(b int) {
		var t [geluChunk]float32
		for i0 := b * geluChunk * rowBlock; i0 < min(n, (b+1)*geluChunk*rowBlock); i0 += geluChunk {
			i1 := min(n, i0+geluChunk)
			tanhChunk(im, &t, u[i0:i1])
			for i, v := range u[i0:i1] {
				g[i0+i] = 0.5 * v * (1 + t[i])
			}
		}
	})
}

// geluBackward sets du = dg·gelu'(u) for n elements (du may alias dg).
func geluBackward(e *gemm.Engine, im *kernel.Impl, du, dg, u []float32, n int) {
	e.Parallel((n+geluChunk*rowBlock-1)/(geluChunk*rowBlock), func(b int) {
		var t [geluChunk]float32
		for i0 := b * geluChunk * rowBlock; i0 < min(n, (b+1)*geluChunk*rowBlock); i0 += geluChunk {
			i1 := min(n, i0+geluChunk)
			tanhChunk(im, &t, u[i0:i1])
			for i, v := range u[i0:i1] {
				th := t[i]
				d := 0.5*(1+th) + 0.5*v*(1-th*th)*geluC*(1+3*geluA*v*v)
				du[i0+i] = dg[i0+i] * d
			}
		}
	})
}
