package gpt

import "github.com/flashattn/flashattn"

// Flash is Attention computed by flashattn: Q, K and V are strided views of
// the packed projection (flashattn.PackedQKV), the output, the log-sum-exp
// and the packed gradient are written into the model's buffers
// (ForwardInto, BackwardInto), and dropout is flashattn's.
type Flash struct {
	Workers int // 0: GOMAXPROCS
}

// Name returns "flash".
func (Flash) Name() string { return "flash" }

func (f Flash) opts(p float32, seed uint64) *flashattn.Options {
	return &flashattn.Options{Causal: true, Dropout: p, Seed: seed, Workers: f.Workers}
}

// Forward implements Attention.
func (f Flash) Forward(out, lse, qkv []float32, s AttnShape, p float32, seed uint64) error {
	q, k, v := flashattn.PackedQKV(qkv[:s.qkvLen()], s.Batch, s.Seq, s.Heads, s.HeadDim)
	o := flashattn.Dense(out[:s.outLen()], s.Batch, s.Seq, s.Heads, s.HeadDim)
	return flashattn.ForwardInto(o, lse[:s.lseLen()], q, k, v, f.opts(p, seed))
}

// Backward implements Attention: dQ, dK and dV land in their places in the
// packed gradient.
func (f Flash) Backward(dqkv, qkv, out, dout, lse []float32, s AttnShape, p float32, seed uint64) error {
	q, k, v := flashattn.PackedQKV(qkv[:s.qkvLen()], s.Batch, s.Seq, s.Heads, s.HeadDim)
	dq, dk, dv := flashattn.PackedQKV(dqkv[:s.qkvLen()], s.Batch, s.Seq, s.Heads, s.HeadDim)
	o := flashattn.Dense(out[:s.outLen()], s.Batch, s.Seq, s.Heads, s.HeadDim)
	do := flashattn.Dense(dout[:s.outLen()], s.Batch, s.Seq, s.Heads, s.HeadDim)
	return flashattn.BackwardInto(dq, dk, dv, q, k, v, o, do, lse[:s.lseLen()], f.opts(p, seed))
}
