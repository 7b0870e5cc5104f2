package flashattn

import (
	"sync"

	"github.com/flashattn/flashattn/internal/kernel"
)

// workspace is one worker's scratch memory: a few tiles, reused for every
// task the worker runs. Its size depends on the tile sizes and head dim,
// never on the sequence length (except the backward's per-row buffers, which
// are O(N)).
type workspace struct {
	s, g, pd, dp []float32 // bq × pad(bk) tiles: scores/P, softcap factor, dropped P, dP/dS
	kt, vt       []float32 // Kᵀ, Vᵀ packed panels, pad(bk) × d
	kp, vp       []float32 // K, V rows padded to dp, bk × dp
	qp           []float32 // forward: scale·Q rows of the block, (maxRows+3) × d
	o            []float32 // output accumulator, bq × dp
	qt, st       []float32 // few-row blocks: (scale·Q)ᵀ packed, W × d per KV head; Sᵀ, bk × W
	subs         []subBlock
	kdec, vdec   []float32 // decoding: K and V of one key tile for several KV heads
	drop         []float32 // backward: dropout factors of one row, bk
	m, l         []float32 // running max and sum, bq
	dk, dv       []float32 // dK, dV accumulators, bk × dp
	delta, lse   []float32 // backward: rowsum(dO∘O) and LSE of one head, nq
	dq           []float32 // backward: dQ accumulator of one head, nq × dp
	qall, doall  []float32 // backward: scale·Q and dO of one head, nq × dp
}

var workspaces = sync.Pool{New: func() any { return new(workspace) }}

// grow returns buf resliced to n elements, reallocating if it is too small.
// The contents are unspecified.
func grow(buf *[]float32, n int) []float32 {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// forTile sizes the tile buffers for problem p.
func (w *workspace) forTile(p *problem) {
	bkp := kernel.Pad(p.bk)
	grow(&w.s, p.maxRows*bkp)
	grow(&w.kt, bkp*p.d)
	grow(&w.vp, p.bk*p.dp)
	grow(&w.o, p.maxRows*p.dp)
	grow(&w.qp, (p.maxRows+3)*p.dp)
	grow(&w.qt, p.kvh*kernel.W*p.d)
	grow(&w.st, p.bk*kernel.W)
	grow(&w.m, p.maxRows)
	grow(&w.l, p.maxRows)
	if p.softcap > 0 {
		grow(&w.g, p.bq*bkp)
	}
}

// forBackward additionally sizes the backward's buffers.
func (w *workspace) forBackward(p *problem, maxRows int) {
	w.forTile(p)
	bkp := kernel.Pad(p.bk)
	grow(&w.dp, p.bq*bkp)
	grow(&w.pd, p.bq*bkp)
	grow(&w.vt, bkp*p.d)
	grow(&w.kp, p.bk*p.dp)
	grow(&w.dk, p.bk*p.dp)
	grow(&w.dv, p.bk*p.dp)
	if p.dropOn {
		grow(&w.drop, p.bk)
	}
	grow(&w.delta, maxRows)
	grow(&w.lse, maxRows)
}
