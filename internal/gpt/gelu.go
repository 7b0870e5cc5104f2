package gpt

import (
	"github.com/flashattn/flashattn/internal/gemm"
	"github.com/flashattn/flashattn/internal/kernel"
)

// GELU, tanh form (GPT-2): gelu(u) = ½·u·(1 + tanh(c·(u + a·u³))), computed
// as u·σ(2c·(u + a·u³)) since ½·(1 + tanh z) = σ(2z).
const (
	geluC = 0.7978845608028654 // √(2/π)
	geluA = 0.044715
)

// geluChunk is how many elements one vectorised exp covers.
const geluChunk = 256

// sigmoidChunk sets s[i] = σ(2c·(u[i] + a·u[i]³)) = 1/(1 + e^{−2c·(…)}) for
// len(u) ≤ geluChunk elements with the kernel's vectorised exp.
func sigmoidChunk(im *kernel.Impl, s *[geluChunk]float32, u []float32) {
	n := kernel.Pad(len(u))
	z := s[:n]
	for i, v := range u {
		// ExpSum gives 0 below about −87 and +Inf above about 88, so σ
		// saturates to 1 and 0 without a clamp.
		z[i] = -2 * geluC * (v + geluA*v*v*v)
	}
	clear(z[len(u):])
	im.ExpSum(z, 1, 0)
	for i := range u {
		z[i] = 1 / (1 + z[i])
	}
}

// gelu sets g = gelu(u) for n elements.
func gelu(e *gemm.Engine, im *kernel.Impl, g, u []float32, n int) {
	e.Parallel((n+geluChunk*rowBlock-1)/(geluChunk*rowBlock), func(b int) {
		var s [geluChunk]float32
		for i0 := b * geluChunk * rowBlock; i0 < min(n, (b+1)*geluChunk*rowBlock); i0 += geluChunk {
			i1 := min(n, i0+geluChunk)
			sigmoidChunk(im, &s, u[i0:i1])
			gs := g[i0:i1]
			for i, v := range u[i0:i1] {
				gs[i] = v * s[i]
			}
		}
	})
}

// geluBackward sets du = dg·gelu'(u) for n elements (du may alias dg):
// gelu'(u) = σ + 2u·σ(1 − σ)·c·(1 + 3a·u²).
func geluBackward(e *gemm.Engine, im *kernel.Impl, du, dg, u []float32, n int) {
	e.Parallel((n+geluChunk*rowBlock-1)/(geluChunk*rowBlock), func(b int) {
		var s [geluChunk]float32
		for i0 := b * geluChunk * rowBlock; i0 < min(n, (b+1)*geluChunk*rowBlock); i0 += geluChunk {
			i1 := min(n, i0+geluChunk)
			sigmoidChunk(im, &s, u[i0:i1])
			dus, dgs := du[i0:i1], dg[i0:i1]
			for i, v := range u[i0:i1] {
				si := s[i]
				dus[i] = dgs[i] * (si + 2*v*si*(1-si)*geluC*(1+3*geluA*v*v))
			}
		}
	})
}
