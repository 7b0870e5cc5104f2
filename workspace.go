package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// workspace is one worker's scratch memory, reused for every task the
// worker runs, in named parts: the forward's tile buffers, the backward's,
// one score row's helpers and the conversion rows. Its size depends on the
// tile sizes and head dim, never on the sequence length (except the
// backward's dQ accumulator of one head, which is O(N)).
type workspace struct {
	fwd   fwdScratch
	bwd   bwdScratch
	row   rowScratch
	conv  convScratch
	merge lseMerge // the forward's merge of key splits
}

// fwdScratch holds a forward task's tiles.
type fwdScratch struct {
	s      []float32 // max(blockQ, maxStackRows) × pad(blockK): scores, then P
	kt     []float32 // a Kᵀ tile packed in strips, pad(bk) × dim
	vp     []float32 // V rows padded to dimVPad, bk × dimVPad
	q      []float32 // the block's Q rows, (maxRows+3) × dim
	qa     []float32 // the Q rows the products read (q, or Q in place) ...
	ldq    int       // ... and their leading dimension
	o      []float32 // the output accumulator, maxRows × dimVPad, not cleared between tasks (rowState.claim)
	acc    []float32 // the task's accumulator: o, or a key split's partial-result slot
	m, l   []float32 // running max and sum, maxRows
	fresh  []bool    // rows of o not written yet, maxRows (rowState.claim)
	qT     []float32 // route sT: Qᵀ packed per sub-block, W × dim per KV head
	sT     []float32 // route sT: Sᵀ, bk × W
	subs   []subBlock
	kStage []float32 // route fromStaged: K of one key tile for the block's KV heads
	vStage []float32 // route fromStaged: V likewise, rows padded to dimVPad
	qh, ph []uint16  // native 16-bit products: Q rows, P rows of a tile
	qha    []uint16  // the 16-bit Q rows the native products read (qh, or Q in place) ...
	ldqh   int       // ... and their leading dimension
}

// bwdScratch holds a backward task's tiles.
type bwdScratch struct {
	s      []float32 // blockQ × pad(bk): S, then P
	dP     []float32 // blockQ × pad(bk): dP, then dS
	pDrop  []float32 // P with dropout applied, blockQ × pad(bk)
	grad   []float32 // derivative of the score modifiers, blockQ × pad(bk)
	dk, dv []float32 // dK, dV accumulators of a KV block, bk × dimPad and bk × dimVPad
	dq     []float32 // dQ accumulator of one head (or query block), rows × dimPad
	drop   []float32 // dropout factors of one row, bk
	pT     []uint16  // native products: Pᵀ
	dsT    []uint16  // native products: dSᵀ
	dsH    []uint16  // native products: dS rows
	sums   []float64 // LSE correction: Σ exp(S − LSE) of the rows of a block
	dbias  []float64 // the bias gradient's slab of a task, seqQ × columns (dbias.go)
}

// rowScratch helps with one score row.
type rowScratch struct {
	keep []bool    // element-mask scratch, pad(bk)
	du   []float32 // the ScoreMod's derivative, pad(bk)
}

// convScratch holds rows converted from a tensor that is not float32 in
// the compute type (16-bit, q8_0, or float32 rounded to a 16-bit compute
// type): in1 and in2 for the first and second matrix a step reads (K and V;
// Q and dO), out for one output row before it is rounded to its type.
type convScratch struct {
	in1, in2, out []float32
	q8            []byte // a q8_0 or q4_0 row quantised to check it
}

var workspaces freeList[workspace]

// sizeForward sizes the forward's tile buffers for plan p.
func (w *workspace) sizeForward(p *plan) {
	f := &w.fwd
	bkp := kernel.Pad(p.blockK)
	grow(&f.s, max(p.blockQ, maxStackRows)*bkp) // one microtile, or a stacked block
	grow(&f.kt, bkp*p.dim)
	grow(&f.vp, bkp*p.dimVPad)
	grow(&f.o, p.maxRows*p.dimVPad)
	grow(&f.q, (p.maxRows+3)*p.dimPad)
	grow(&f.qT, p.kvHeads*kernel.W*p.dim)
	grow(&f.sT, bkp*kernel.W)
	grow(&f.m, p.maxRows)
	grow(&f.l, p.maxRows)
	grow(&f.fresh, p.maxRows)
	w.sizeRow(bkp)
}

// sizeBackward sizes the backward's tile buffers for plan p.
func (w *workspace) sizeBackward(p *plan) {
	b := &w.bwd
	bkp := kernel.Pad(p.bwdBlockK)
	grow(&b.s, p.blockQ*bkp)
	grow(&b.dP, p.blockQ*bkp)
	grow(&b.pDrop, p.blockQ*bkp)
	grow(&b.dk, bkp*p.dimPad)
	grow(&b.dv, bkp*p.dimVPad)
	if p.mods.curved() {
		grow(&b.grad, p.blockQ*bkp)
	}
	if p.dropOn {
		grow(&b.drop, bkp)
	}
	w.sizeRow(bkp)
}

func (w *workspace) sizeRow(n int) {
	if len(w.row.keep) < n {
		grow(&w.row.keep, n)
		grow(&w.row.du, n)
	}
}

// outRow returns the float32 row to write output row (b, s, h) of out into:
// out's own memory when it is float32, else scratch that commit converts.
func (w *workspace) outRow(out view, b, s, h, dim int) []float32 {
	if out.dt == Float32 {
		return out.row(b, s, h)[:dim]
	}
	return grow(&w.conv.out, dim)
}

// grow returns (*buf)[:n], reallocating if it is too small. The contents
// are unspecified.
func grow[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// even rounds n up to an even number (the pairs of the VNNI layout).
func even(n int) int { return n + n%2 }
