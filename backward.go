package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// backward.go is FA2's Algorithm 2. The backward runs in up to three
// parallel passes:
//
//   - rows (bwdrows.go): D = rowsum(dO∘O) of every query row, Q and dO
//     packed once (and the LSE correction of lsefix.go where |LSE| is
//     large);
//   - KV: FA2's Algorithm 2, parallel over KV blocks: each task owns the
//     dK, dV rows of its blocks and streams the query tiles that see them;
//   - dQ (dqpass.go): when the KV pass cannot also accumulate dQ, a pass
//     over query blocks that recomputes S, P, dP and dS and streams the KV
//     blocks.
//
// With enough (sequence, KV head) pairs for the workers (4 per worker), a
// KV task takes all the blocks of one pair, in order, and also sums dQ (one
// pass, FA2's form). With fewer, a KV task is one block, so there are
// enough of them however few pairs there are, and dQ comes from the dQ pass
// (FA2's alternative: 2 more of the 7 tile products, no dQ partial sums),
// whose query blocks are super-blocks of microtiles where K and V do not
// fit in the cache (tiling.dqTasks).
// Both forms add the same products in the same order — dQ of a row is the
// sum over KV blocks in ascending order of dS·K — so the results are
// bit-identical whichever runs, for any number of workers.

// gradViews holds the backward's extra inputs and its outputs.
type gradViews struct {
	o, do, dq, dk, dv view
	lse               []float32
	dlse              []float32 // nil, or the loss's gradient with respect to LSE
	sinks, dsinks     []float32 // Options.Sinks, and where their gradient goes (nil: not wanted)
	bias              *Bias     // Options.ScoreMod when DBias is wanted
	dbias             []float32 // where the bias's gradient goes (nil: not wanted)
	accumulate        bool      // add to dq, dk, dv, dsinks, dbias
}

// checkBackwardOperands refuses gradients that share memory with another
// operand of the call.
func (c *call) checkBackwardOperands(o *Options, g *Grads) error {
	c.ops = callOperands(c.ops[:0], &c.plan.operands, o, false, nil, &c.bwd.grads, g)
	return checkOperands(c.ops)
}

// backwardPass is the KV pass; its fields are shared by the other two.
type backwardPass struct {
	p      *plan
	grads  gradViews
	tasks  []bwdTask
	withDQ bool
	kv     *packedKV
	qPack  *queryPack
	delta  []float32   // D = rowsum(dO∘O) per LSE entry
	corr   []float32   // per LSE entry: the factor that makes the row's P exact (nil: all 1)
	sinkD  []sinkRow   // per LSE entry: the sink gradient's D (nil: not wanted; sinkgrad.go)
	dbiasT []dbiasTask // the bias gradient's pass (dbias.go)
	// dkAcc and dvAcc are where dK and dV accumulate: the outputs
	// themselves when float32, else float32 buffers rounded at the end.
	dkAcc, dvAcc view
	mem          bwdMem
}

// bwdMem is what the KV pass keeps from call to call.
type bwdMem struct {
	tasks  []bwdTask
	delta  []float32
	sinkD  []sinkRow
	dkvAcc []float32
	dbiasT []dbiasTask
}

func (c *call) backward() error {
	p, b := &c.plan, &c.bwd
	b.p = p
	b.dkAcc, b.dvAcc = b.grads.dk, b.grads.dv
	if b.dkAcc.dt != Float32 || b.dvAcc.dt != Float32 {
		n := p.kvBatch * p.kvRows * p.kvHeads
		buf := grow(&b.mem.dkvAcc, n*(p.dim+p.dimV))
		b.dkAcc, b.dvAcc = denseView(buf[:n*p.dim], b.grads.dk.shape), denseView(buf[n*p.dim:], b.grads.dv.shape)
	}
	// Keys that no query sees (and keys past SeqUsedK) get zero gradients,
	// or keep what they hold when accumulating.
	if b.grads.accumulate {
		b.loadKV()
	} else {
		b.clearKV()
	}
	b.delta = grow(&b.mem.delta, p.lseLen)
	b.sinkD = b.sinkRows()
	if err := c.rows.run(b); err != nil {
		return err
	}
	b.qPack = &c.rows.pack
	if err := c.pack.run(p, true); err != nil {
		return err
	}
	b.kv = &c.pack.kv
	if err := c.lseFix.run(b); err != nil {
		return err
	}
	b.tasks, b.withDQ = p.backwardTasks(&b.mem.tasks, p.workers)
	if err := p.parallel(len(b.tasks), b); err != nil {
		return err
	}
	b.storeKV()
	if !b.withDQ {
		if err := c.dq.run(b); err != nil {
			return err
		}
	}
	if !b.grads.accumulate {
		b.clearUnwrittenDQ()
	}
	b.storeSinks()
	return b.storeBias()
}

// loadKV fills 16-bit outputs' float32 accumulators with the gradients the
// outputs hold (Grads.Accumulate); float32 outputs accumulate in place.
func (b *backwardPass) loadKV() { b.copyKV(false) }

// storeKV rounds the float32 dK and dV accumulators into 16-bit outputs.
func (b *backwardPass) storeKV() { b.copyKV(true) }

// copyKV copies every row between the float32 dK and dV accumulators and
// the 16-bit outputs they stand for: into the outputs (rounding) if store,
// else from them. Float32 outputs are their own accumulators.
func (b *backwardPass) copyKV(store bool) {
	p := b.p
	for _, pair := range [2][2]view{{b.dkAcc, b.grads.dk}, {b.dvAcc, b.grads.dv}} {
		acc, out := pair[0], pair[1]
		if out.dt == Float32 {
			continue
		}
		for tb := 0; tb < p.kvBatch; tb++ {
			for j := 0; j < p.kvRows; j++ {
				for h := 0; h < p.kvHeads; h++ {
					row := acc.row(tb, j, h)[:acc.shape[3]]
					if store {
						out.storeRow(row, tb, j, h, &p.kern)
					} else {
						out.rowTo(row, tb, j, h, Float32, &p.kern)
					}
				}
			}
		}
	}
}

// clearUnwrittenDQ zeroes the dQ rows that no task writes: the padding rows
// of VarLen.SeqUsedQ and every row of a sequence without keys.
func (b *backwardPass) clearUnwrittenDQ() {
	p, dq := b.p, b.grads.dq
	var row []float32
	for _, s := range p.seqs {
		i0 := s.nq
		if s.nk == 0 {
			i0 = 0
		}
		for i := i0; i < s.nqAll; i++ {
			for h := 0; h < p.heads; h++ {
				if dq.dt == Float32 {
					clear(dq.row(s.tb, s.q0+i, h)[:p.dim])
					continue
				}
				row = grow(&row, p.dim)
				clear(row)
				dq.storeRow(row, s.tb, s.q0+i, h, &p.kern)
			}
		}
	}
}

// clearKV zeroes the dK and dV accumulators.
func (b *backwardPass) clearKV() {
	p := b.p
	for _, dst := range []view{b.dkAcc, b.dvAcc} {
		for tb := 0; tb < p.kvBatch; tb++ {
			for j := 0; j < p.kvRows; j++ {
				for h := 0; h < p.kvHeads; h++ {
					clear(dst.row(tb, j, h)[:dst.shape[3]])
				}
			}
		}
	}
}

func (b *backwardPass) runTask(ws *workspace, t int) { b.task(ws, &b.tasks[t]) }

// task runs FA2's Algorithm 2 for the KV blocks of one task, for each query
// head of its KV head in turn (one head's dK, dV contributions are added
// before the next head's). Summing dQ too (one pass), it keeps the head's
// dQ rows for all its blocks.
func (b *backwardPass) task(ws *workspace, u *bwdTask) {
	p := b.p
	s := &p.seqs[u.seq]
	ws.sizeBackward(p)
	d, dpad := p.dim, p.dimPad
	for hh := 0; hh < p.group; hh++ {
		h := u.hk*p.group + hh
		hr := b.headRows(u.seq, h)
		if b.withDQ {
			hr.dq = grow(&ws.bwd.dq, s.nq*dpad)
			clear(hr.dq)
		} else {
			hr.sinkD = nil // the dQ pass sums Σ P·dP, a query block per task
		}
		for kb := u.kb0; kb < u.kb1; kb++ {
			j0 := kb * p.bwdBlockK
			b.keyBlock(ws, keyBlockAt{s: s, seq: u.seq, h: h, hk: u.hk, j0: j0, n: min(p.bwdBlockK, s.nk-j0)}, &hr)
		}
		if b.withDQ {
			for i := 0; i < s.nq; i++ {
				b.storeDQ(ws, s, h, i, hr.dq[i*dpad:i*dpad+d])
			}
		}
	}
}

// storeDQ writes scale·acc as row i of head h's dQ (by kern.Scale where
// len(acc) is a multiple of kernel.W), or adds it (Grads.Accumulate).
func (b *backwardPass) storeDQ(ws *workspace, s *sequence, h, i int, acc []float32) {
	p, dq := b.p, b.grads.dq
	dst := ws.outRow(dq, s.tb, s.q0+i, h, p.dim)
	if b.grads.accumulate {
		if dq.dt != Float32 {
			dq.rowTo(dst, s.tb, s.q0+i, h, Float32, &p.kern)
		}
		for c, x := range acc {
			dst[c] += p.scale * x
		}
	} else if len(acc)%kernel.W == 0 {
		// The same products, by the kernel: one rounding of scale·x.
		copy(dst, acc)
		p.kern.Scale(dst[:len(acc)], p.scale)
	} else {
		for c, x := range acc {
			dst[c] = p.scale * x
		}
	}
	dq.commit(dst, s.tb, s.q0+i, h, &p.kern)
}

// headRows is one query head's per-row data in the backward: D, LSE and
// the LSE correction of every row; when the KV pass sums dQ, the head's dQ
// accumulator (rows of dimPad), else nil.
type headRows struct {
	delta, lse, dq []float32
	dlse           []float32 // nil, or the loss's gradient with respect to LSE
	corr           []float32 // nil, or the LSE correction factors (see lsefix.go)
	sinkD          []sinkRow // nil, or where the pass that sums dQ adds Σ P·dP and Σ P (sinkgrad.go)
	base, unit     int       // the head's first row in the packed Q and dO; its seq·heads+h
}

// headRows returns the rows of head h of sequence si.
func (b *backwardPass) headRows(si, h int) headRows {
	s := &b.p.seqs[si]
	lo, hi := s.lse0+h*s.lseH, s.lse0+h*s.lseH+s.nq
	r := headRows{delta: b.delta[lo:hi], lse: b.grads.lse[lo:hi], base: lo, unit: si*b.p.heads + h}
	if b.corr != nil {
		r.corr = b.corr[lo:hi]
	}
	if b.sinkD != nil && b.grads.o.dt != Float32 {
		r.sinkD = b.sinkD[lo:hi]
	}
	if b.grads.dlse != nil {
		r.dlse = b.grads.dlse[lo:hi]
	}
	return r
}

// keyBlockAt is a KV block of the backward: keys [j0, j0+n) of KV head hk
// of sequence s (the seq-th), seen from query head h.
type keyBlockAt struct {
	s         *sequence
	seq, h    int
	hk, j0, n int
}

// tileAt is where a backward tile sits: query rows [i0, i1) of head h of
// sequence s against keys [j0, j0+n), of the given kind.
type tileAt struct {
	s      *sequence
	h      int
	i0, i1 int
	j0, n  int
	kind   BlockKind
}

// rows is the number of query rows of the tile.
func (t tileAt) rows() int { return t.i1 - t.i0 }

// row is where row r of the tile sits.
func (t tileAt) row(r int) scoreAt { return scoreAt{t.s, t.h, t.i0 + r, t.j0, t.n, t.kind} }

// keyBlock is Algorithm 2's inner loop for KV block kb against its query
// head: for each query tile that sees the block,
//
//	S = Q·Kᵀ, dP = dO·Vᵀ                    recompute
//	P = exp(mask(mods(scale·S)) − LSE)      (dropout: P̃, dP̃)
//	dS = P∘(dP − D)·mods′                   softmax and modifier chain rule
//	dV += P̃ᵀ·dO, dK += dSᵀ·Q, dQ += dS·K
//
// then adds the block's dV and scale·dK to the accumulators (dQ is scaled
// when it is written). Where the accumulators' rows of the block still
// hold +0 (see blockGrads) the products add into them in place and dK is
// scaled there: 0 + x is x, so the bits are the same.
func (b *backwardPass) keyBlock(ws *workspace, kb keyBlockAt, hr *headRows) {
	p := b.p
	tiles := p.queryTiles(kb.s, kb.h, kb.j0, kb.n)
	if tiles.empty() {
		return
	}
	blk := b.kv.backwardTile(kb.seq, kb.hk, kb.j0, kb.n)
	g := b.blockGrads(ws, kb)
	for at, ok := tiles.next(); ok; at, ok = tiles.next() {
		qt := b.queryTile(hr, at.i0, at.i1)
		b.gradTile(ws, &blk, &qt, at, hr)
		var dq []float32
		if hr.dq != nil {
			dq = hr.dq[at.i0*p.dimPad:]
		}
		b.tileGrads(ws, &blk, &qt, at, &g, dq)
	}
	b.addBlockGrads(kb, &g)
}

// blockGrads is where a KV block's dK and dV products add up: rows of
// stride ldk and ldv, in place in the accumulators (inPlace) or in the
// workspace (cleared), whose sums addBlockGrads adds to them.
type blockGrads struct {
	dk, dv   []float32
	ldk, ldv int
	inPlace  bool
}

// blockGrads returns where the products of KV block kb add up: in place
// when the accumulators' rows of the block are still +0 — not accumulating
// (clearKV), the first query head of the KV head (a block belongs to one
// task), float32 rows without padding columns — else in cleared
// workspace buffers.
func (b *backwardPass) blockGrads(ws *workspace, kb keyBlockAt) blockGrads {
	p, s := b.p, kb.s
	dk, dv := b.dkAcc, b.dvAcc
	if !b.grads.accumulate && kb.h%p.group == 0 && p.dim == p.dimPad && p.dimV == p.dimVPad &&
		dk.ss >= p.dim && dv.ss >= p.dimV {
		j := s.k0 + kb.j0
		return blockGrads{
			dk: dk.row(s.kvb, j, kb.hk)[:(kb.n-1)*dk.ss+p.dim], ldk: dk.ss,
			dv: dv.row(s.kvb, j, kb.hk)[:(kb.n-1)*dv.ss+p.dimV], ldv: dv.ss,
			inPlace: true,
		}
	}
	dpad, dvpad := p.dimPad, p.dimVPad
	g := blockGrads{dk: ws.bwd.dk[:kb.n*dpad], dv: ws.bwd.dv[:kb.n*dvpad], ldk: dpad, ldv: dvpad}
	clear(g.dk)
	clear(g.dv)
	return g
}

// addBlockGrads finishes KV block kb's dK and dV: scale·dK in place, or
// the workspace sums g added to the accumulators (dV, scale·dK).
func (b *backwardPass) addBlockGrads(kb keyBlockAt, g *blockGrads) {
	p, s := b.p, kb.s
	d, dv := p.dim, p.dimV
	dropV := p.ct != Float32 && p.dropOn // dV summed P∘z·dO (gradRow): × 1/(1−p)
	for jj := 0; jj < kb.n; jj++ {
		dK := g.dk[jj*g.ldk : jj*g.ldk+d]
		dV := g.dv[jj*g.ldv : jj*g.ldv+dv]
		if dropV {
			for c := range dV {
				dV[c] *= p.drop.Scale()
			}
		}
		if g.inPlace {
			p.kern.Scale(dK, p.scale)
			continue
		}
		dkr := b.dkAcc.row(s.kvb, s.k0+kb.j0+jj, kb.hk)[:d]
		dvr := b.dvAcc.row(s.kvb, s.k0+kb.j0+jj, kb.hk)[:dv]
		for c := range dkr {
			dkr[c] += p.scale * dK[c]
		}
		for c := range dvr {
			dvr[c] += dV[c]
		}
	}
}

// gradTile computes, for the tile at against the packed KV block blk, P
// (ws.bwd.s; P̃ in ws.bwd.pDrop with dropout) and dS (ws.bwd.dP).
func (b *backwardPass) gradTile(ws *workspace, blk *bwdTile, qt *qTile, at tileAt, hr *headRows) {
	b.tileScores(ws, blk, qt, at.rows(), at.n)
	a := at.row(0) // one copy per tile: row r differs only in i
	for r := 0; r < at.rows(); r++ {
		a.i = at.i0 + r
		b.gradRow(ws, &a, r, hr)
	}
}

// gradRow turns row r of the S and dP tiles (the score row at) into P (in
// ws.bwd.s, and P̃ in ws.bwd.pDrop with dropout) and dS (in ws.bwd.dP):
// scoreGrad's dS times the modifiers' derivative, rounded to the compute
// type.
func (b *backwardPass) gradRow(ws *workspace, at *scoreAt, r int, hr *headRows) {
	p, bw := b.p, &ws.bwd
	n, np := at.n, kernel.Pad(at.n)
	grad := b.scoreGrad(ws, at, r, hr)
	dpRow := bw.dP[r*np : (r+1)*np]
	for c, x := range grad[:min(len(grad), n)] {
		// Where P is 0 (hidden, or a score the modifiers sent to −Inf) dS
		// is 0 whatever the modifiers' derivative there, NaN or Inf
		// included: those positions take no part in the chain rule.
		if d := dpRow[c]; d != 0 {
			dpRow[c] = d * x
		}
	}
	if p.ct != Float32 {
		// P and dS in the inputs' type before they multiply. With dropout
		// P̃ = P∘z/(1−p) multiplies dO as P∘z, P rounded (the same-type
		// algorithm's, and flash-attn's, rounding: not P̃'s), and
		// addBlockGrads scales dV by 1/(1−p).
		pr := bw.s[r*np : r*np+n]
		if p.dropOn {
			pr = bw.pDrop[r*np : r*np+n]
			for c, z := range bw.drop[:n] { // this row's z/(1−p), from scoreGrad
				pr[c] = 0
				if z != 0 {
					pr[c] = bw.s[r*np+c]
				}
			}
		}
		roundTo(pr, p.ct, &p.kern)
		roundTo(dpRow[:n], p.ct, &p.kern)
	}
}

// scoreGrad turns row r of the S and dP tiles (the score row at) into P (in
// ws.bwd.s, and P̃ in ws.bwd.pDrop with dropout) and the gradient with
// respect to the modified scores, dS = P∘(dP − D) (in ws.bwd.dP; the
// gradient of a Bias, which is added last), and returns the modifiers'
// derivative for the row (nil when it is 1).
func (b *backwardPass) scoreGrad(ws *workspace, at *scoreAt, r int, hr *headRows) (grad []float32) {
	p, bw := b.p, &ws.bwd
	kern := &p.kern
	i, n := at.i, at.n
	np := kernel.Pad(n)
	row := bw.s[r*np : (r+1)*np]
	if p.mods.curved() {
		grad = bw.grad[r*np : (r+1)*np]
	}
	f := p.scoreRow(&ws.row, row, grad, at)
	var sum float32
	if hr.lse[i] == negInf { // the row sees no key at all
		clear(row)
	} else {
		sum = kern.ExpSum(row, f, hr.lse[i])
		if hr.corr != nil && hr.corr[i] != 1 {
			kern.Scale(row, hr.corr[i])
			sum *= hr.corr[i]
		}
	}
	dpRow := bw.dP[r*np : (r+1)*np]
	if p.dropOn {
		pd := bw.pDrop[r*np : (r+1)*np]
		copy(pd, row)
		// One mask for both: P̃ = P∘z/(1-p) and dP = dP̃∘z/(1-p).
		f := bw.drop[:n]
		for c := range f {
			f[c] = 1
		}
		p.drop.ApplyRow(f, at.s.b, at.h, i+at.s.qpos, at.j0+at.s.kpos)
		for c, x := range f {
			pd[c] *= x
			dpRow[c] *= x
		}
	}
	hr.addSinkD(i, row[:n], dpRow[:n])
	kern.DsFromDp(dpRow, row, hr.delta[i])
	if sum >= 1 {
		// Where P rounds to exactly 1 the other probabilities of the row
		// sum to less than 2⁻²³, and dS = P·(dP − D) = −Σ_k P_k·(dP_k − dP)
		// is below the rounding of dP itself: 0 (plus dLSE, whose term
		// P·dLSE stays). Computed as dP − D it would be the difference of
		// two independently rounded dot products (D = dO·O in float64, dP
		// by the kernel).
		var dl float32
		if hr.dlse != nil {
			dl = hr.dlse[i]
		}
		for c, x := range row[:n] {
			if x == 1 {
				dpRow[c] = dl
			}
		}
	}
	return grad
}
