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
// V, so it copies them out of the packed projection (into buffers it
// keeps between calls); it has no dropout. A Plain is not safe for
// concurrent use.
type Plain struct {
	Workers int // 0: GOMAXPROCS

	q, k, v []float32 // dense copies of the packed projection
}

// Name returns "plain".
func (*Plain) Name() string { return "plain" }

func (pl *Plain) problem(s AttnShape) *plain.Problem {
	w := pl.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	return &plain.Problem{B: s.Batch, Sq: s.Seq, Sk: s.Seq, H: s.Heads, Hk: s.Heads, D: s.HeadDim, Causal: true, Workers: w}
}

// unpack copies Q, K and V out of the packed projection into dense
// [Batch, Seq, Heads, HeadDim] slices.
func (pl *Plain) unpack(qkv []float32, s AttnShape) (q, k, v []float32) {
	n, row := s.outLen(), s.Heads*s.HeadDim
	if cap(pl.q) < n {
		pl.q, pl.k, pl.v = make([]float32, n), make([]float32, n), make([]float32, n)
	}
	q, k, v = pl.q[:n], pl.k[:n], pl.v[:n]
	for t := 0; t < s.Batch*s.Seq; t++ {
		src := qkv[3*t*row:]
		copy(q[t*row:(t+1)*row], src[:row])
		copy(k[t*row:(t+1)*row], src[row:2*row])
		copy(v[t*row:(t+1)*row], src[2*row:3*row])
	}
	return q, k, v
}

// Forward implements Attention.
func (pl *Plain) Forward(out, lse, qkv []float32, s AttnShape, p float32, _ uint64) error {
	if p != 0 {
		return errPlainDropout
	}
	o, l := pl.problem(s).Forward(pl.unpack(qkv, s))
	copy(out, o)
	copy(lse, l)
	return nil
}

// Backward implements Attention.
func (pl *Plain) Backward(dqkv, qkv, out, dout, _ []float32, s AttnShape, p float32, _ uint64) error {
	if p != 0 {
		return errPlainDropout
	}
	n := s.outLen()
	q, k, v := pl.unpack(qkv, s)
	dq, dk, dv := pl.problem(s).Backward(q, k, v, out[:n], dout[:n])
	row := s.Heads * s.HeadDim
	for t := 0; t < s.Batch*s.Seq; t++ {
		for part, g := range [][]float32{dq, dk, dv} {
			copy(dqkv[(3*t+part)*row:(3*t+part+1)*row], g[t*row:])
		}
	}
	return nil
}
