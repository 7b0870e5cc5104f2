// Package gpt is a small decoder-only transformer (GPT-2's architecture)
// trained on the CPU with flashattn as its attention: token and position
// embeddings, pre-LayerNorm blocks of causal multi-head attention and a
// GELU MLP with residual connections, a final LayerNorm and an output head
// tied to the token embedding, trained with cross-entropy and AdamW. The
// forward and backward passes are written by hand; the matrix products run
// on package gemm and the attention on flashattn (or on the plain
// algorithm, for comparison) through the Attention interface.
//
// The model is the proof that flashattn's public API suffices for training:
// Q, K and V are views of one packed projection, outputs and gradients go
// into buffers the model owns (ForwardInto/BackwardInto), attention dropout
// comes from flashattn's counter-based generator, and decoding reads a KV
// cache through Options.KVCache.
package gpt

import "fmt"

// Config is a model's architecture.
type Config struct {
	Vocab   int     `json:"vocab"`   // token count (256 for bytes)
	Context int     `json:"context"` // longest sequence: rows of the position embedding
	Layers  int     `json:"layers"`  // transformer blocks
	Heads   int     `json:"heads"`   // attention heads per block
	Dim     int     `json:"dim"`     // model width; a multiple of Heads
	Dropout float32 `json:"dropout"` // attention dropout while training, in [0, 1)
}

// DefaultConfig is the model `flashattn train` trains by default: 4 blocks
// of width 128 with 4 heads of 32 over 128 bytes of context (0.86 M
// parameters).
func DefaultConfig() Config {
	return Config{Vocab: 256, Context: 128, Layers: 4, Heads: 4, Dim: 128}
}

// Limits that keep a configuration (and a checkpoint read from disk) within
// what fits in memory and in int32 token ids.
const (
	maxVocab   = 1 << 20
	maxContext = 1 << 20
	maxLayers  = 1 << 10
	maxDim     = 1 << 14
	maxParams  = 1 << 28 // 1 GiB of float32
)

// Validate reports whether c describes a model this package can build.
func (c Config) Validate() error {
	switch {
	case c.Vocab < 2 || c.Vocab > maxVocab:
		return fmt.Errorf("vocab %d out of range [2, %d]", c.Vocab, maxVocab)
	case c.Context < 1 || c.Context > maxContext:
		return fmt.Errorf("context %d out of range [1, %d]", c.Context, maxContext)
	case c.Layers < 1 || c.Layers > maxLayers:
		return fmt.Errorf("layers %d out of range [1, %d]", c.Layers, maxLayers)
	case c.Dim < 1 || c.Dim > maxDim:
		return fmt.Errorf("dim %d out of range [1, %d]", c.Dim, maxDim)
	case c.Heads < 1 || c.Dim%c.Heads != 0:
		return fmt.Errorf("heads %d must be at least 1 and divide dim %d", c.Heads, c.Dim)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("dropout %v out of range [0, 1)", c.Dropout)
	}
	// The parameter count in 64 bits (int may have 32): per block 12·d²
	// weights and 13·d biases and gains.
	d := int64(c.Dim)
	if n := (int64(c.Vocab)+int64(c.Context)+2)*d + int64(c.Layers)*(12*d*d+13*d); n > maxParams {
		return fmt.Errorf("%d parameters: more than %d", n, maxParams)
	}
	return nil
}

// HeadDim is the width of one attention head.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Hidden is the width of the MLP's hidden layer (4·Dim).
func (c Config) Hidden() int { return 4 * c.Dim }

// NumParams is the number of trainable parameters.
func (c Config) NumParams() int {
	n := 0
	for _, t := range layout(c) {
		n += t.Size
	}
	return n
}

// String describes c on one line.
func (c Config) String() string {
	return fmt.Sprintf("%d layers, %d heads × %d, width %d, context %d, vocab %d, %.2f M parameters",
		c.Layers, c.Heads, c.HeadDim(), c.Dim, c.Context, c.Vocab, float64(c.NumParams())/1e6)
}
