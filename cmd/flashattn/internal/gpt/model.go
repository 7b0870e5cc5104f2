package gpt

import (
	"errors"
	"fmt"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"
	"github.com/flashattn/flashattn/internal/kernel"
)

// Model is a GPT: its configuration, parameters, gradients and the
// buffers of its passes. A Model is not safe for concurrent use.
type Model struct {
	Config Config
	Params *Params
	Grads  *Params // filled by Backward

	attn     Attention
	eng      *gemm.Engine
	im       kernel.Impl
	ws       map[[2]int]*workspace
	last     *workspace // of the last Forward
	lastSeed uint64     // dropout seed of the last Forward; 0 with dropout off
	lastDrop float32    // dropout of the last Forward
	lastLoss bool       // the last Forward computed a loss (logits hold its gradient)
	attnTime time.Duration
}

// New returns a model of configuration c with GPT-2's initialisation drawn
// from seed, computing attention with attn and its matrix products on the
// given number of workers (0: GOMAXPROCS).
func New(c Config, attn Attention, seed uint64, workers int) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := newModel(c, NewParams(c), attn, workers)
	initParams(m.Params, c, seed)
	return m, nil
}

func newModel(c Config, p *Params, attn Attention, workers int) *Model {
	return &Model{
		Config: c, Params: p, Grads: NewParams(c),
		attn: attn, eng: gemm.New(workers), im: kernel.Active().Impl, ws: map[[2]int]*workspace{},
	}
}

// AttentionTime is the total time spent in attention calls so far.
func (m *Model) AttentionTime() time.Duration { return m.attnTime }

// Kernel is the name of the microkernel implementation of the matrix
// products.
func (m *Model) Kernel() string { return m.eng.Kernel() }

// Batch is Size sequences of Seq tokens, row-major: Inputs[b·Seq + t] is
// token t of sequence b, and Targets (nil for no loss) the token that
// follows it.
type Batch struct {
	Inputs, Targets []int32
	Size, Seq       int
}

func (m *Model) checkBatch(b Batch) error {
	n := b.Size * b.Seq
	switch {
	case b.Size < 1 || b.Seq < 1:
		return fmt.Errorf("batch of %d sequences of %d tokens: both must be at least 1", b.Size, b.Seq)
	case b.Seq > m.Config.Context:
		return fmt.Errorf("sequence of %d tokens is longer than the model's context %d", b.Seq, m.Config.Context)
	case len(b.Inputs) != n:
		return fmt.Errorf("%d input tokens for %d×%d", len(b.Inputs), b.Size, b.Seq)
	case b.Targets != nil && len(b.Targets) != n:
		return fmt.Errorf("%d target tokens for %d×%d", len(b.Targets), b.Size, b.Seq)
	}
	for _, ts := range [][]int32{b.Inputs, b.Targets} {
		for _, t := range ts {
			if t < 0 || int(t) >= m.Config.Vocab {
				return fmt.Errorf("token %d outside the vocabulary [0, %d)", t, m.Config.Vocab)
			}
		}
	}
	return nil
}

// mixSeed derives a seed for purpose k (a block's dropout, the batches)
// from seed: SplitMix64 of the pair.
func mixSeed(seed uint64, k int) uint64 {
	z := seed + uint64(k+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Forward runs the model on b and returns the mean cross-entropy of its
// targets in nats (0 without targets). With train, attention dropout of
// Config.Dropout applies, its masks drawn from seed; Backward then
// computes the gradients of that loss. Without targets, Logits returns the
// output rows.
func (m *Model) Forward(b Batch, train bool, seed uint64) (float64, error) {
	if err := m.checkBatch(b); err != nil {
		return 0, err
	}
	c := m.Config
	key := [2]int{b.Size, b.Seq}
	w := m.ws[key]
	if w == nil {
		w = newWorkspace(c, b.Size, b.Seq)
		m.ws[key] = w
	}
	m.last, m.lastLoss, m.lastSeed, m.lastDrop = w, false, seed, 0
	if train {
		m.lastDrop = c.Dropout
	}
	copy(w.inputs, b.Inputs)
	n, d, h := b.Size*b.Seq, c.Dim, c.Hidden()
	e, p := m.eng, m.Params
	attn := timedAttention{m.attn, &m.attnTime}
	shape := AttnShape{Batch: b.Size, Seq: b.Seq, Heads: c.Heads, HeadDim: c.HeadDim()}

	embed(e, w.layers[0].x, p.Wte, p.Wpe, b.Inputs, n, b.Seq, 0, d)
	for l := range c.Layers {
		a, L := &w.layers[l], &p.Layers[l]
		layerNorm(e, a.h1, a.mean1, a.rstd1, a.x, L.Ln1G, L.Ln1B, n, d)
		linear(e, a.qkv, a.h1, L.Wqkv, L.Bqkv, nil, n, d, 3*d)
		if err := attn.Forward(a.att, a.lse, a.qkv, shape, m.lastDrop, mixSeed(seed, l)); err != nil {
			return 0, fmt.Errorf("attention, layer %d: %w", l, err)
		}
		linear(e, a.xmid, a.att, L.Wo, L.Bo, a.x, n, d, d)
		layerNorm(e, a.h2, a.mean2, a.rstd2, a.xmid, L.Ln2G, L.Ln2B, n, d)
		linear(e, a.u, a.h2, L.W1, L.B1, nil, n, d, h)
		gelu(e, &m.im, a.g, a.u, n*h)
		out := w.xf
		if l+1 < c.Layers {
			out = w.layers[l+1].x
		}
		linear(e, out, a.g, L.W2, L.B2, a.xmid, n, h, d)
	}
	layerNorm(e, w.hf, w.meanf, w.rstdf, w.xf, p.LnfG, p.LnfB, n, d)
	vp := kernel.Pad(c.Vocab)
	e.ABt(w.logits, vp, w.hf, d, p.Wte, d, n, c.Vocab, d, false)
	if b.Targets == nil {
		return 0, nil
	}
	m.lastLoss = true
	return crossEntropy(e, &m.im, w.logits, b.Targets, n, c.Vocab, w.losses), nil
}

// Logits returns row i (b·Seq + t) of the output of the last Forward, which
// must have had no targets: the unnormalised log-probabilities of the
// token after token t of sequence b. The slice is reused by the next
// Forward.
func (m *Model) Logits(i int) ([]float32, error) {
	w := m.last
	switch {
	case w == nil || m.lastLoss:
		return nil, errors.New("logits: the last Forward computed a loss (or there was none)")
	case i < 0 || i >= w.batch*w.seq:
		return nil, fmt.Errorf("logits: row %d out of range [0, %d)", i, w.batch*w.seq)
	}
	vp := kernel.Pad(m.Config.Vocab)
	return w.logits[i*vp : i*vp+m.Config.Vocab], nil
}

// Backward sets Grads to the gradient of the loss of the last Forward
// (which must have had targets) with respect to every parameter.
func (m *Model) Backward() error {
	w := m.last
	if w == nil || !m.lastLoss {
		return errors.New("backward: the last Forward computed no loss")
	}
	c := m.Config
	n, d, h := w.batch*w.seq, c.Dim, c.Hidden()
	e, p, g := m.eng, m.Params, m.Grads
	attn := timedAttention{m.attn, &m.attnTime}
	shape := AttnShape{Batch: w.batch, Seq: w.seq, Heads: c.Heads, HeadDim: c.HeadDim()}
	clear(g.Data)

	// Head (tied to wte) and final LayerNorm; w.logits holds dLoss/dlogits.
	vp := kernel.Pad(c.Vocab)
	e.AB(w.dh, d, w.logits, vp, p.Wte, d, n, d, c.Vocab, false)
	e.AtB(g.Wte, d, w.logits, vp, w.hf, d, c.Vocab, d, n, true)
	layerNormBackward(e, w.dx, g.LnfG, g.LnfB, w.dh, w.xf, w.meanf, w.rstdf, p.LnfG, n, d, false, w.lnScratch)

	for l := c.Layers - 1; l >= 0; l-- {
		a, L, G := &w.layers[l], &p.Layers[l], &g.Layers[l]
		// MLP: dx is the gradient of the block's output.
		linearBackward(e, w.du, G.W2, G.B2, a.g, L.W2, w.dx, n, h, d)
		geluBackward(e, &m.im, w.du, w.du, a.u, n*h)
		linearBackward(e, w.dh, G.W1, G.B1, a.h2, L.W1, w.du, n, d, h)
		layerNormBackward(e, w.dx, G.Ln2G, G.Ln2B, w.dh, a.xmid, a.mean2, a.rstd2, L.Ln2G, n, d, true, w.lnScratch)
		// Attention: dx is now the gradient of xmid.
		linearBackward(e, w.datt, G.Wo, G.Bo, a.att, L.Wo, w.dx, n, d, d)
		if err := attn.Backward(w.dqkv, a.qkv, a.att, w.datt, a.lse, shape, m.lastDrop, mixSeed(m.lastSeed, l)); err != nil {
			return fmt.Errorf("attention backward, layer %d: %w", l, err)
		}
		linearBackward(e, w.dh, G.Wqkv, G.Bqkv, a.h1, L.Wqkv, w.dqkv, n, d, 3*d)
		layerNormBackward(e, w.dx, G.Ln1G, G.Ln1B, w.dh, a.x, a.mean1, a.rstd1, L.Ln1G, n, d, true, w.lnScratch)
	}
	embedBackward(g.Wte, g.Wpe, w.dx, w.inputs, n, w.seq, d)
	return nil
}
