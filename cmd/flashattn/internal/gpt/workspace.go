package gpt

import "github.com/flashattn/flashattn/internal/kernel"

// layerActs are the activations of one block that its backward pass reads.
type layerActs struct {
	x            []float32 // [n, d] the block's input (residual stream)
	h1           []float32 // [n, d] LayerNorm 1
	mean1, rstd1 []float32 // [n]
	qkv          []float32 // [n, 3d] packed Q, K, V
	att          []float32 // [n, d] attention output
	lse          []float32 // [batch·heads·seq]
	xmid         []float32 // [n, d] x + attention projection
	h2           []float32 // [n, d] LayerNorm 2
	mean2, rstd2 []float32 // [n]
	u, g         []float32 // [n, hidden] before and after GELU
}

// workspace holds the activations of a forward pass over batch sequences
// of seq tokens and the buffers of its backward pass.
type workspace struct {
	batch, seq int
	inputs     []int32 // [n] copy of the batch's input tokens
	layers     []layerActs
	xf         []float32 // [n, d] output of the last block
	hf         []float32 // [n, d] final LayerNorm
	meanf      []float32
	rstdf      []float32
	logits     []float32 // [n, Pad(vocab)]; the loss gradient after a loss
	losses     []float64 // [n]

	// Backward.
	dx, dh, datt []float32 // [n, d]
	dqkv         []float32 // [n, 3d]
	du           []float32 // [n, hidden]
	lnScratch    []float32 // 2·d·rowBlocks(n)
}

func newWorkspace(c Config, batch, seq int) *workspace {
	n, d, h := batch*seq, c.Dim, c.Hidden()
	f := func(k int) []float32 { return make([]float32, k) }
	w := &workspace{batch: batch, seq: seq, inputs: make([]int32, n), layers: make([]layerActs, c.Layers)}
	for l := range w.layers {
		w.layers[l] = layerActs{
			x: f(n * d), h1: f(n * d), mean1: f(n), rstd1: f(n),
			qkv: f(3 * n * d), att: f(n * d), lse: f(batch * c.Heads * seq),
			xmid: f(n * d), h2: f(n * d), mean2: f(n), rstd2: f(n),
			u: f(n * h), g: f(n * h),
		}
	}
	w.xf, w.hf, w.meanf, w.rstdf = f(n*d), f(n*d), f(n), f(n)
	w.logits = f(n * kernel.Pad(c.Vocab))
	w.losses = make([]float64, n)
	w.dx, w.dh, w.datt, w.dqkv, w.du = f(n*d), f(n*d), f(n*d), f(3*n*d), f(n*h)
	w.lnScratch = f(2 * d * rowBlocks(n))
	return w
}
