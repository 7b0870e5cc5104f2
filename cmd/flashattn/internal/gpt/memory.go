package gpt

import (
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/kernel"
)

// The estimates below follow this package's allocations, so that a
// command can refuse a run that cannot fit before allocating anything.
// They saturate (memlimit.Inf) when the sizes overflow. c must be valid.

// ParamsBytes is the size of one Params. A model holds two (parameters
// and gradients), and AdamW two more (its moments).
func (c Config) ParamsBytes() memlimit.Size { return memlimit.Mul(c.NumParams(), 4) }

// ActivationBytes is what Forward and Backward keep for batches of batch
// sequences of seq tokens (newWorkspace).
func (c Config) ActivationBytes(batch, seq int) memlimit.Size {
	d, h := c.Dim, c.Hidden()
	nd := memlimit.Mul(batch, seq, d, 4)
	nh := memlimit.Mul(batch, seq, h, 4)
	n := memlimit.Mul(batch, seq, 4)
	// Per block: x, h1, att, xmid, h2 and qkv (8·n·d), u and g (2·n·4d),
	// two means and two reciprocal deviations, and the LSE.
	layer := memlimit.Add(nd.Times(8), nh.Times(2), n.Times(4), memlimit.Mul(batch, c.Heads, seq, 4))
	return memlimit.Add(
		layer.Times(c.Layers),
		n,                       // the input tokens
		nd.Times(2), n.Times(2), // final LayerNorm
		memlimit.Mul(batch, seq, kernel.Pad(c.Vocab), 4), // logits
		n.Times(2),      // losses (float64)
		nd.Times(6), nh, // dx, dh, datt, dqkv, du
		nd.Times(2)/rowBlock, memlimit.Mul(2, d, 4), // LayerNorm scratch: 2·d per block of rows
	)
}

// DecoderBytes is what NewDecoder allocates: the KV cache of every block
// for Context tokens and the buffers of one chunk of up to Context rows.
func (c Config) DecoderBytes() memlimit.Size {
	cd := memlimit.Mul(c.Context, c.Dim, 4)
	return memlimit.Add(
		cd.Times(2).Times(c.Layers),               // K and V caches
		cd.Times(7),                               // x, h, att, xmid; qkv
		memlimit.Mul(2, c.Context, c.Hidden(), 4), // u, g
		memlimit.Mul(2, c.Context, 4),
		memlimit.Mul(kernel.Pad(c.Vocab), 4),
	)
}

// PlainBytes is what Plain keeps beside the plain algorithm's own
// buffers: dense copies of Q, K and V.
func (c Config) PlainBytes(batch, seq int) memlimit.Size {
	return memlimit.Mul(3, batch, seq, c.Dim, 4)
}

// GemmBytes bounds the matrix products' scratch: transposed copies of the
// largest weight (the token embedding or an MLP matrix) and the padded
// tiles of each worker.
func (c Config) GemmBytes(workers int) memlimit.Size {
	big := max(memlimit.Mul(c.Vocab, c.Dim, 4), memlimit.Mul(4, c.Dim, c.Dim, 4))
	return memlimit.Add(big.Times(2), memlimit.Mul(max(workers, 1), 256<<10))
}
