package gpt

import (
	"fmt"
	"time"
)

// AttnShape is the shape of one attention call: Batch sequences of Seq
// tokens, Heads heads of HeadDim.
type AttnShape struct {
	Batch, Seq, Heads, HeadDim int
}

// qkvLen, outLen and lseLen are the lengths of the packed QKV projection
// [Batch, Seq, 3, Heads, HeadDim], of the output [Batch, Seq, Heads,
// HeadDim] and of the log-sum-exp [Batch, Heads, Seq].
func (s AttnShape) qkvLen() int { return 3 * s.outLen() }
func (s AttnShape) outLen() int { return s.Batch * s.Seq * s.Heads * s.HeadDim }
func (s AttnShape) lseLen() int { return s.Batch * s.Heads * s.Seq }

// Attention is causal multi-head self-attention on a packed QKV
// projection. The model calls Forward and then, for the same arguments,
// Backward; dropout (probability p) uses seed and must be the same mask in
// both.
type Attention interface {
	// Name is "flash" or "plain".
	Name() string
	// Forward writes the attention output into out ([Batch, Seq, Heads,
	// HeadDim]) and each row's log-sum-exp into lse ([Batch, Heads, Seq])
	// for the packed projection qkv ([Batch, Seq, 3, Heads, HeadDim]).
	Forward(out, lse, qkv []float32, s AttnShape, p float32, seed uint64) error
	// Backward writes the gradient of the loss with respect to qkv into
	// dqkv (same layout) given Forward's inputs and outputs and the
	// gradient dout with respect to out.
	Backward(dqkv, qkv, out, dout, lse []float32, s AttnShape, p float32, seed uint64) error
}

// NewAttention returns the attention named "flash" (flashattn) or "plain"
// (the standard algorithm, which materialises the Seq×Seq scores), running
// on the given number of workers (0: GOMAXPROCS).
func NewAttention(name string, workers int) (Attention, error) {
	switch name {
	case "flash":
		return Flash{Workers: workers}, nil
	case "plain":
		return &Plain{Workers: workers}, nil
	}
	return nil, fmt.Errorf("attention %q: want flash or plain", name)
}

// timedAttention wraps an Attention and adds the time its calls take to
// *total.
type timedAttention struct {
	Attention
	total *time.Duration
}

func (t timedAttention) Forward(out, lse, qkv []float32, s AttnShape, p float32, seed uint64) error {
	t0 := time.Now()
	err := t.Attention.Forward(out, lse, qkv, s, p, seed)
	*t.total += time.Since(t0)
	return err
}

func (t timedAttention) Backward(dqkv, qkv, out, dout, lse []float32, s AttnShape, p float32, seed uint64) error {
	t0 := time.Now()
	err := t.Attention.Backward(dqkv, qkv, out, dout, lse, s, p, seed)
	*t.total += time.Since(t0)
	return err
}
