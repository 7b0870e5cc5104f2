package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// workspace is one worker's scratch memory: a few tiles, reused for every
// task the worker runs. Its size depends on the tile sizes and head dim,
// never on the sequence length (except the backward's dQ accumulator of one
// head, which is O(N)).
type workspace struct {
	s          []float32 // maxRows × pad(blockK): scores, then P
	grad       []float32 // backward: derivative of the score modifiers, blockQ × pad(bk)
	pDrop      []float32 // backward: P with dropout applied, blockQ × pad(bk)
	dP         []float32 // backward: dP, then dS, blockQ × pad(bk)
	du         []float32 // the ScoreMod's derivative of one row, pad(bk)
	keep       []bool    // element-mask scratch of one row, pad(bk)
	kt         []float32 // forward: a Kᵀ tile packed in strips, pad(bk) × dim
	vp         []float32 // forward: V rows padded to dimPad, bk × dimPad
	qp         []float32 // forward: Q rows of the block, (maxRows+3) × dim
	o          []float32 // output accumulator, maxRows × dimPad
	qt, st     []float32 // few-row blocks: Qᵀ packed, W × dim per KV head; Sᵀ, bk × W
	subs       []subBlock
	kdec, vdec []float32 // decoding: K and V of one key tile for several KV heads
	drop       []float32 // backward: dropout factors of one row, bk
	m, l       []float32 // running max and sum, maxRows
	dk, dv     []float32 // backward: dK, dV accumulators, bk × dimPad
	dq         []float32 // backward: dQ accumulator of one head (or query block), rows × dimPad
	qall       []float32 // LSE correction: Q rows of a block, padded to dimPad
	sums       []float64 // LSE correction: Σ exp(S − LSE) of the rows of a block
	convK      []float32 // K rows converted from a 16-bit type (or rounded to it)
	convV      []float32 // V rows likewise; also Q and dO rows in the backward
	convO      []float32 // one output row, before it is rounded to a 16-bit type
	qh, ph     []uint16  // native 16-bit products: Q rows, P rows of a tile
	dsH        []uint16  // backward: dS rows
	pT, dsT    []uint16  // backward: Pᵀ, dSᵀ
}

var workspaces freeList[workspace]

// forTile sizes the forward's tile buffers for plan p.
func (w *workspace) forTile(p *plan) {
	bkp := kernel.Pad(max(p.blockK, p.bwdBlockK))
	grow(&w.s, p.maxRows*bkp)
	grow(&w.kt, bkp*p.dim)
	grow(&w.vp, bkp*p.dimPad)
	grow(&w.o, p.maxRows*p.dimPad)
	grow(&w.qp, (p.maxRows+3)*p.dimPad)
	grow(&w.qt, p.kvHeads*kernel.W*p.dim)
	grow(&w.st, bkp*kernel.W)
	grow(&w.m, p.maxRows)
	grow(&w.l, p.maxRows)
	grow(&w.keep, bkp)
	grow(&w.du, bkp)
}

// forBackward additionally sizes the backward's tile buffers.
func (w *workspace) forBackward(p *plan) {
	w.forTile(p)
	bkp := kernel.Pad(p.bwdBlockK)
	grow(&w.dP, p.blockQ*bkp)
	grow(&w.pDrop, p.blockQ*bkp)
	grow(&w.dk, bkp*p.dimPad)
	grow(&w.dv, bkp*p.dimPad)
	if p.mods.curved() {
		grow(&w.grad, p.blockQ*bkp)
	}
	if p.dropOn {
		grow(&w.drop, bkp)
	}
}

// outRow returns the float32 row to write output row (b, s, h) of out into:
// out's own memory when it is float32, else scratch that commit converts.
func (w *workspace) outRow(out view, b, s, h, dim int) []float32 {
	if out.dt == Float32 {
		return out.row(b, s, h)[:dim]
	}
	return grow(&w.convO, dim)
}
