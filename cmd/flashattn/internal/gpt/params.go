package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// TensorInfo locates one named parameter tensor in Params.Data.
type TensorInfo struct {
	Name   string
	Offset int
	Size   int
	Rows   int // rows × cols = Size; rows 1 for vectors
	Cols   int
	Decay  bool // AdamW applies weight decay (matrices and embeddings)
}

// Layer holds the parameters of one transformer block as views of
// Params.Data. Matrices are row-major [in, out].
type Layer struct {
	Ln1G, Ln1B []float32 // [Dim]
	Wqkv       []float32 // [Dim, 3·Dim]: columns are Q heads, K heads, V heads
	Bqkv       []float32 // [3·Dim]
	Wo, Bo     []float32 // [Dim, Dim], [Dim]
	Ln2G, Ln2B []float32 // [Dim]
	W1, B1     []float32 // [Dim, Hidden], [Hidden]
	W2, B2     []float32 // [Hidden, Dim], [Dim]
}

// Params is every parameter of a model (or, with the same layout, every
// gradient) in one contiguous slice, with named views into it.
type Params struct {
	Data       []float32
	Tensors    []TensorInfo
	Wte        []float32 // [Vocab, Dim] token embedding, also the output head
	Wpe        []float32 // [Context, Dim] position embedding
	Layers     []Layer
	LnfG, LnfB []float32 // [Dim] final LayerNorm
}

// layout lists the tensors of a model in storage order.
func layout(c Config) []TensorInfo {
	var ts []TensorInfo
	off := 0
	add := func(name string, rows, cols int, decay bool) {
		ts = append(ts, TensorInfo{Name: name, Offset: off, Size: rows * cols, Rows: rows, Cols: cols, Decay: decay})
		off += rows * cols
	}
	d, h := c.Dim, c.Hidden()
	add("wte", c.Vocab, d, true)
	add("wpe", c.Context, d, true)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("h%d.", l)
		add(p+"ln1.g", 1, d, false)
		add(p+"ln1.b", 1, d, false)
		add(p+"wqkv", d, 3*d, true)
		add(p+"bqkv", 1, 3*d, false)
		add(p+"wo", d, d, true)
		add(p+"bo", 1, d, false)
		add(p+"ln2.g", 1, d, false)
		add(p+"ln2.b", 1, d, false)
		add(p+"w1", d, h, true)
		add(p+"b1", 1, h, false)
		add(p+"w2", h, d, true)
		add(p+"b2", 1, d, false)
	}
	add("lnf.g", 1, d, false)
	add("lnf.b", 1, d, false)
	return ts
}

// NewParams returns zeroed parameters for c (c must be valid).
func NewParams(c Config) *Params {
	return paramsOver(c, make([]float32, c.NumParams()))
}

// paramsOver builds the named views of c's layout over data.
func paramsOver(c Config, data []float32) *Params {
	p := &Params{Data: data, Tensors: layout(c), Layers: make([]Layer, c.Layers)}
	i := 0
	next := func() []float32 {
		t := p.Tensors[i]
		i++
		return data[t.Offset : t.Offset+t.Size : t.Offset+t.Size]
	}
	p.Wte, p.Wpe = next(), next()
	for l := range p.Layers {
		L := &p.Layers[l]
		L.Ln1G, L.Ln1B, L.Wqkv, L.Bqkv, L.Wo, L.Bo = next(), next(), next(), next(), next(), next()
		L.Ln2G, L.Ln2B, L.W1, L.B1, L.W2, L.B2 = next(), next(), next(), next(), next(), next()
	}
	p.LnfG, p.LnfB = next(), next()
	return p
}

// initParams sets GPT-2's initialisation, deterministic in seed: weights
// and embeddings N(0, 0.02²), the two projections that write into the
// residual stream (wo, w2) N(0, (0.02/√(2·Layers))²), biases 0 and
// LayerNorm gains 1.
func initParams(p *Params, c Config, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6770742d696e6974)) // "gpt-init"
	proj := 0.02 / math.Sqrt(2*float64(c.Layers))
	normal := func(x []float32, std float64) {
		for i := range x {
			x[i] = float32(r.NormFloat64() * std)
		}
	}
	ones := func(x []float32) {
		for i := range x {
			x[i] = 1
		}
	}
	clear(p.Data)
	normal(p.Wte, 0.02)
	normal(p.Wpe, 0.02)
	for l := range p.Layers {
		L := &p.Layers[l]
		ones(L.Ln1G)
		ones(L.Ln2G)
		normal(L.Wqkv, 0.02)
		normal(L.Wo, proj)
		normal(L.W1, 0.02)
		normal(L.W2, proj)
	}
	ones(p.LnfG)
}
