package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// A ScoreMod rewrites attention scores before the softmax (FlexAttention's
// score_mod), and supplies the derivative the backward pass needs. flashattn
// calls it one row of a tile at a time, after Scale, Softcap and ALiBi and
// before the masks, on the rows and keys that are computed (never on empty
// tiles).
//
// Positions count from the start of each sequence; b is the batch element
// (the sequence with VarLen) and h the query head. Implementations must be
// pure functions of their arguments and safe for concurrent use: the
// backward pass evaluates the same rows again.
type ScoreMod interface {
	// Apply sets x[c] = f(x[c]) for the scores of query row q of (b, h)
	// against keys kv0+c. If dx is not nil it also sets dx[c] = f′ at the
	// score before the change, ∂f/∂x (the backward pass multiplies the
	// gradient by it).
	Apply(b, h, q, kv0 int, x, dx []float32)
}

// ScoreFunc adapts a function of one score to a ScoreMod: it returns the new
// score y = f(x) and the derivative dy = f′(x). It is called once per score
// of the computed tiles; a ScoreMod that handles a run of keys at once is
// faster.
type ScoreFunc func(b, h, q, kv int, x float32) (y, dy float32)

// Apply implements ScoreMod.
func (f ScoreFunc) Apply(b, h, q, kv0 int, x, dx []float32) {
	for c, v := range x {
		y, d := f(b, h, q, kv0+c, v)
		x[c] = y
		if dx != nil {
			dx[c] = d
		}
	}
}

// scoreMods is the chain of score modifiers of a call, applied in this
// order to a tile row of scaled products Scale·Q·Kᵀ: softcap, ALiBi, the
// caller's ScoreMod. The backward pass gets the product of their
// derivatives (the chain rule), ALiBi's being 1.
type scoreMods struct {
	softcap    float32
	alibi      []float32 // [H] or [B*H] slopes; nil for none
	alibiBatch bool
	heads      int
	user       ScoreMod
}

// active reports whether any modifier is set.
func (m *scoreMods) active() bool { return m.softcap > 0 || m.alibi != nil || m.user != nil }

// curved reports whether the chain has a derivative other than 1.
func (m *scoreMods) curved() bool { return m.softcap > 0 || m.user != nil }

// slope returns the ALiBi slope of (sequence b, head h).
func (m *scoreMods) slope(b, h int) float32 {
	if m.alibiBatch {
		return m.alibi[b*m.heads+h]
	}
	return m.alibi[h]
}

// scoreAt is where a score row sits: query row i of head h of sequence s
// against keys j0, j0+1, ... (n real entries), in a tile of the given kind.
type scoreAt struct {
	s        *sequence
	h, i, j0 int
	n        int
	kind     BlockKind
}

// apply rewrites row (the score row at: n real entries, then padding up
// to a multiple of kernel.W that the caller masks afterwards). If grad is
// not nil (it is then as long as row) it receives the chain's derivative
// for the n real entries; du is scratch of n entries for the caller's
// ScoreMod.
func (m *scoreMods) apply(kern *kernel.Impl, row, grad, du []float32, at scoreAt) {
	if m.softcap > 0 {
		kern.Softcap(row, grad, m.softcap) // grad = 1 − tanh²
	}
	if m.alibi != nil {
		// −slope·|i + Sk − Sq − j|, over the padded row.
		kern.ALiBi(row, m.slope(at.s.b, at.h), float32(at.i+at.s.band.off-at.j0))
	}
	if m.user == nil {
		return
	}
	var d []float32
	if grad != nil {
		d = du[:at.n]
	}
	m.user.Apply(at.s.b, at.h, at.i+at.s.qpos, at.j0+at.s.kpos, row[:at.n], d)
	switch {
	case grad == nil:
	case m.softcap > 0:
		for c, x := range d {
			grad[c] *= x
		}
	default:
		copy(grad, d)
	}
}

// scoreRow turns a row of a product tile, raw dot products Q[i]·K[j] for
// the score row at (n real entries, then padding up to a multiple of
// kernel.W), into its scores, up to the scale: it applies the modifiers
// (after scaling the row, as they see the scaled score), hides what a
// partial tile's mask hides, sets the padding to −Inf, and returns the
// factor still to apply, which the exponential then takes in the same
// rounding (exp(f·x − c), one fused step): the softmax scale when no
// modifier is set, else 1. grad is as for apply; rs is the worker's row
// scratch.
func (p *plan) scoreRow(rs *rowScratch, row, grad []float32, at *scoreAt) (factor float32) {
	factor = p.scale
	if p.mods.active() {
		p.kern.Scale(row, p.scale)
		p.mods.apply(&p.kern, row, grad, rs.du, *at)
		factor = 1
	}
	if at.kind == BlockPartial {
		at.s.vis.hide(at.h, at.i, at.j0, row[:at.n], rs.keep)
	}
	for c := at.n; c < len(row); c++ {
		row[c] = negInf
	}
	return factor
}
