package gpt

import (
	"fmt"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/kernel"
)

// Decoder runs a model one token (or one chunk of tokens) at a time for a
// single sequence, keeping every block's keys and values in a KV cache so
// that earlier tokens are never recomputed. Attention reads the cache with
// flashattn's Options.KVCache: the decoder writes the new rows of K and V
// into the cache buffers itself and passes the number of valid rows.
type Decoder struct {
	m      *Model
	kc, vc [][]float32 // per block: [Context, Heads, HeadDim]
	n      int         // tokens in the cache

	// Buffers for up to Context rows.
	x, h, att, xmid []float32 // [rows, d]
	qkv             []float32 // [rows, 3d]
	u, g            []float32 // [rows, hidden]
	mean, rstd      []float32
	logits          []float32 // [Pad(vocab)]
	seqLens         []int32
}

// NewDecoder returns an empty decoder for m. It reads m's parameters when
// it runs, so it sees later updates to them.
func (m *Model) NewDecoder() *Decoder {
	c := m.Config
	n, d := c.Context, c.Dim
	f := func(k int) []float32 { return make([]float32, k) }
	dec := &Decoder{
		m:  m,
		kc: make([][]float32, c.Layers), vc: make([][]float32, c.Layers),
		x: f(n * d), h: f(n * d), att: f(n * d), xmid: f(n * d), qkv: f(3 * n * d),
		u: f(n * c.Hidden()), g: f(n * c.Hidden()), mean: f(n), rstd: f(n),
		logits: f(kernel.Pad(c.Vocab)), seqLens: make([]int32, 1),
	}
	for l := range dec.kc {
		dec.kc[l], dec.vc[l] = f(n*d), f(n*d)
	}
	return dec
}

// Len is the number of tokens in the cache.
func (d *Decoder) Len() int { return d.n }

// Reset empties the cache.
func (d *Decoder) Reset() { d.n = 0 }

// Append runs tokens through the model after the Len() tokens already in
// the cache, adds their keys and values to the cache, and returns the
// logits that follow the last of them (valid until the next call). The
// cache holds at most Config.Context tokens.
func (d *Decoder) Append(tokens []int32) ([]float32, error) {
	m, c := d.m, d.m.Config
	r, pos0 := len(tokens), d.n
	switch {
	case r == 0:
		return nil, fmt.Errorf("decoder: no tokens")
	case pos0+r > c.Context:
		return nil, fmt.Errorf("decoder: %d + %d tokens exceed the context of %d", pos0, r, c.Context)
	}
	for _, t := range tokens {
		if t < 0 || int(t) >= c.Vocab {
			return nil, fmt.Errorf("decoder: token %d outside the vocabulary [0, %d)", t, c.Vocab)
		}
	}
	e, p := m.eng, m.Params
	D, hd, H, hid := c.Dim, c.HeadDim(), c.Heads, c.Hidden()
	d.seqLens[0] = int32(pos0 + r)
	opts := &flashattn.Options{Causal: true, KVCache: &flashattn.KVCache{SeqLens: d.seqLens}}
	embed(e, d.x, p.Wte, p.Wpe, tokens, r, r, pos0, D)
	for l := range c.Layers {
		L := &p.Layers[l]
		layerNorm(e, d.h, d.mean, d.rstd, d.x, L.Ln1G, L.Ln1B, r, D)
		linear(e, d.qkv, d.h, L.Wqkv, L.Bqkv, nil, r, D, 3*D)
		for i := 0; i < r; i++ {
			row := d.qkv[i*3*D:]
			copy(d.kc[l][(pos0+i)*D:(pos0+i+1)*D], row[D:2*D])
			copy(d.vc[l][(pos0+i)*D:(pos0+i+1)*D], row[2*D:3*D])
		}
		q, _, _ := flashattn.PackedQKV(d.qkv[:3*r*D], 1, r, H, hd)
		k := flashattn.Dense(d.kc[l], 1, c.Context, H, hd)
		v := flashattn.Dense(d.vc[l], 1, c.Context, H, hd)
		if err := flashattn.ForwardInto(flashattn.Dense(d.att[:r*D], 1, r, H, hd), nil, q, k, v, opts); err != nil {
			return nil, fmt.Errorf("decoder: attention, layer %d: %w", l, err)
		}
		linear(e, d.xmid, d.att, L.Wo, L.Bo, d.x, r, D, D)
		layerNorm(e, d.h, d.mean, d.rstd, d.xmid, L.Ln2G, L.Ln2B, r, D)
		linear(e, d.u, d.h, L.W1, L.B1, nil, r, D, hid)
		gelu(e, &m.im, d.g, d.u, r*hid)
		linear(e, d.x, d.g, L.W2, L.B2, d.xmid, r, hid, D)
	}
	last := d.x[(r-1)*D : r*D]
	layerNorm(e, d.h, d.mean, d.rstd, last, p.LnfG, p.LnfB, 1, D)
	e.ABt(d.logits, c.Vocab, d.h, D, p.Wte, D, 1, c.Vocab, D, false)
	d.n += r
	return d.logits[:c.Vocab], nil
}
