package flashattn

import (
	"sync/atomic"

	"github.com/flashattn/flashattn/internal/kernel"
)

// forward.go is FA2's Algorithm 1: one task per row block (or key split of
// one, see tasks.go), each streaming the K/V tiles its mask leaves visible
// through the online softmax (softmax.go).

// partials holds the unnormalised results of key-split tasks until they are
// merged: per split task, its block's rows from its first partial-result
// row (fwdTask.slot): output rows (stride dimVPad), their running max and
// sum.
type partials struct {
	o, m, l []float32
}

// forwardPass is the parallel pass of FA2's forward.
type forwardPass struct {
	p     *plan
	out   view
	lse   []float32
	kv    *packedKV
	tasks []fwdTask
	part  partials
	left  []int32 // per split row block (fwdTask.block): its splits not finished yet
	mem   fwdMem
}

// fwdMem is what the forward pass keeps from call to call.
type fwdMem struct {
	blocks       []rowBlock
	tasks        []fwdTask
	partO, partM []float32
	partL        []float32
	left         []int32
	last         []int32 // widen's scratch
}

func (c *call) forward(out view, lse []float32) error {
	p := &c.plan
	if err := c.appendKV(); err != nil {
		return err
	}
	f := &c.fwd
	*f = forwardPass{p: p, out: out, lse: lse, kv: &c.pack.kv, mem: f.mem}
	tasks, rows, splitBlocks := p.forwardTasks(&f.mem.blocks, &f.mem.tasks)
	tasks = p.widen(tasks, &f.mem.last)
	f.tasks = tasks
	if err := c.pack.run(p, false); err != nil {
		return err
	}
	if rows > 0 {
		f.part = partials{
			o: grow(&f.mem.partO, rows*p.dimVPad),
			m: grow(&f.mem.partM, rows),
			l: grow(&f.mem.partL, rows),
		}
		for i := range f.part.m {
			f.part.m[i] = negInf
		}
		f.left = grow(&f.mem.left, splitBlocks)
		for _, t := range tasks {
			if t.slot >= 0 {
				f.left[t.block] = int32(t.parts)
			}
		}
	}
	f.writePadding()
	return p.parallel(len(tasks), f)
}

// runTask runs task t; the last of a row block's key splits to finish
// merges them (merge.go), in the same pass. A task cut short by
// cancellation does not count, so nothing merges unfinished splits.
func (f *forwardPass) runTask(ws *workspace, t int) {
	tk := &f.tasks[t]
	f.task(ws, tk)
	if tk.slot >= 0 && !f.p.stopped() && atomic.AddInt32(&f.left[tk.block], -1) == 0 {
		f.mergeSplits(ws, tk)
	}
}

// task runs FA2's Algorithm 1 for one row block: with the block's rows of
// Q loaded, for each key tile (j0, j1) that its mask does not hide,
//
//	S = Q·Kᵀ                                   scores
//	S = mask(mods(scale·S)); m, l, O rescaled  softmax (online)
//	O += P·V                                   accumulate
//
// then O /= l and LSE = m + log l (finish). A block that stacks several KV
// heads' query heads (decoding) visits, for each key tile, every KV head in
// turn (its sub-blocks), so K and V are read in memory order. Where the
// tiles come from is the sequence's route (kvsource.go). A block of one
// head taller than blockQ is a super-block (superTask).
func (f *forwardPass) task(ws *workspace, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	if t.nh == 1 && t.i1-t.i0 > p.blockQ {
		f.superTask(ws, t)
		return
	}
	st := f.start(ws, t)
	step := p.blockK
	if s.route.from == fromStaged {
		step = p.decodeStep(len(ws.fwd.subs))
	}
	heads := p.headsTile(s, ws.fwd.subs)
	for j := t.j0; ; {
		j0, j1, kind := nextTile(s.vis, t.rowBlock, j, t.j1, step)
		if j0 >= t.j1 {
			break
		}
		if p.stopped() {
			return
		}
		if s.route.from == fromStaged {
			p.stageKV(ws, s, ws.fwd.subs, j0, j1-j0, step)
		}
		if heads {
			f.tileHeads(ws, &st, t, kind, j0, j1-j0)
		} else {
			for si, sb := range ws.fwd.subs {
				f.tile(ws, &st, t, si, sb, kind, j0, j1-j0, step)
			}
		}
		j = j1
	}
	f.finish(ws, &st, t)
}

// tile is Algorithm 1's inner step for sub-block sb (the si-th of the
// block) and keys j0..j0+n-1: scores, online softmax, accumulate.
func (f *forwardPass) tile(ws *workspace, st *rowState, t *fwdTask, si int, sb subBlock, kind BlockKind, j0, n, step int) {
	kv := f.keyTile(ws, t.seq, si, sb, j0, n, step)
	f.scores(ws, sb, si, kv, j0, n)
	f.softmax(ws, st, t, sb, kv, kind, j0, n)
	f.accumulate(ws, st, sb, kv, j0, n)
}

// tileHeads is tile for every sub-block of a block at once (plan.headsTile:
// multi-head or grouped-query decoding): the heads of each key are read
// side by side, in address order, by one decode-kernel call per run of
// keys.
func (f *forwardPass) tileHeads(ws *workspace, st *rowState, t *fwdTask, kind BlockKind, j0, n int) {
	p := f.p
	s := &p.seqs[t.seq]
	subs, np := ws.fwd.subs, kernel.Pad(n)
	p.decodeScoresHeads(ws, s, subs, j0, n, np)
	for _, sb := range subs {
		f.softmax(ws, st, t, sb, kvTile{inPlace: true}, kind, j0, n)
	}
	for _, sb := range subs {
		st.claimAdd(sb.r0, sb.m)
	}
	p.decodeAccumHeads(ws, s, subs, j0, n, np)
}

// superTask is Algorithm 1 with two-level tiling, for a super-block of
// one head (rows t.i0..t.i1) whose K and V are packed: its microtiles of
// blockQ rows all visit each key tile of up to blockK keys in turn, while
// the tile is in L2, and their Q rows, softmax states and output
// accumulators stay in L2 for the whole task. Per microtile and key tile it
// is the same step as task's (tile), on the microtile's rows:
//
//	for each key tile [J, J+B_c) of the super-block's keys:
//	    for each microtile (B_r rows) that sees some of it:
//	        S = Q·Kᵀ; softmax (online); O += P·V   on its visible sub-tiles
//
// so K and V are read from memory once per super-block rather than once
// per microtile.
func (f *forwardPass) superTask(ws *workspace, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	st := f.start(ws, t)
	hk, step := t.h0/p.group, p.blockK
	for J := t.j0; J < t.j1; J += step {
		if p.stopped() {
			return
		}
		jEnd := min(J+step, t.j1)
		if s.vis.tile(t.rowBlock, J, jEnd) == BlockEmpty {
			continue
		}
		for i0 := t.i0; i0 < t.i1; i0 += p.blockQ {
			mt := rowBlock{seq: t.seq, h0: t.h0, nh: 1, i0: i0, i1: min(i0+p.blockQ, t.i1)}
			// The microtile's rows of Q, state and O start at row i0−t.i0
			// of the super-block's; its S rows at row 0 of the S tile.
			sb := subBlock{hk: hk, r0: i0 - t.i0, m: mt.i1 - mt.i0, s0: 0}
			for j := J; ; {
				j0, j1, kind := nextTile(s.vis, mt, j, jEnd, step)
				if j0 >= jEnd {
					break
				}
				f.tile(ws, &st, t, 0, sb, kind, j0, j1-j0, step)
				j = j1
			}
		}
	}
	f.finish(ws, &st, t)
}

// start loads the block's rows of Q into ws.fwd.q (or points ws.fwd.qa at
// them in place, see qInPlace; 16-bit rows for the native products go to
// ws.fwd.qh), splits the block into sub-blocks by KV head (ws.fwd.subs) and
// returns the reset softmax state.
func (f *forwardPass) start(ws *workspace, t *fwdTask) rowState {
	p := f.p
	s := &p.seqs[t.seq]
	ws.sizeForward(p)
	fw := &ws.fwd
	m, d := t.height(), p.dim
	st := rowState{m: fw.m, l: fw.l, o: fw.o, dimPad: p.dimVPad, fresh: fw.fresh}
	if t.slot >= 0 {
		// A key split accumulates in its partial-result slot directly.
		r0, r1 := t.slot, t.slot+m
		st.m, st.l = f.part.m[r0:r1], f.part.l[r0:r1]
		st.o = f.part.o[r0*p.dimVPad : r1*p.dimVPad]
	}
	fw.acc = st.o
	st.reset(m)
	qRows := fw.q[:(m+3)*d] // 3 spare rows: Dot4T reads rows in fours
	fw.qa, fw.ldq = qRows, d
	halfOnly := f.qHalfOnly(t)
	switch {
	case f.qInPlace(t):
		// The products read the block's rows of Q where they lie.
		fw.qa, fw.ldq = p.q.matrix(nil, s.tb, s.q0+t.i0, t.h0, m, p.ct, &p.kern)
	case !halfOnly:
		f.loadQ(qRows, t)
	}
	nr := t.i1 - t.i0 // rows per head
	subs := fw.subs[:0]
	for h := t.h0; h < t.h0+t.nh; {
		hk := h / p.group
		he := min(t.h0+t.nh, (hk+1)*p.group)
		r0 := (h - t.h0) * nr
		subs = append(subs, subBlock{hk: hk, r0: r0, m: (he - h) * nr, s0: r0})
		h = he
	}
	fw.subs = subs
	if p.native && f.qHalfInPlace(t) {
		// The native products read the block's 16-bit rows of Q where
		// they lie (the same bits as a copy).
		fw.qha, fw.ldqh = p.q.rows16(s.tb, s.q0+t.i0, t.h0)
	} else if p.native {
		// Q in the type, rows of even(d) (the pad column is 0).
		de := even(d)
		qh := grow(&fw.qh, m*de)
		fw.qha, fw.ldqh = qh, de
		for r := 0; r < m; r++ {
			qh[r*de+de-1] = 0
			src := qRows[r*d : (r+1)*d]
			if halfOnly {
				h, i := t.at(r)
				if p.q.dt == p.ct {
					row, _ := p.q.rows16(s.tb, s.q0+i, h)
					copy(qh[r*de:r*de+d], row[:d])
					continue
				}
				src = p.q.row(s.tb, s.q0+i, h)[:d] // float32: one rounding conversion
			}
			toHalf(&p.kern, p.ct, qh[r*de:r*de+d], src)
		}
	}
	if s.route.sT && !p.dot4T() {
		// Sᵀ = K·Qᵀ needs Qᵀ packed per sub-block.
		for si, sb := range subs {
			kernel.PackBt(fw.qT[si*kernel.W*d:], qRows[sb.r0*d:], d, sb.m, d)
		}
	}
	return st
}

// loadQ writes task t's rows of Q, in the compute type (rotated when the
// cache has a rotary embedding), to qRows (rows of the head dim).
func (f *forwardPass) loadQ(qRows []float32, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	d := p.dim
	for r := 0; r < t.height(); r++ {
		h, i := t.at(r)
		row := qRows[r*d : (r+1)*d]
		if p.cache.rotary == nil {
			p.q.rowTo(row, s.tb, s.q0+i, h, p.ct, &p.kern)
			continue
		}
		p.q.rowTo(row, s.tb, s.q0+i, h, Float32, &p.kern)
		p.cache.rotary.rotate(row, p.queryPos(s, i))
		if p.ct != Float32 {
			roundTo(row, p.ct, &p.kern)
		}
	}
}

// qInPlace reports whether task t's products read its rows of Q in place
// (fwdScratch.qa) rather than from a copy: the rows of one head of a
// float32 Q, used as they are (no rotary embedding, no rounding, no 16-bit
// products), by a route whose S tiles are MulABt products (packed K, or K
// rows without the transposed form).
func (f *forwardPass) qInPlace(t *fwdTask) bool {
	p := f.p
	r := p.seqs[t.seq].route
	return t.nh == 1 && p.q.dt == Float32 && p.ct == Float32 && !p.native && p.cache.rotary == nil &&
		(r.from == fromPacked || r.from == fromRows && !r.sT)
}

// qHalfOnly reports whether task t's 16-bit Q rows for the native products
// come straight from Q, with no float32 copy of them: Q used as it is (no
// rotary embedding), with packed K and V, whose tiles the native products
// read (so no float32 Q row is needed). A Q in the compute type is copied
// as its own bits rather than converted to float32 and back (the same
// bits: both conversions are exact, but for a signalling NaN, which the
// round trip quiets and a product turns into a NaN score either way); a
// float32 Q is converted once, rather than copied, rounded in float32 and
// converted (the same bits: the conversion rounds the same way).
func (f *forwardPass) qHalfOnly(t *fwdTask) bool {
	p := f.p
	return p.native && p.cache.rotary == nil && p.seqs[t.seq].route.from == fromPacked
}

// qHalfInPlace reports whether task t's native 16-bit products read its
// rows of Q in place (fwdScratch.qha) rather than from a copy (qHalfOnly):
// the rows of one head of a Q in the compute type whose head dim is even
// (no pad column to add). The copy cost a pass over Q per row block (and
// per key split).
func (f *forwardPass) qHalfInPlace(t *fwdTask) bool {
	p := f.p
	return f.qHalfOnly(t) && t.nh == 1 && p.q.dt == p.ct && p.dim%2 == 0
}

// scores computes the S tile of sub-block sb: rows sb.s0.. of ws.fwd.s, n
// keys from j0 (padded to a multiple of kernel.W), from its Q rows sb.r0..
func (f *forwardPass) scores(ws *workspace, sb subBlock, si int, kv kvTile, j0, n int) {
	p, fw := f.p, &ws.fwd
	kern, d := &p.kern, p.dim
	np := kernel.Pad(n)
	sTile := fw.s[sb.s0*np:]
	qRows, qa := fw.q[sb.r0*d:], fw.qa[sb.r0*fw.ldq:]
	switch {
	case kv.inPlace:
		p.decodeScores(ws, kv.seq, sb, j0, n, np)
	case kv.kh != nil:
		de := even(d)
		p.halfMul.Mul(sTile, np, fw.qha[sb.r0*fw.ldqh:], fw.ldqh, kv.kh, kernel.W*de, sb.m, np, de)
	case kv.kt != nil:
		kern.MulABt(sTile, np, qa, fw.ldq, kv.kt, sb.m, np, d)
	case kv.sT:
		// Few rows: Sᵀ = K·Qᵀ reads K where it lies, instead of
		// transposing a K tile used only once. Dot4T (KV caches only)
		// sums in another order than the backward's products; the
		// MulABt form gives the backward's scores bit for bit.
		sT := fw.sT[:n*kernel.W]
		if p.dot4T() {
			for q4 := 0; q4 < sb.m; q4 += 4 {
				kern.Dot4T(sT[q4:], kernel.W, qRows[q4*d:(q4+4)*d], kv.k, kv.ldk, n, d)
			}
		} else {
			kern.MulABt(sT, kernel.W, kv.k, kv.ldk, fw.qT[si*kernel.W*d:(si+1)*kernel.W*d], n, kernel.W, d)
		}
		for r := 0; r < sb.m; r++ {
			row := sTile[r*np : r*np+n]
			for j := range row {
				row[j] = sT[j*kernel.W+r]
			}
		}
	default:
		kernel.PackBt(fw.kt, kv.k, kv.ldk, n, d)
		kern.MulABt(sTile, np, qa, fw.ldq, fw.kt, sb.m, np, d)
	}
}

// softmax turns the S rows of sub-block sb into P: score modifiers, the
// mask (partial tiles only), the online-softmax update of its state rows
// sb.r0.., dropout, and P rounded to the inputs' type before P·V unless the
// native 16-bit products convert it themselves (kv.vh, with the same
// rounding) or the exponential writes it in bfloat16 (expToBF16).
func (f *forwardPass) softmax(ws *workspace, st *rowState, t *fwdTask, sb subBlock, kv kvTile, kind BlockKind, j0, n int) {
	p := f.p
	s := &p.seqs[t.seq]
	np := kernel.Pad(n)
	roundP := p.ct != Float32 && kv.vh == nil
	var ph []uint16
	if f.expToBF16(kv) {
		ph = grow(&ws.fwd.ph, sb.m*np)
	}
	for r := 0; r < sb.m; r++ {
		row := ws.fwd.s[(sb.s0+r)*np : (sb.s0+r+1)*np]
		h, i := t.at(sb.r0 + r)
		fac := p.scoreRow(&ws.row, row, nil, &scoreAt{s, h, i, j0, n, kind})
		var phr []uint16
		if ph != nil {
			phr = ph[r*np : (r+1)*np]
		}
		st.update(&p.kern, sb.r0+r, row, fac, phr)
		if p.dropOn {
			p.drop.ApplyRow(row[:n], s.b, h, i+s.qpos, j0+s.kpos)
		}
		if roundP {
			roundTo(row[:n], p.ct, &p.kern)
		}
	}
}

// expToBF16 reports whether the exponential writes P of tile kv in
// bfloat16 itself (Impl.ExpSumBF16, rows kernel.Pad(n) apart in ws.fwd.ph),
// instead of a float32 tile converted before P·V: the native bfloat16
// product, without dropout (which scales the float32 P after the
// exponential). The bits are the same either way.
func (f *forwardPass) expToBF16(kv kvTile) bool {
	return kv.vh != nil && f.p.ct == BFloat16 && !f.p.dropOn
}

// accumulate adds P·V of sub-block sb (its S rows sb.s0..) to its output
// rows sb.r0.. of st, or stores it there when it is their first product
// (rowState.claim).
func (f *forwardPass) accumulate(ws *workspace, st *rowState, sb subBlock, kv kvTile, j0, n int) {
	p, fw := f.p, &ws.fwd
	np, dvp := kernel.Pad(n), p.dimVPad
	pTile := fw.s[sb.s0*np:]
	switch {
	case kv.inPlace:
		st.claimAdd(sb.r0, sb.m)
		p.decodeAccum(ws, kv.seq, sb, j0, n, np)
	case kv.vh != nil:
		// P in the type, rows of even(n) (the pad column is 0): written
		// by the exponential, rows np apart (expToBF16), or converted
		// here: one conversion for the whole tile when its rows are that
		// long already (n a multiple of W), else one per row.
		ne, lda := even(n), even(n)
		var ph []uint16
		switch {
		case f.expToBF16(kv):
			ph, lda = fw.ph[:sb.m*np], np
		case ne == np:
			ph = grow(&fw.ph, sb.m*ne)
			toHalf(&p.kern, p.ct, ph, pTile[:sb.m*np])
		default:
			ph = grow(&fw.ph, sb.m*ne)
			for r := 0; r < sb.m; r++ {
				toHalf(&p.kern, p.ct, ph[r*ne:(r+1)*ne], pTile[r*np:r*np+ne])
			}
		}
		mul := p.halfMul.MulAdd
		if st.claim(sb.r0, sb.m) {
			mul = p.halfMul.Mul
		}
		mul(fw.acc[sb.r0*dvp:], dvp, ph, lda, kv.vh, kv.ldbV, sb.m, dvp, ne)
	default:
		if kv.v == nil {
			// V rows copied even when they need no padding: in place,
			// rows kilobytes apart share a few L1 sets, and the kernel's
			// column passes would go back to L2 (measured: the copy is
			// faster).
			vr, ld := p.vRows(&ws.conv.in2, kv.seq, j0, sb.hk, n)
			kernel.PackRows(fw.vp, vr, ld, n, p.dimV)
			kv.v, kv.ldv = fw.vp, dvp
		}
		mul := p.kern.MulAddAB
		if st.claim(sb.r0, sb.m) {
			mul = p.kern.MulAB
		}
		mul(fw.acc[sb.r0*dvp:], dvp, pTile, np, kv.v, kv.ldv, sb.m, dvp, n)
	}
}

// finish writes the block's normalised rows of O and their LSE, or, for a
// key split, leaves its unnormalised state in its partial-result slot; the
// rows of o no P·V product wrote are cleared first (rowState.settle).
func (f *forwardPass) finish(ws *workspace, st *rowState, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	m := t.height()
	st.settle(m)
	if t.slot >= 0 {
		return // the state is in its partial-result slot (see start)
	}
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		var oh []uint16 // a bfloat16 O's row: normalised and rounded into it in one pass
		if f.out.dt == BFloat16 {
			oh, _ = f.out.rows16(s.tb, s.q0+i, h)
		}
		var o []float32
		var v float32
		if p.sinks != nil {
			o, v = st.finishSink(&p.kern, r, p.dimV, p.sinks[h], oh)
		} else {
			o, v = st.finish(&p.kern, r, p.dimV, oh)
		}
		// Else O's row from the normalised accumulator row: copied, or
		// converted from it where O is not float32 (no float32 copy
		// between them).
		switch {
		case oh != nil: // written by finish
		case f.out.dt == Float32:
			copy(f.out.row(s.tb, s.q0+i, h), o)
		default:
			f.out.storeRow(o, s.tb, s.q0+i, h, &p.kern)
		}
		if f.lse != nil {
			f.lse[s.lse0+h*s.lseH+i] = v
		}
	}
}

// writePadding writes the rows no task computes, the padding rows of
// VarLen.SeqUsedQ: O = 0 and LSE = −Inf.
func (f *forwardPass) writePadding() {
	p := f.p
	var row []float32
	for _, s := range p.seqs {
		for i := s.nq; i < s.nqAll; i++ {
			for h := 0; h < p.heads; h++ {
				if f.out.dt == Float32 {
					clear(f.out.row(s.tb, s.q0+i, h)[:p.dimV])
				} else {
					row = grow(&row, p.dimV)
					clear(row)
					f.out.storeRow(row, s.tb, s.q0+i, h, &p.kern)
				}
				if f.lse != nil {
					f.lse[s.lse0+h*s.lseH+i] = negInf
				}
			}
		}
	}
}
