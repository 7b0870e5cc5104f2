package gpt

import (
	"errors"
	"runtime"

	"github.com/flashattn/flashattn/internal/plain"
)

// errPlainDropout is returned when plain attention is asked for dropout,
// which the plain algorithm does not implement.
var errPlainDropout = errors.New("plain attention has no dropout: use dropout 0 (-dropout 0)")

// Plain is Attention computed by the standard algorithm (package plain):
// for each head it materialises the Seq×Seq scores and probabilities, in
// the forward pass and again in the backward pass. It needs dense Q, K and
// V, so it copies them out of the packed projection; it has no dropout.
type Plain struct {
	Workers int // 0: GOMAXPROCS
}

// Name returns "plain".
func (Plain) Name() string { return "plain" }

func (pl Plain) problem(s AttnShape) *plain.Problem {
	w := pl.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	return &plain.Problem{B: s.Batch, Sq: s.Seq, Sk: s.Seq, H: s.Heads, Hk: s.Heads, D: s.HeadDim, Causal: true, Workers: w}
}

// unpack copies part (0: Q, 1: K, 2: V) of the packed projection into a
// dense [Batch, Seq, Heads, HeadDim] slice.
func unpack(qkv []float32, s AttnShape, part int) []float32 {
	row := s.Heads * s.HeadDim
	dst := make([]float32, s.outLen())
	for t := 0; t < s.Batch*s.Seq; t++ {
		copy(dst[t*row:(t+1)*row], qkv[(3*t+part)*row:])
	}
	return dst
}

// Forward implements Attention.
func (pl Plain) Forward(out, lse, qkv []float32, s AttnShape, p float32, _ uint64) error {
	if p != 0 {
		return errPlainDropout
	}
	o, l := pl.problem(s).Forward(unpack(qkv, s, 0), unpack(qkv, s, 1), unpack(qkv, s, 2))
	copy(out, o)
	copy(lse, l)
	return nil
}

// Backward implements Attention.
func (pl Plain) Backward(dqkv, qkv, out, dout, _ []float32, s AttnShape, p float32, _ uint64) error {
	if p != 0 {
		return errPlainDropout
	}
	n := s.outLen()
	dq, dk, dv := pl.problem(s).Backward(unpack(qkv, s, 0), unpack(qkv, s, 1), unpack(qkv, s, 2), out[:n], dout[:n])
	row := s.Heads * s.HeadDim
	for t := 0; t < s.Batch*s.Seq; t++ {
		for part, g := range [][]float32{dq, dk, dv} {
			copy(dqkv[(3*t+part)*row:(3*t+part+1)*row], g[t*row:])
		}
	}
	return nil
}
