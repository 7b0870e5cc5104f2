package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// forward.go is FA2's Algorithm 1: one task per row block (or key split of
// one, see tasks.go), each streaming the K/V tiles its mask leaves visible
// through the online softmax (softmax.go).

// partials holds the unnormalised results of key-split tasks until they are
// merged: per slot, maxRows output rows (stride dimVPad), their running max
// and sum.
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
	mem   fwdMem
}

// fwdMem is what the forward pass keeps from call to call.
type fwdMem struct {
	blocks       []rowBlock
	tasks        []fwdTask
	partO, partM []float32
	partL        []float32
}

func (c *call) forward(out view, lse []float32) error {
	p := &c.plan
	if err := c.appendKV(); err != nil {
		return err
	}
	f := &c.fwd
	*f = forwardPass{p: p, out: out, lse: lse, kv: &c.pack.kv, mem: f.mem}
	tasks, splits, slots := p.forwardTasks(&f.mem.blocks, &f.mem.tasks)
	f.tasks = tasks
	if err := c.pack.run(p, false); err != nil {
		return err
	}
	if slots > 0 {
		f.part = partials{
			o: grow(&f.mem.partO, slots*p.maxRows*p.dimVPad),
			m: grow(&f.mem.partM, slots*p.maxRows),
			l: grow(&f.mem.partL, slots*p.maxRows),
		}
		for i := range f.part.m {
			f.part.m[i] = negInf
		}
	}
	f.writePadding()
	if err := p.parallel(len(tasks), f); err != nil {
		return err
	}
	if slots == 0 {
		return nil
	}
	return c.mergeSplits(splits)
}

func (f *forwardPass) runTask(ws *workspace, t int) { f.task(ws, &f.tasks[t]) }

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
// tiles come from is the sequence's route (kvsource.go).
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
	for j := t.j0; ; {
		j0, j1, kind := nextTile(s.vis, t.rowBlock, j, t.j1, step)
		if j0 >= t.j1 {
			break
		}
		if p.stopped() {
			return
		}
		n, np := j1-j0, kernel.Pad(j1-j0)
		if s.route.from == fromStaged {
			p.stageKV(ws, s, ws.fwd.subs, j0, n, step)
		}
		if s.route.from == fromCacheInPlace && oneRowPerHead(ws.fwd.subs) {
			// Multi-head decoding: the heads of each key are read side by
			// side, in address order, by one call per run of keys.
			subs := ws.fwd.subs
			p.decodeScoresHeads(ws, s, subs, j0, n, np)
			for _, sb := range subs {
				f.softmax(ws, &st, t, sb, kind, j0, n)
			}
			p.decodeAccumHeads(ws, s, subs, j0, n, np)
			j = j1
			continue
		}
		for si, sb := range ws.fwd.subs {
			if s.route.from == fromCacheInPlace {
				p.decodeScores(ws, s, sb, j0, n, np)
				f.softmax(ws, &st, t, sb, kind, j0, n)
				p.decodeAccum(ws, s, sb, j0, n, np)
				continue
			}
			kv := f.keyTile(ws, t.seq, si, sb, j0, n, step)
			f.scores(ws, s, sb, si, kv, n)
			f.softmax(ws, &st, t, sb, kind, j0, n)
			f.accumulate(ws, s, sb, kv, j0, n)
		}
		j = j1
	}
	f.finish(ws, &st, t)
}

// superTask is Algorithm 1 with two-level tiling, for a super-block of
// one head (rows t.i0..t.i1) whose K and V are packed: its microtiles of
// blockQ rows all visit each key tile of up to blockK keys in turn, while
// the tile is in L2, and their Q rows, softmax states and output
// accumulators stay in L2 for the whole task. Per microtile and key tile it
// is the same three steps as task:
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
			sb := subBlock{hk: hk, r0: i0 - t.i0, m: mt.i1 - mt.i0}
			for j := J; ; {
				j0, j1, kind := nextTile(s.vis, mt, j, jEnd, step)
				if j0 >= jEnd {
					break
				}
				n := j1 - j0
				kv := f.keyTile(ws, t.seq, 0, sb, j0, n, step)
				f.microScores(ws, sb, kv, n)
				f.microSoftmax(ws, &st, s, mt, sb.r0, kind, j0, n)
				f.microAccumulate(ws, sb, kv, n)
				j = j1
			}
		}
	}
	f.finish(ws, &st, t)
}

// microScores computes the S tile of a microtile (rows sb.r0.. of the
// super-block's Q) into the first sb.m rows of ws.fwd.s, against packed K.
func (f *forwardPass) microScores(ws *workspace, sb subBlock, kv kvTile, n int) {
	p, fw := f.p, &ws.fwd
	d, np := p.dim, kernel.Pad(n)
	if kv.kh != nil {
		de := even(d)
		p.halfMul.Mul(fw.s, np, fw.qh[sb.r0*de:], de, kv.kh, kernel.W*de, sb.m, np, de)
		return
	}
	p.kern.MulABt(fw.s, np, fw.q[sb.r0*d:], d, kv.kt, sb.m, np, d)
}

// microSoftmax turns the microtile's S rows (rows of ws.fwd.s) into P,
// updating the super-block's softmax state from row st0.
func (f *forwardPass) microSoftmax(ws *workspace, st *rowState, s *sequence, mt rowBlock, st0 int, kind BlockKind, j0, n int) {
	p := f.p
	np := kernel.Pad(n)
	h := mt.h0
	for r := 0; r < mt.i1-mt.i0; r++ {
		row := ws.fwd.s[r*np : (r+1)*np]
		i := mt.i0 + r
		fac := p.scoreRow(&ws.row, row, nil, scoreAt{s, h, i, j0, n, kind})
		st.update(&p.kern, st0+r, row, fac)
		if p.dropOn {
			p.drop.ApplyRow(row[:n], s.b, h, i+s.qpos, j0+s.kpos)
		}
		if p.ct != Float32 && !p.native {
			// P in the inputs' type before P·V (the native products
			// convert P to the type themselves, with the same rounding).
			roundTo(row[:n], p.ct, &p.kern)
		}
	}
}

// microAccumulate adds the microtile's P·V to its output rows.
func (f *forwardPass) microAccumulate(ws *workspace, sb subBlock, kv kvTile, n int) {
	p, fw := f.p, &ws.fwd
	np, dvp := kernel.Pad(n), p.dimVPad
	if kv.vh != nil {
		ne := even(n)
		ph := grow(&fw.ph, sb.m*ne)
		for r := 0; r < sb.m; r++ {
			toHalf(&p.kern, p.ct, ph[r*ne:(r+1)*ne], fw.s[r*np:r*np+ne])
		}
		p.halfMul.MulAdd(fw.acc[sb.r0*dvp:], dvp, ph, ne, kv.vh, kv.ldbV, sb.m, dvp, ne)
		return
	}
	p.kern.MulAddAB(fw.acc[sb.r0*dvp:], dvp, fw.s, np, kv.v, kv.ldv, sb.m, dvp, n)
}

// start loads the block's rows of Q into ws.fwd.q, splits the block into
// sub-blocks by KV head (ws.fwd.subs) and returns the reset softmax state.
func (f *forwardPass) start(ws *workspace, t *fwdTask) rowState {
	p := f.p
	s := &p.seqs[t.seq]
	ws.sizeForward(p)
	fw := &ws.fwd
	m, d := t.height(), p.dim
	st := rowState{m: fw.m, l: fw.l, o: fw.o, dimPad: p.dimVPad}
	if t.slot >= 0 {
		// A key split accumulates in its partial-result slot directly.
		mr := p.maxRows
		st.m, st.l = f.part.m[t.slot*mr:(t.slot+1)*mr], f.part.l[t.slot*mr:(t.slot+1)*mr]
		st.o = f.part.o[t.slot*mr*p.dimVPad : (t.slot+1)*mr*p.dimVPad]
	}
	fw.acc = st.o
	st.reset(m)
	qRows := fw.q[:(m+3)*d] // 3 spare rows: Dot4T reads rows in fours
	for r := 0; r < m; r++ {
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
	nr := t.i1 - t.i0 // rows per head
	subs := fw.subs[:0]
	for h := t.h0; h < t.h0+t.nh; {
		hk := h / p.group
		he := min(t.h0+t.nh, (hk+1)*p.group)
		subs = append(subs, subBlock{hk, (h - t.h0) * nr, (he - h) * nr})
		h = he
	}
	fw.subs = subs
	if p.native {
		// Q in the type, rows of even(d) (the pad column is 0).
		de := even(d)
		qh := grow(&fw.qh, m*de)
		for r := 0; r < m; r++ {
			qh[r*de+de-1] = 0
			toHalf(&p.kern, p.ct, qh[r*de:r*de+d], qRows[r*d:(r+1)*d])
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

// scores computes the S tile of sub-block sb: rows sb.r0.. of ws.fwd.s, n
// keys (padded to a multiple of kernel.W).
func (f *forwardPass) scores(ws *workspace, s *sequence, sb subBlock, si int, kv kvTile, n int) {
	p, fw := f.p, &ws.fwd
	kern, d := &p.kern, p.dim
	np := kernel.Pad(n)
	sTile := fw.s[sb.r0*np:]
	qRows := fw.q[sb.r0*d:]
	switch {
	case kv.kh != nil:
		de := even(d)
		p.halfMul.Mul(sTile, np, fw.qh[sb.r0*de:], de, kv.kh, kernel.W*de, sb.m, np, de)
	case kv.kt != nil:
		kern.MulABt(sTile, np, qRows, d, kv.kt, sb.m, np, d)
	case s.route.sT:
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
		kern.MulABt(sTile, np, qRows, d, fw.kt, sb.m, np, d)
	}
}

// softmax turns the S rows of sub-block sb into P: score modifiers, the
// mask (partial tiles only), the online-softmax update, dropout.
func (f *forwardPass) softmax(ws *workspace, st *rowState, t *fwdTask, sb subBlock, kind BlockKind, j0, n int) {
	p := f.p
	s := &p.seqs[t.seq]
	np := kernel.Pad(n)
	for r := sb.r0; r < sb.r0+sb.m; r++ {
		row := ws.fwd.s[r*np : (r+1)*np]
		h, i := t.at(r)
		f := p.scoreRow(&ws.row, row, nil, scoreAt{s, h, i, j0, n, kind})
		st.update(&p.kern, r, row, f)
		if p.dropOn {
			p.drop.ApplyRow(row[:n], s.b, h, i+s.qpos, j0+s.kpos)
		}
		if p.ct != Float32 {
			roundTo(row[:n], p.ct, &p.kern) // P in the inputs' type before P·V
		}
	}
}

// accumulate adds P·V of sub-block sb to its output rows.
func (f *forwardPass) accumulate(ws *workspace, s *sequence, sb subBlock, kv kvTile, j0, n int) {
	p, fw := f.p, &ws.fwd
	np := kernel.Pad(n)
	if kv.vh != nil {
		// P in the type, rows of even(n) (the pad column is 0).
		ne := even(n)
		ph := grow(&fw.ph, sb.m*ne)
		for r := 0; r < sb.m; r++ {
			toHalf(&p.kern, p.ct, ph[r*ne:(r+1)*ne], fw.s[(sb.r0+r)*np:(sb.r0+r)*np+ne])
		}
		p.halfMul.MulAdd(fw.acc[sb.r0*p.dimVPad:], p.dimVPad, ph, ne, kv.vh, kv.ldbV, sb.m, p.dimVPad, ne)
		return
	}
	if kv.v == nil {
		// V rows copied even when they need no padding: in place, rows
		// kilobytes apart share a few L1 sets, and the kernel's column
		// passes would go back to L2 (measured: the copy is faster).
		vr, ld := p.vRows(&ws.conv.in2, s, j0, sb.hk, n)
		kernel.PackRows(fw.vp, vr, ld, n, p.dimV)
		kv.v, kv.ldv = fw.vp, p.dimVPad
	}
	p.kern.MulAddAB(fw.acc[sb.r0*p.dimVPad:], p.dimVPad, fw.s[sb.r0*np:], np, kv.v, kv.ldv, sb.m, p.dimVPad, n)
}

// finish writes the block's normalised rows of O and their LSE, or, for a
// key split, its unnormalised state to its partial-result slot.
func (f *forwardPass) finish(ws *workspace, st *rowState, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	m := t.height()
	if t.slot >= 0 {
		return // the state is in its partial-result slot (see start)
	}
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		o := ws.outRow(f.out, s.tb, s.q0+i, h, p.dimV)
		var v float32
		if p.sinks != nil {
			v = st.finishSink(r, o, p.dimV, p.sinks[h])
		} else {
			v = st.finish(r, o, p.dimV)
		}
		f.out.commit(o, s.tb, s.q0+i, h, &p.kern)
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
