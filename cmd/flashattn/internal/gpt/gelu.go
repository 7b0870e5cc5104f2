package gpt

import (
	"github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"
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

// sigmoidChunks computes the σ of sigmoidChunk for u[:n] chunk by chunk,
// in parallel, and passes each chunk's values to f with the index of its
// first element.
func sigmoidChunks(e *gemm.Engine, im *kernel.Impl, u []float32, n int, f func(i0 int, s []float32)) {
	const block = geluChunk * rowBlock // elements per parallel task
	e.Parallel((n+block-1)/block, func(b int) {
		var s [geluChunk]float32
		for i0 := b * block; i0 < min(n, (b+1)*block); i0 += geluChunk {
			i1 := min(n, i0+geluChunk)
			sigmoidChunk(im, &s, u[i0:i1])
			f(i0, s[:i1-i0])
		}
	})
}

// gelu sets g = gelu(u) for n elements.
func gelu(e *gemm.Engine, im *kernel.Impl, g, u []float32, n int) {
	sigmoidChunks(e, im, u, n, func(i0 int, s []float32) {
		gs, us := g[i0:i0+len(s)], u[i0:i0+len(s)]
		for i, si := range s {
			gs[i] = us[i] * si
		}
	})
}

// geluBackward sets du = dg·gelu'(u) for n elements (du may alias dg):
// gelu'(u) = σ + 2u·σ(1 − σ)·c·(1 + 3a·u²).
func geluBackward(e *gemm.Engine, im *kernel.Impl, du, dg, u []float32, n int) {
	sigmoidChunks(e, im, u, n, func(i0 int, s []float32) {
		dus, dgs, us := du[i0:i0+len(s)], dg[i0:i0+len(s)], u[i0:i0+len(s)]
		for i, si := range s {
			v := us[i]
			dus[i] = dgs[i] * (si + 2*v*si*(1-si)*geluC*(1+3*geluA*v*v))
		}
	})
}
