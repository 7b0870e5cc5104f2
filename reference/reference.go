// Package reference is the plain attention algorithm of the flashattn
// contract: it materialises the score matrix, applies a softmax and multiplies
// by V, in float64 or float32 arithmetic. It is meant as a test oracle for
// users and for flashattn's own tests, not for speed.
//
// What is computed (for batch b, query head h, query row i, key j):
//
//	x[i,j]  = scale * dot(Q[i], K[j])
//	x[i,j]  = softcap * tanh(x[i,j] / softcap)       if Softcap > 0
//	x[i,j] += -slope[b,h] * |i + Sk - Sq - j|        if ALiBi != nil
//	x[i,j]  = ScoreMod(b, h, i, j, x[i,j])            if ScoreMod != nil
//	x[i,j]  = -Inf where !Visible(p, i, j) or !Mask(b, h, i, j)
//	LSE[i]  = log(sum_j exp(x[i,j]))
//	P[i,j]  = exp(x[i,j] - LSE[i])
//	O[i]    = sum_j P[i,j] * z[i,j] / (1-Dropout) * V[j]
//
// where z[i,j] is 1 if dropout.NewMask(Seed, float32(Dropout)).Keep(b +
// DropoutBatch, h, i, j) and 0 otherwise (z = 1 when Dropout = 0). LSE is
// computed before dropout, as in flash-attn. Query head h reads KV head h /
// (Heads / KVHeads). Rows with no visible key give O = 0, LSE = -Inf and zero
// gradients, without NaN.
//
// Layout (dense, row-major): Q and O are [Batch, SeqQ, Heads, HeadDim]; K, V,
// dK and dV are [Batch, SeqK, KVHeads, HeadDim]; LSE is [Batch, Heads, SeqQ].
//
// ForwardHalf and BackwardHalf are the same-type plain algorithm of bfloat16
// and fp16 (inputs in the type, probabilities and score gradients rounded to
// it before they multiply, float32 accumulation, outputs rounded to it, LSE
// float32), and CheckHalf the matching error rule.
//
// Because this package is an oracle, invalid arguments (slice lengths that do
// not match the shape, Heads not a multiple of KVHeads, negative sizes, a
// dropout probability outside [0, 1), a negative softcap, an ALiBi slice of
// the wrong length, an unknown Precision) make the functions panic with a
// message starting with "reference:".
package reference

import (
	"fmt"
	"math"

	"github.com/flashattn/flashattn/internal/dropout"
	"github.com/flashattn/flashattn/internal/kernel"
)

// Params describes one attention call.
type Params struct {
	Batch, SeqQ, SeqK, Heads, KVHeads, HeadDim int
	// HeadDimV is V's (and O's) head dim; 0 means HeadDim.
	HeadDimV int

	// Scale multiplies the raw dot products; 0 means 1/sqrt(HeadDim).
	Scale float64
	// Causal hides key j from query row i unless j <= i + SeqK - SeqQ
	// (j <= i with TopLeft).
	Causal bool
	// TopLeft aligns the causal mask, the window and ALiBi's distances to
	// the top-left corner: row i sits at position i instead of
	// i + SeqK - SeqQ.
	TopLeft bool
	// Sinks, if not nil, holds one learnable sink logit per query head:
	// each row's softmax also sums exp(Sinks[h]), an extra "key" whose value
	// is zero.
	Sinks []float64
	// Window enables the sliding window (WindowLeft, WindowRight); a negative
	// value (conventionally -1) leaves that side unbounded.
	Window                  bool
	WindowLeft, WindowRight int
	// Softcap, if > 0, replaces each score x by Softcap*tanh(x/Softcap).
	Softcap float64
	// ALiBi holds the slopes: nil (off), [Heads] (shared by all batch
	// elements) or [Batch*Heads] (index b*Heads+h).
	ALiBi []float64
	// Dropout is the drop probability p in [0, 1); 0 disables dropout.
	Dropout float64
	// Seed is the dropout seed, see internal/dropout.
	Seed uint64
	// DropoutBatch is added to the batch index the dropout mask sees:
	// batch element b draws the mask of b + DropoutBatch. It lets one
	// sequence of a flashattn VarLen call (whose mask is that of its index
	// in the batch) be checked alone, as batch element 0.
	DropoutBatch int
	// Mask, if not nil, also hides key j from query row i of (batch b,
	// head h) where it returns false: a block mask or element mask
	// expanded to the dense boolean mask it stands for.
	Mask func(b, h, i, j int) bool
	// ScoreMod, if not nil, maps each score after Softcap and ALiBi and
	// before the masks, returning the new score and its derivative.
	ScoreMod func(b, h, i, j int, x float64) (y, dy float64)
	// FusedScores makes the float32 functions (Forward32, Backward32, …)
	// sum the dot products q·k of the scores, and dO·v of the backward's
	// dP, as chains of fused multiply-adds, s = fma(x[d], y[d], s) from
	// zero in the order of d, rounded once per step, instead of rounding
	// each product before adding it: the baseline of a kernel that
	// computes those products with fused multiply-adds (SPEC §4; in
	// flashattn the assembly kernels of amd64 and arm64,
	// internal/kernel.Impl.FusedScores; the pure-Go ones do not). The
	// float64 functions compute the same with math.FMA. With the 16-bit
	// functions it changes nothing: the products of bfloat16 and fp16
	// values are exact in float32.
	FusedScores bool
}

// Visible reports whether key j is visible from query row i under the causal
// and sliding-window masks of p (bottom-right aligned: row i sits at absolute
// position i + SeqK - SeqQ). With both Causal and Window set the key must pass
// both. It does not check that i and j are in range.
func Visible(p Params, i, j int) bool {
	pos := i + p.diag()
	if p.Causal && j > pos {
		return false
	}
	if p.Window {
		// Differences of positions, so that huge window sizes cannot overflow.
		if p.WindowLeft >= 0 && pos-j > p.WindowLeft {
			return false
		}
		if p.WindowRight >= 0 && j-pos > p.WindowRight {
			return false
		}
	}
	return true
}

// diag is the offset of row i's own position: SeqK − SeqQ (bottom-right
// alignment) or 0 (TopLeft).
func (p Params) diag() int {
	if p.TopLeft {
		return 0
	}
	return p.SeqK - p.SeqQ
}

// dimV is V's head dim.
func (p Params) dimV() int {
	if p.HeadDimV > 0 {
		return p.HeadDimV
	}
	return p.HeadDim
}

// scale returns the effective score scale.
func (p Params) scale() float64 {
	if p.Scale != 0 {
		return p.Scale
	}
	return 1 / math.Sqrt(float64(p.HeadDim))
}

// slope returns the ALiBi slope of (b, h); only valid when ALiBi != nil.
func (p Params) slope(b, h int) float64 {
	if len(p.ALiBi) == p.Heads {
		return p.ALiBi[h]
	}
	return p.ALiBi[b*p.Heads+h]
}

func (p Params) validate(nq, nk, nv int, extra ...int) {
	if p.Batch < 0 || p.SeqQ < 0 || p.SeqK < 0 {
		panic(fmt.Sprintf("reference: negative size (Batch=%d SeqQ=%d SeqK=%d)", p.Batch, p.SeqQ, p.SeqK))
	}
	if p.Heads < 1 || p.KVHeads < 1 || p.HeadDim < 1 {
		panic(fmt.Sprintf("reference: Heads=%d KVHeads=%d HeadDim=%d must be >= 1", p.Heads, p.KVHeads, p.HeadDim))
	}
	if p.Heads%p.KVHeads != 0 {
		panic(fmt.Sprintf("reference: Heads=%d is not a multiple of KVHeads=%d", p.Heads, p.KVHeads))
	}
	wq := p.Batch * p.SeqQ * p.Heads * p.HeadDim
	wk := p.Batch * p.SeqK * p.KVHeads * p.HeadDim
	wo := p.Batch * p.SeqQ * p.Heads * p.dimV()
	wv := p.Batch * p.SeqK * p.KVHeads * p.dimV()
	if nq != wq {
		panic(fmt.Sprintf("reference: len(q)=%d, want Batch*SeqQ*Heads*HeadDim=%d", nq, wq))
	}
	if nk != wk {
		panic(fmt.Sprintf("reference: len(k)=%d, want Batch*SeqK*KVHeads*HeadDim=%d", nk, wk))
	}
	if nv != wv {
		panic(fmt.Sprintf("reference: len(v)=%d, want Batch*SeqK*KVHeads*HeadDimV=%d", nv, wv))
	}
	for _, n := range extra {
		if n != wo {
			panic(fmt.Sprintf("reference: len(dout)=%d, want Batch*SeqQ*Heads*HeadDimV=%d", n, wo))
		}
	}
	if p.Sinks != nil && len(p.Sinks) != p.Heads {
		panic(fmt.Sprintf("reference: len(Sinks)=%d, want Heads=%d", len(p.Sinks), p.Heads))
	}
	if !(p.Dropout >= 0 && p.Dropout < 1) {
		panic(fmt.Sprintf("reference: Dropout=%v not in [0, 1)", p.Dropout))
	}
	if !(p.Softcap >= 0) || math.IsInf(p.Softcap, 0) {
		panic(fmt.Sprintf("reference: Softcap=%v must be finite and >= 0", p.Softcap))
	}
	if math.IsNaN(p.Scale) || math.IsInf(p.Scale, 0) {
		panic(fmt.Sprintf("reference: Scale=%v must be finite", p.Scale))
	}
	if p.ALiBi != nil && len(p.ALiBi) != p.Heads && len(p.ALiBi) != p.Batch*p.Heads {
		panic(fmt.Sprintf("reference: len(ALiBi)=%d, want Heads=%d or Batch*Heads=%d", len(p.ALiBi), p.Heads, p.Batch*p.Heads))
	}
}

type float interface{ ~float32 | ~float64 }

// Index helpers for the dense layout.
func qIdx(p *Params, b, i, h int) int  { return ((b*p.SeqQ+i)*p.Heads + h) * p.HeadDim }
func kIdx(p *Params, b, j, kh int) int { return ((b*p.SeqK+j)*p.KVHeads + kh) * p.HeadDim }
func oIdx(p *Params, b, i, h int) int  { return ((b*p.SeqQ+i)*p.Heads + h) * p.dimV() }
func vIdx(p *Params, b, j, kh int) int { return ((b*p.SeqK+j)*p.KVHeads + kh) * p.dimV() }

// dropScale returns 1/(1-p) in T arithmetic.
func dropScale[T float](p float64) T {
	return 1 / (1 - T(p))
}

// rowScores computes the final scores x[j] of query row i of (b, h) into x.
// If th != nil and Softcap > 0 it also stores tanh(x_raw/Softcap) in th[j];
// if sm != nil and ScoreMod is set, the ScoreMod's derivative in sm[j].
// It returns the row maximum (-Inf if no key is visible).
//
// All arithmetic is done in T; the explicit T(...) conversions keep products
// rounded to T (no fused multiply-add, except in q·k with FusedScores, by
// dotOf), so float32 results are reproducible.
func rowScores[T float](p *Params, q, k []T, b, h, i int, x, th, sm []T) T {
	D := p.HeadDim
	kh := h / (p.Heads / p.KVHeads)
	qi := q[qIdx(p, b, i, h):][:D]
	s := T(p.scale())
	c := T(p.Softcap)
	var slope T
	if p.ALiBi != nil {
		slope = T(p.slope(b, h))
	}
	m := T(math.Inf(-1))
	for j := 0; j < p.SeqK; j++ {
		if !Visible(*p, i, j) || p.Mask != nil && !p.Mask(b, h, i, j) {
			x[j] = T(math.Inf(-1))
			if th != nil {
				th[j] = 0
			}
			continue
		}
		dot := dotOf(p.FusedScores, qi, k[kIdx(p, b, j, kh):][:D])
		xv := T(s * dot)
		if p.Softcap > 0 {
			t := T(math.Tanh(float64(T(xv / c))))
			if th != nil {
				th[j] = t
			}
			xv = T(c * t)
		}
		if p.ALiBi != nil {
			dist := i + p.diag() - j
			if dist < 0 {
				dist = -dist
			}
			xv += T(-slope * T(dist))
		}
		if p.ScoreMod != nil {
			y, dy := p.ScoreMod(b, h, i, j, float64(xv))
			xv = T(y)
			if sm != nil {
				sm[j] = T(dy)
			}
		}
		x[j] = xv
		if xv > m {
			m = xv
		}
	}
	return m
}

// dotOf returns Σ x[d]·y[d] in T, summed from zero in the order of d:
// each product rounded to T before it is added, or, if fused, the chain of
// fused multiply-adds s = fma(x[d], y[d], s) (Params.FusedScores).
func dotOf[T float](fused bool, x, y []T) T {
	y = y[:len(x)]
	var s T
	switch xs := any(x).(type) {
	case []float32:
		if fused {
			ys := any(y).([]float32)
			var f float32
			for d, v := range xs {
				f = kernel.FMA32(v, ys[d], f)
			}
			return T(f)
		}
	case []float64:
		if fused {
			ys := any(y).([]float64)
			var f float64
			for d, v := range xs {
				f = math.FMA(v, ys[d], f)
			}
			return T(f)
		}
	}
	for d := range x {
		s += T(x[d] * y[d])
	}
	return s
}

// softmaxRow turns the scores x (with maximum m) into probabilities in place
// and returns LSE. A row with no visible key becomes all zeros with LSE -Inf.
func softmaxRow[T float](x []T, m T) T {
	return softmaxSink(x, m, nil)
}

// softmaxSink is softmaxRow with an optional sink logit (*sink) in the
// sum: P_j = exp(x_j − LSE), LSE = log(Σ_j exp(x_j) + exp(sink)). A row with
// no visible key then gets LSE = sink.
func softmaxSink[T float](x []T, m T, sink *T) T {
	if sink != nil {
		m = max(m, *sink)
	}
	if math.IsInf(float64(m), -1) {
		for j := range x {
			x[j] = 0
		}
		return m
	}
	var sum T
	if sink != nil {
		sum = T(math.Exp(float64(*sink - m)))
	}
	for j, v := range x {
		e := T(math.Exp(float64(v - m)))
		x[j] = e
		sum += e
	}
	for j := range x {
		x[j] /= sum
	}
	return m + T(math.Log(float64(sum)))
}

// forward is the plain algorithm in T arithmetic. If rnd is not nil it is
// the same-type algorithm of a 16-bit type: each probability is rounded by
// rnd before it multiplies V, and O is rounded at the end (the inputs are
// rounded by the caller; LSE is not rounded).
func forward[T float](p Params, q, k, v []T, rnd func(T) T) (o, lse []T) {
	p.validate(len(q), len(k), len(v))
	D, Sk := p.dimV(), p.SeqK
	o = make([]T, p.Batch*p.SeqQ*p.Heads*D)
	lse = make([]T, p.Batch*p.Heads*p.SeqQ)
	x := make([]T, Sk)
	var mask dropout.Mask
	if p.Dropout > 0 {
		mask = dropout.NewMask(p.Seed, float32(p.Dropout))
	}
	ds := dropScale[T](p.Dropout)
	group := p.Heads / p.KVHeads
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			kh := h / group
			for i := 0; i < p.SeqQ; i++ {
				m := rowScores(&p, q, k, b, h, i, x, nil, nil)
				lse[(b*p.Heads+h)*p.SeqQ+i] = softmaxSink(x, m, sinkOf[T](&p, h))
				oi := o[oIdx(&p, b, i, h):][:D]
				for j := 0; j < Sk; j++ {
					pj := x[j]
					if rnd != nil {
						pj = rnd(pj)
					}
					if pj == 0 {
						continue
					}
					if p.Dropout > 0 {
						if !mask.Keep(b+p.DropoutBatch, h, i, j) {
							continue
						}
						pj = T(pj * ds)
					}
					vj := v[vIdx(&p, b, j, kh):][:D]
					for d := range oi {
						oi[d] += T(pj * vj[d])
					}
				}
			}
		}
	}
	roundAll(o, rnd)
	return o, lse
}

// roundAll applies rnd (if not nil) to every element of x.
func roundAll[T float](x []T, rnd func(T) T) {
	if rnd == nil {
		return
	}
	for i, v := range x {
		x[i] = rnd(v)
	}
}

// sinkOf returns head h's sink logit in T, or nil without sinks.
func sinkOf[T float](p *Params, h int) *T {
	if p.Sinks == nil {
		return nil
	}
	s := T(p.Sinks[h])
	return &s
}

// backward is the plain backward pass in T arithmetic. If rnd is not nil
// it is the same-type algorithm of a 16-bit type: the probabilities are
// rounded by rnd before they multiply dO (dV = Pᵀ·dO), the score gradients
// dS before they multiply K and Q (dQ = dS·K, dK = dSᵀ·Q), and dQ, dK, dV
// at the end (the inputs and dO are rounded by the caller). dlse (nil, or
// LSE's layout) is the gradient of the loss with respect to LSE; dsinks
// (with Sinks set) is the gradient with respect to the sink logits.
func backward[T float](p Params, q, k, v, dout []T, rnd func(T) T) (dq, dk, dv []T) {
	dq, dk, dv, _ = backwardGrads(p, q, k, v, dout, nil, rnd)
	return dq, dk, dv
}

func backwardGrads[T float](p Params, q, k, v, dout, dlse []T, rnd func(T) T) (dq, dk, dv, dsinks []T) {
	r := runBackward(p, q, k, v, dout, dlse, rnd, false)
	return r.dq, r.dk, r.dv, r.dsinks
}

// runBackward runs the plain backward and returns its state: the
// gradients, and with scoreGrads the gradient of every score as the
// ScoreMod returns it (r.dy).
func runBackward[T float](p Params, q, k, v, dout, dlse []T, rnd func(T) T, scoreGrads bool) *bwdRef[T] {
	p.validate(len(q), len(k), len(v), len(dout))
	if dlse != nil && len(dlse) != p.Batch*p.Heads*p.SeqQ {
		panic(fmt.Sprintf("reference: len(dlse)=%d, want Batch*Heads*SeqQ=%d", len(dlse), p.Batch*p.Heads*p.SeqQ))
	}
	r := newBwdRef(&p, q, k, v, dout, dlse, rnd)
	if scoreGrads {
		r.dy = make([]T, p.Batch*p.Heads*p.SeqQ*p.SeqK)
	}
	group := p.Heads / p.KVHeads
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			kh := h / group
			r.probs(b, h)
			r.gradV(b, h, kh)
			r.gradScores(b, h, kh)
			r.gradQ(b, h, kh)
			r.gradK(b, h, kh)
		}
	}
	roundAll(r.dq, rnd)
	roundAll(r.dk, rnd)
	roundAll(r.dv, rnd)
	return r
}

// bwdRef is the plain backward's state for one call: inputs, outputs and
// the Sq×Sk matrices of the current (batch, head).
type bwdRef[T float] struct {
	p                *Params
	q, k, v, dout    []T
	dlse             []T
	rnd              func(T) T
	dq, dk, dv       []T
	dsinks           []T
	dy               []T // nil, or [Batch, Heads, SeqQ, SeqK]: the gradient of the ScoreMod's output
	mask             dropout.Mask
	ds, s            T   // 1/(1-p) of dropout; the score scale
	P, TH, SM, Z, dS []T // probabilities, tanh(x/softcap), the ScoreMod's derivative, z/(1-p), score gradients
	acc, lse         []T
}

func newBwdRef[T float](p *Params, q, k, v, dout, dlse []T, rnd func(T) T) *bwdRef[T] {
	Sq, Sk := p.SeqQ, p.SeqK
	r := &bwdRef[T]{p: p, q: q, k: k, v: v, dout: dout, dlse: dlse, rnd: rnd,
		dq: make([]T, len(q)), dk: make([]T, len(k)), dv: make([]T, len(v)),
		ds: dropScale[T](p.Dropout), s: T(p.scale()),
		P: make([]T, Sq*Sk), TH: make([]T, Sq*Sk), SM: make([]T, Sq*Sk), Z: make([]T, Sq*Sk), dS: make([]T, Sq*Sk),
		acc: make([]T, p.HeadDim), lse: make([]T, Sq)}
	if p.Sinks != nil {
		r.dsinks = make([]T, p.Heads)
	}
	if p.Dropout > 0 {
		r.mask = dropout.NewMask(p.Seed, float32(p.Dropout))
	}
	return r
}

// probs recomputes P (and the softcap's tanh, the ScoreMod's derivative,
// the dropout factors z/(1-p)) and the LSE of every row of (b, h).
func (r *bwdRef[T]) probs(b, h int) {
	p, Sk := r.p, r.p.SeqK
	for i := 0; i < p.SeqQ; i++ {
		row := r.P[i*Sk:][:Sk]
		m := rowScores(p, r.q, r.k, b, h, i, row, r.TH[i*Sk:][:Sk], r.SM[i*Sk:][:Sk])
		r.lse[i] = softmaxSink(row, m, sinkOf[T](p, h))
		for j := 0; j < Sk; j++ {
			z := T(1)
			if p.Dropout > 0 {
				z = 0
				if r.mask.Keep(b+r.p.DropoutBatch, h, i, j) {
					z = r.ds
				}
			}
			r.Z[i*Sk+j] = z
		}
	}
}

// gradV adds dV_j += Σ_i P̃_ij·dO_i, P̃ = P·z/(1-p) (rounded first in the
// same-type algorithm).
func (r *bwdRef[T]) gradV(b, h, kh int) {
	p, Sk, DV := r.p, r.p.SeqK, r.p.dimV()
	for j := 0; j < Sk; j++ {
		dvj := r.dv[vIdx(p, b, j, kh):][:DV]
		for i := 0; i < p.SeqQ; i++ {
			pij := r.P[i*Sk+j]
			if r.rnd != nil {
				pij = r.rnd(pij)
			}
			pt := T(pij * r.Z[i*Sk+j])
			if pt == 0 {
				continue
			}
			doi := r.dout[oIdx(p, b, i, h):][:DV]
			for d := range dvj {
				dvj[d] += T(pt * doi[d])
			}
		}
	}
}

// gradScores sets dS: dP = (dO·Vᵀ)·z/(1-p), dS = P·(dP − rowsum(dP·P) +
// dLSE), times the modifiers' derivatives, and adds the sinks' gradient.
func (r *bwdRef[T]) gradScores(b, h, kh int) {
	p, Sq, Sk, DV := r.p, r.p.SeqQ, r.p.SeqK, r.p.dimV()
	P, dS := r.P, r.dS
	for i := 0; i < Sq; i++ {
		doi := r.dout[oIdx(p, b, i, h):][:DV]
		var rowDot T
		for j := 0; j < Sk; j++ {
			var dp T
			if P[i*Sk+j] != 0 && r.Z[i*Sk+j] != 0 {
				dp = dotOf(p.FusedScores, doi, r.v[vIdx(p, b, j, kh):][:DV])
				dp = T(dp * r.Z[i*Sk+j])
			}
			dS[i*Sk+j] = dp
			rowDot += T(dp * P[i*Sk+j])
		}
		var dl T
		if r.dlse != nil {
			dl = r.dlse[(b*p.Heads+h)*Sq+i]
		}
		if r.dsinks != nil && !math.IsInf(float64(r.lse[i]), -1) {
			// The sink's probability; its "value" is zero, so its dP is 0.
			ps := T(math.Exp(float64(T(p.Sinks[h]) - r.lse[i])))
			r.dsinks[h] += T(ps * T(dl-rowDot))
		}
		for j := 0; j < Sk; j++ {
			g := T(P[i*Sk+j] * T(T(dS[i*Sk+j]-rowDot)+dl))
			if r.dy != nil {
				r.dy[((b*p.Heads+h)*Sq+i)*Sk+j] = g
			}
			if p.ScoreMod != nil && g != 0 {
				g = T(g * r.SM[i*Sk+j])
			}
			if p.Softcap > 0 {
				t := r.TH[i*Sk+j]
				g = T(g * T(1-T(t*t)))
			}
			if r.rnd != nil {
				g = r.rnd(g)
			}
			dS[i*Sk+j] = g
		}
	}
}

// gradQ sets dQ_i = s·Σ_j dS_ij·K_j.
func (r *bwdRef[T]) gradQ(b, h, kh int) {
	p := r.p
	r.gradRows(p.SeqQ, p.SeqK, p.SeqK, 1, false,
		func(j int) []T { return r.k[kIdx(p, b, j, kh):] },
		func(i int) []T { return r.dq[qIdx(p, b, i, h):] })
}

// gradK adds dK_j += s·Σ_i dS_ij·Q_i.
func (r *bwdRef[T]) gradK(b, h, kh int) {
	p := r.p
	r.gradRows(p.SeqK, p.SeqQ, 1, p.SeqK, true,
		func(i int) []T { return r.q[qIdx(p, b, i, h):] },
		func(j int) []T { return r.dk[kIdx(p, b, j, kh):] })
}

// gradRows sets (or, with add, adds to) out(x) = s·Σ_y dS[x·sx + y·sy]·in(y)
// for the nx output rows x, summing over y < ny in order and skipping
// zero entries of dS: gradQ with x = i, y = j; gradK with x = j, y = i.
func (r *bwdRef[T]) gradRows(nx, ny, sx, sy int, add bool, in, out func(int) []T) {
	D := r.p.HeadDim
	for x := 0; x < nx; x++ {
		clear(r.acc)
		for y := 0; y < ny; y++ {
			g := r.dS[x*sx+y*sy]
			if g == 0 {
				continue
			}
			row := in(y)[:D]
			for d := range r.acc {
				r.acc[d] += T(g * row[d])
			}
		}
		o := out(x)[:D]
		for d := range o {
			if add {
				o[d] += T(r.s * r.acc[d])
			} else {
				o[d] = T(r.s * r.acc[d])
			}
		}
	}
}

// Forward64 computes O and LSE in float64 arithmetic.
func Forward64(p Params, q, k, v []float64) (o, lse []float64) {
	return forward(p, q, k, v, nil)
}

// Backward64 computes dQ, dK and dV for the output gradient dout, in float64
// arithmetic, by materialising the probability matrix of each (batch, head).
func Backward64(p Params, q, k, v, dout []float64) (dq, dk, dv []float64) {
	return backward(p, q, k, v, dout, nil)
}

// BackwardGrads64 is Backward64 for a loss that also depends on LSE, with
// learnable sinks: dlse (nil, or LSE's layout [Batch, Heads, SeqQ]) is the
// loss's gradient with respect to LSE, and dsinks (nil without Params.Sinks)
// the gradient with respect to the sink logits, summed over batch and rows.
func BackwardGrads64(p Params, q, k, v, dout, dlse []float64) (dq, dk, dv, dsinks []float64) {
	return backwardGrads(p, q, k, v, dout, dlse, nil)
}

// ScoreGrads64 is the gradient, in float64 arithmetic, of the loss of
// BackwardGrads64 with respect to every score as Params.ScoreMod returns it
// (the last modifier; the score the masks and the softmax take), [Batch,
// Heads, SeqQ, SeqK]: dS = P·(dP − rowsum(dP·P) + dLSE), 0 where P is 0. It
// is the gradient of an additive bias that the ScoreMod adds, before any
// sum over the bias's broadcast dimensions.
func ScoreGrads64(p Params, q, k, v, dout, dlse []float64) []float64 {
	return runBackward(p, q, k, v, dout, dlse, nil, true).dy
}

// ScoreGrads32 is ScoreGrads64 in float32 arithmetic.
func ScoreGrads32(p Params, q, k, v, dout, dlse []float32) []float32 {
	return runBackward(p, q, k, v, dout, dlse, nil, true).dy
}

// BackwardGrads32 is BackwardGrads64 in float32 arithmetic.
func BackwardGrads32(p Params, q, k, v, dout, dlse []float32) (dq, dk, dv, dsinks []float32) {
	return backwardGrads(p, q, k, v, dout, dlse, nil)
}

// Forward32 is Forward64 computed entirely in float32 arithmetic: dot products
// and sums accumulated in float32 in index order, exp, log and tanh rounded to
// float32. It is the "plain algorithm run in float32" baseline of the
// flashattn correctness rule (see Check).
func Forward32(p Params, q, k, v []float32) (o, lse []float32) {
	return forward(p, q, k, v, nil)
}

// Backward32 is Backward64 computed entirely in float32 arithmetic.
func Backward32(p Params, q, k, v, dout []float32) (dq, dk, dv []float32) {
	return backward(p, q, k, v, dout, nil)
}

// MaxAbsDiff32vs64 returns max_i |a[i] - b[i]|. Two equal infinities (such as
// the LSE -Inf of a row with no visible key) differ by 0; mismatched
// infinities, a NaN on either side, or different lengths give +Inf. Empty
// slices give 0.
func MaxAbsDiff32vs64(a []float32, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i, av := range a {
		x, y := float64(av), b[i]
		if math.IsNaN(x) || math.IsNaN(y) {
			return math.Inf(1)
		}
		if math.IsInf(x, 0) || math.IsInf(y, 0) {
			if x != y {
				return math.Inf(1)
			}
			continue
		}
		if d := math.Abs(x - y); d > m {
			m = d
		}
	}
	return m
}

// Check applies the flashattn correctness rule: with err(x) the
// maximum absolute difference between x and the float64 reference ref, it
// requires err(got) <= 2*err(plain32) + 1e-6, where plain32 is the plain
// algorithm run in float32 (Forward32 or Backward32). It returns nil if the
// rule holds and otherwise an error naming the quantity and both errors.
func Check(name string, got, plain32 []float32, ref []float64) error {
	return checkRule(name, got, plain32, ref, rule{1e-6, "1e-6", "plain float32", "plain32"})
}

// rule is one instance of the error rule: err(got) <= 2*err(plain) + slack.
type rule struct {
	slack     float64
	slackText string // slack as the message prints it
	baseline  string // what plain is, in the message
	short     string // its short name, in the message
}

// checkRule applies r to got and plain32, errors measured against ref.
func checkRule(name string, got, plain32 []float32, ref []float64, r rule) error {
	if len(got) != len(ref) {
		return fmt.Errorf("%s: length %d, want %d", name, len(got), len(ref))
	}
	if len(plain32) != len(ref) {
		return fmt.Errorf("%s: %s baseline length %d, want %d", name, r.short, len(plain32), len(ref))
	}
	eg := MaxAbsDiff32vs64(got, ref)
	ep := MaxAbsDiff32vs64(plain32, ref)
	if eg <= 2*ep+r.slack {
		return nil
	}
	// Locate the worst element for the message.
	worst, wd := -1, -1.0
	for i := range got {
		x, y := float64(got[i]), ref[i]
		d := math.Abs(x - y)
		if x == y {
			d = 0
		}
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		if d > wd {
			worst, wd = i, d
		}
	}
	msg := fmt.Sprintf("%s: max abs error %.3g exceeds 2*%.3g (%s error) + %s = %.3g",
		name, eg, ep, r.baseline, r.slackText, 2*ep+r.slack)
	if worst >= 0 {
		msg += fmt.Sprintf("; worst at index %d: got %v, %s %v, ref %v", worst, got[worst], r.short, plain32[worst], ref[worst])
	}
	return fmt.Errorf("%s", msg)
}
