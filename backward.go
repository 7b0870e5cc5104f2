package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// Backward computes the gradients of attention with respect to q, k and v
// for the upstream gradient dout, given the forward's inputs, its output out
// and its lse, and the same options. P is recomputed tile by tile from q, k
// and lse (FA2's backward): no seqlen_q × seqlen_k matrix is stored. With
// GQA/MQA, dk and dv sum over the query heads that share a KV head. The
// gradients have the element types of q, k and v; they are accumulated in
// float32 and rounded once.
func Backward(q, k, v, out, dout Tensor, lse []float32, opts *Options) (dq, dk, dv Tensor, err error) {
	dq = NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, q.Dim)
	dk = NewTensorOf(k.DType(), k.Batch, k.Seq, k.Heads, k.Dim)
	dv = NewTensorOf(v.DType(), v.Batch, v.Seq, v.Heads, v.Dim)
	if err := BackwardInto(dq, dk, dv, q, k, v, out, dout, lse, opts); err != nil {
		return Tensor{}, Tensor{}, Tensor{}, err
	}
	return dq, dk, dv, nil
}

// BackwardInto is Backward writing into caller-owned gradients dq (shaped
// like q), dk and dv (shaped like k). The gradients must not share memory
// with any input or with each other; they may be interleaved views of one
// buffer (PackedQKV of a gradient buffer). Repeated calls allocate nothing.
func BackwardInto(dq, dk, dv Tensor, q, k, v, out, dout Tensor, lse []float32, opts *Options) error {
	if opts != nil && opts.KVCache != nil {
		return argErr("Options.KVCache", "Backward does not take a KVCache (decoding is inference only)")
	}
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return err
	}
	defer c.release()
	g := &c.bwd.grads
	B, Sq, H, D, Sk, Hk := q.Batch, q.Seq, q.Heads, q.Dim, k.Seq, k.Heads
	for _, t := range []struct {
		dst        *view
		t          Tensor
		name       string
		output     bool
		b, s, h, d int
	}{
		{&g.o, out, "out", false, B, Sq, H, D},
		{&g.do, dout, "dout", false, B, Sq, H, D},
		{&g.dq, dq, "dq", true, B, Sq, H, D},
		{&g.dk, dk, "dk", true, B, Sk, Hk, D},
		{&g.dv, dv, "dv", true, B, Sk, Hk, D},
	} {
		if *t.dst, err = t.t.check(t.name, t.output, t.b, t.s, t.h, t.d); err != nil {
			return err
		}
	}
	if len(lse) < c.plan.lseLen {
		return argErr("lse", "lse has %d elements, want %d", len(lse), c.plan.lseLen)
	}
	for _, x := range []struct {
		v    view
		name string
	}{{g.dq, "dq"}, {g.dk, "dk"}, {g.dv, "dv"}, {g.o, "out"}, {g.do, "dout"}} {
		if x.v.dt == Q8_0 {
			return argErr(x.name, "%s cannot be q8_0 (a cache format)", x.name)
		}
	}
	g.lse = lse
	if err := c.checkBackwardOutputs(); err != nil {
		return err
	}
	return c.backward()
}

// gradViews holds the backward's extra inputs and its outputs.
type gradViews struct {
	o, do, dq, dk, dv view
	lse               []float32
}

func (c *call) checkBackwardOutputs() error {
	p, g := &c.plan, &c.bwd.grads
	outs := []named{namedView("dq", "", g.dq), namedView("dk", "", g.dk), namedView("dv", "", g.dv)}
	ins := []named{namedView("q", "", p.q), namedView("k", "", p.kv.k), namedView("v", "", p.kv.v),
		namedView("out", "", g.o), namedView("dout", "", g.do), namedSlice("lse", g.lse[:p.lseLen])}
	return checkOutputs(outs, ins)
}

// The backward runs in up to three parallel passes:
//
//   - rows: D = rowsum(dO∘O) of every query row (and the LSE correction of
//     lsefix.go where |LSE| is large);
//   - KV: FA2's Algorithm 2, parallel over KV blocks: each task owns the
//     dK, dV rows of its blocks and streams the query tiles that see them;
//   - dQ: when the KV pass cannot also accumulate dQ, a pass over query
//     blocks that recomputes S, P, dP and dS and streams the KV blocks.
//
// With enough (sequence, KV head) pairs for the workers (4 per worker), a
// KV task takes all the blocks of one pair, in order, and also sums dQ (one
// pass, FA2's form). With fewer, a KV task is one block, so there are
// enough of them however few pairs there are, and dQ comes from the dQ pass
// (FA2's alternative: 2 more of the 7 tile products, no dQ partial sums).
// Both forms add the same products in the same order — dQ of a row is the
// sum over KV blocks in ascending order of dS·K — so the results are
// bit-identical whichever runs, for any number of workers.

// bwdTask is one task of the KV pass: the KV blocks [kb0, kb1) of KV head
// hk of sequence seq, for every query head of hk.
type bwdTask struct {
	seq, hk  int
	kb0, kb1 int
}

// unitsPerWorker is the number of tasks per worker below which a pass is
// split finer.
const unitsPerWorker = 4

// backwardTasks lists the KV pass's tasks, and whether they also sum dQ.
func (c *call) backwardTasks() (tasks []bwdTask, withDQ bool) {
	p, a := &c.plan, &c.arena
	tasks = a.bwdTasks[:0]
	defer func() { a.bwdTasks = tasks }()
	pairs := 0
	for _, s := range p.seqs {
		if s.nq > 0 && s.nk > 0 {
			pairs += p.kvHeads
		}
	}
	withDQ = pairs >= unitsPerWorker*p.workers
	for si, s := range p.seqs {
		if s.nq == 0 || s.nk == 0 {
			continue
		}
		nkb := (s.nk + p.bwdBlockK - 1) / p.bwdBlockK
		for hk := 0; hk < p.kvHeads; hk++ {
			if withDQ {
				tasks = append(tasks, bwdTask{si, hk, 0, nkb})
				continue
			}
			for kb := 0; kb < nkb; kb++ {
				tasks = append(tasks, bwdTask{si, hk, kb, kb + 1})
			}
		}
	}
	return tasks, withDQ
}

// backwardPass is the KV pass; its fields are shared by the other two.
type backwardPass struct {
	p      *plan
	grads  gradViews
	tasks  []bwdTask
	withDQ bool
	kv     *packedKV
	qp     queryPack
	delta  []float32 // D = rowsum(dO∘O) per LSE entry
	corr   []float32 // per LSE entry: the factor that makes the row's P exact (nil: all 1)
	// dkAcc and dvAcc are where dK and dV accumulate: the outputs
	// themselves when float32, else float32 buffers rounded at the end.
	dkAcc, dvAcc view
}

func (c *call) backward() error {
	p, a, b := &c.plan, &c.arena, &c.bwd
	b.p = p
	b.dkAcc, b.dvAcc = b.grads.dk, b.grads.dv
	if b.dkAcc.dt != Float32 || b.dvAcc.dt != Float32 {
		n := p.kv.batch * p.kv.rows * p.kvHeads * p.dim
		buf := grow(&a.dkvAcc, 2*n)
		b.dkAcc, b.dvAcc = denseView(buf[:n], b.grads.dk.shape), denseView(buf[n:], b.grads.dv.shape)
	}
	// Keys that no query sees (and keys past SeqUsedK) get zero gradients.
	b.clearKV()
	b.delta = grow(&a.delta, p.lseLen)
	c.allocQueryPack()
	c.rows = rowsPass{b: b, tasks: c.headTasks()}
	if err := parallel(p.workers, len(c.rows.tasks), &c.rows); err != nil {
		return err
	}
	if err := c.fixLSE(); err != nil {
		return err
	}
	if err := c.packKV(true); err != nil {
		return err
	}
	b.kv = &c.kv
	b.tasks, b.withDQ = c.backwardTasks()
	if err := parallel(p.workers, len(b.tasks), b); err != nil {
		return err
	}
	b.storeKV()
	if b.withDQ {
		return nil
	}
	c.dq = dqPass{b: b, tasks: c.dqTasks()}
	return parallel(p.workers, len(c.dq.tasks), &c.dq)
}

// headTasks lists (sequence, query head) pairs that have query rows.
func (c *call) headTasks() []rowBlock {
	p, a := &c.plan, &c.arena
	tasks := a.blocks[:0]
	for si := range p.seqs {
		if s := &p.seqs[si]; s.nq > 0 {
			for h := 0; h < p.heads; h++ {
				tasks = append(tasks, rowBlock{si, h, 1, 0, s.nq})
			}
		}
	}
	a.blocks = tasks
	return tasks
}

// rowsPass prepares every query row of one (sequence, head) per task: it
// packs Q and dO once for all the KV blocks that read them (float32 rows
// padded to dimPad, or the native products' 16-bit operands), and computes
// D = rowsum(dO∘O) in float64, rounded once, from dO in the compute type.
type rowsPass struct {
	b     *backwardPass
	tasks []rowBlock
}

// queryPack is the backward's packed Q and dO. Row (sequence s, head h, i)
// is row s.lse0 + h·s.lseH + i (its LSE index) of q and do (float32, rows of
// dimPad) or of qh and doh (native, rows of even(dim)); native B operands
// qv, dov hold one VNNI matrix per (sequence, head) at vOff[seq·heads+h],
// k = the rows, strip stride vLdb[seq·heads+h].
type queryPack struct {
	q, do      []float32
	qh, doh    []uint16
	qv, dov    []uint16
	vOff, vLdb []int
}

func (r *rowsPass) run(ws *workspace, t int) {
	b, rb := r.b, r.tasks[t]
	p, g, qp := b.p, &b.grads, &b.qp
	s := &p.seqs[rb.seq]
	h, d, dp, base := rb.h0, p.dim, p.dimPad, s.lse0+rb.h0*s.lseH
	o, do := grow(&ws.convO, d), grow(&ws.convV, d)
	for i := 0; i < s.nq; i++ {
		g.o.rowTo(o, s.tb, s.q0+i, h, Float32, &p.kern)
		g.do.rowTo(do, s.tb, s.q0+i, h, p.ct, &p.kern)
		b.delta[base+i] = dot64(do, o)
	}
	if !p.native {
		for _, x := range []struct {
			v   view
			dst []float32
		}{{p.q, qp.q}, {g.do, qp.do}} {
			rows, ld := x.v.rows(&ws.convK, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
			kernel.PackRows(x.dst[base*dp:], rows, ld, s.nq, d)
		}
		return
	}
	de, u := even(d), rb.seq*p.heads+h
	for _, x := range []struct {
		v     view
		a, bv []uint16
	}{{p.q, qp.qh, qp.qv}, {g.do, qp.doh, qp.dov}} {
		packVNNIRows(p, x.v, &ws.convK, s.tb, s.q0, h, x.bv[qp.vOff[u]:], qp.vLdb[u], 0, s.nq, d, false)
		a := x.a[base*de : (base+s.nq)*de]
		if x.v.dt == p.ct {
			src, ld := x.v.rows16(s.tb, s.q0, h)
			for r := 0; r < s.nq; r++ {
				copy(a[r*de:r*de+d], src[r*ld:r*ld+d])
			}
		} else {
			rows, ld := x.v.rows(&ws.convK, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
			for r := 0; r < s.nq; r++ {
				toHalf(&p.kern, p.ct, a[r*de:r*de+d], rows[r*ld:r*ld+d])
			}
		}
		if d%2 != 0 {
			for r := 0; r < s.nq; r++ {
				a[r*de+d] = 0 // the pad column
			}
		}
	}
}

// allocQueryPack sizes the packed Q and dO from the arena.
func (c *call) allocQueryPack() {
	p, a, qp := &c.plan, &c.arena, &c.bwd.qp
	if !p.native {
		qp.q, qp.do = grow(&a.qPack, p.lseLen*p.dimPad), grow(&a.doPack, p.lseLen*p.dimPad)
		return
	}
	de := even(p.dim)
	qp.qh, qp.doh = grow(&a.qhPack, p.lseLen*de), grow(&a.dohPack, p.lseLen*de)
	n := len(p.seqs) * p.heads
	qp.vOff, qp.vLdb = grow(&a.qvOff, n), grow(&a.qvLdb, n)
	total := 0
	for si := range p.seqs {
		for h := 0; h < p.heads; h++ {
			u := si*p.heads + h
			qp.vOff[u], qp.vLdb[u] = total, kernel.W*even(p.seqs[si].nq)
			total += p.dimPad / kernel.W * qp.vLdb[u]
		}
	}
	qp.qv, qp.dov = grow(&a.qvPack, total), grow(&a.dovPack, total)
}

// clearKV zeroes the dK and dV accumulators.
func (b *backwardPass) clearKV() {
	p := b.p
	for _, dst := range []view{b.dkAcc, b.dvAcc} {
		for tb := 0; tb < p.kv.batch; tb++ {
			for j := 0; j < p.kv.rows; j++ {
				for h := 0; h < p.kvHeads; h++ {
					clear(dst.row(tb, j, h)[:p.dim])
				}
			}
		}
	}
}

// storeKV rounds the float32 dK and dV accumulators into 16-bit outputs.
func (b *backwardPass) storeKV() {
	p := b.p
	for _, pair := range [2][2]view{{b.dkAcc, b.grads.dk}, {b.dvAcc, b.grads.dv}} {
		acc, dst := pair[0], pair[1]
		if dst.dt == Float32 {
			continue
		}
		for tb := 0; tb < p.kv.batch; tb++ {
			for j := 0; j < p.kv.rows; j++ {
				for h := 0; h < p.kvHeads; h++ {
					dst.storeRow(acc.row(tb, j, h)[:p.dim], tb, j, h, &p.kern)
				}
			}
		}
	}
}

func (b *backwardPass) run(ws *workspace, t int) { b.task(ws, &b.tasks[t]) }

// task runs FA2's Algorithm 2 for the KV blocks of one task, for each query
// head of its KV head in turn (one head's dK, dV contributions are added
// before the next head's). Summing dQ too (one pass), it keeps the head's
// dQ rows for all its blocks.
func (b *backwardPass) task(ws *workspace, u *bwdTask) {
	p := b.p
	s := &p.seqs[u.seq]
	ws.forBackward(p)
	d, dp := p.dim, p.dimPad
	for hh := 0; hh < p.group; hh++ {
		h := u.hk*p.group + hh
		rows := b.headRows(u.seq, h)
		if b.withDQ {
			rows.dq = grow(&ws.dq, s.nq*dp)
			clear(rows.dq)
		}
		for kb := u.kb0; kb < u.kb1; kb++ {
			j0 := kb * p.bwdBlockK
			b.keyBlock(ws, s, u.seq, h, u.hk, j0, min(p.bwdBlockK, s.nk-j0), &rows)
		}
		if b.withDQ {
			for i := 0; i < s.nq; i++ {
				b.storeDQ(ws, s, h, i, rows.dq[i*dp:i*dp+d])
			}
		}
	}
}

// storeDQ writes scale·acc as row i of head h's dQ.
func (b *backwardPass) storeDQ(ws *workspace, s *sequence, h, i int, acc []float32) {
	p, dq := b.p, b.grads.dq
	dst := ws.outRow(dq, s.tb, s.q0+i, h, p.dim)
	for c, x := range acc {
		dst[c] = p.scale * x
	}
	dq.commit(dst, s.tb, s.q0+i, h, &p.kern)
}

// headRows is one query head's per-row data in the backward: D, LSE and
// the LSE correction of every row; when the KV pass sums dQ, the head's dQ
// accumulator (rows of dimPad), else nil.
type headRows struct {
	delta, lse, dq []float32
	corr           []float32 // nil, or the LSE correction factors (see lsefix.go)
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
	return r
}

// qTile is a query tile's Q and dO: float32 rows padded to dimPad, or the
// native products' 16-bit A operands (rows of even(dim)) and B operands
// (VNNI from the tile's first row, strip stride ldb).
type qTile struct {
	q, do   []float32
	qh, doh []uint16
	qv, dov []uint16
	ldb     int
}

// queryTile returns rows [i0, i1) of the head's packed Q and dO (i0 even
// with native products).
func (b *backwardPass) queryTile(rows *headRows, i0, i1 int) qTile {
	p, qp := b.p, &b.qp
	r0, r1 := rows.base+i0, rows.base+i1
	if !p.native {
		dp := p.dimPad
		return qTile{q: qp.q[r0*dp : r1*dp], do: qp.do[r0*dp : r1*dp]}
	}
	de, off := even(p.dim), qp.vOff[rows.unit]+kernel.W*i0
	return qTile{qh: qp.qh[r0*de : r1*de], doh: qp.doh[r0*de : r1*de],
		qv: qp.qv[off:], dov: qp.dov[off:], ldb: qp.vLdb[rows.unit]}
}

// keyBlock is Algorithm 2's inner loop for KV block [j0, j0+n) of KV head hk
// against query head h: for each query tile that sees the block,
//
//	S = Q·Kᵀ, dP = dO·Vᵀ                    recompute
//	P = exp(mask(mods(scale·S)) − LSE)      (dropout: P̃, dP̃)
//	dS = P∘(dP − D)·mods′                   softmax and modifier chain rule
//	dV += P̃ᵀ·dO, dK += dSᵀ·Q, dQ += dS·K
//
// then adds the block's dV and scale·dK to the accumulators (dQ is scaled
// when it is written).
func (b *backwardPass) keyBlock(ws *workspace, s *sequence, si, h, hk, j0, n int, rows *headRows) {
	p := b.p
	qlo, qhi := s.vis.rows(h, j0, j0+n)
	if qlo >= qhi {
		return
	}
	qlo -= qlo % p.alignQ
	d, dp := p.dim, p.dimPad
	kt := b.kv.backwardTile(si, hk, j0, n)
	dk, dv := ws.dk[:n*dp], ws.dv[:n*dp]
	clear(dk)
	clear(dv)
	for i0 := qlo; i0 < qhi; i0 += p.blockQ {
		i1 := min(i0+p.blockQ, qhi)
		kind := s.vis.tile(rowBlock{h0: h, nh: 1, i0: i0, i1: i1}, j0, j0+n)
		if kind == BlockEmpty {
			continue
		}
		qt := b.queryTile(rows, i0, i1)
		b.gradTile(ws, &kt, &qt, s, h, i0, i1, j0, n, kind, rows)
		var dq []float32
		if rows.dq != nil {
			dq = rows.dq[i0*dp:]
		}
		b.tileGrads(ws, &kt, &qt, i1-i0, n, dv, dk, dq)
	}
	for jj := 0; jj < n; jj++ {
		dkr := b.dkAcc.row(s.kvb, s.k0+j0+jj, hk)[:d]
		dvr := b.dvAcc.row(s.kvb, s.k0+j0+jj, hk)[:d]
		for c := range dkr {
			dkr[c] += p.scale * dk[jj*dp+c]
			dvr[c] += dv[jj*dp+c]
		}
	}
}

// gradTile computes, for query rows [i0, i1) of head h against the packed
// KV block [j0, j0+n), P (ws.s; P̃ in ws.pDrop with dropout) and dS (ws.dP).
func (b *backwardPass) gradTile(ws *workspace, kt *bwdTile, qt *qTile, s *sequence, h, i0, i1, j0, n int, kind BlockKind, rows *headRows) {
	m := i1 - i0
	b.tileScores(ws, kt, qt, m, n)
	for r := 0; r < m; r++ {
		b.gradRow(ws, s, h, i0+r, j0, n, r, kind, rows)
	}
}

// gradRow turns row r of the S and dP tiles (query row i, keys j0..j0+n-1)
// into P (in ws.s, and P̃ in ws.pDrop with dropout) and dS (in ws.dP).
func (b *backwardPass) gradRow(ws *workspace, s *sequence, h, i, j0, n, r int, kind BlockKind, rows *headRows) {
	p := b.p
	k := &p.kern
	np := kernel.Pad(n)
	row := ws.s[r*np : (r+1)*np]
	var grad []float32
	if p.mods.curved() {
		grad = ws.grad[r*np : (r+1)*np]
	}
	f := p.scoreRow(row, grad, ws.du, ws.keep, n, s, h, i, j0, kind)
	var sum float32
	if rows.lse[i] == negInf { // the row sees no key at all
		clear(row)
	} else {
		sum = k.ExpSum(row, f, rows.lse[i])
		if rows.corr != nil && rows.corr[i] != 1 {
			k.Scale(row, rows.corr[i])
			sum *= rows.corr[i]
		}
	}
	dpRow := ws.dP[r*np : (r+1)*np]
	if p.dropOn {
		pd := ws.pDrop[r*np : (r+1)*np]
		copy(pd, row)
		// One mask for both: P̃ = P∘z/(1-p) and dP = dP̃∘z/(1-p).
		f := ws.drop[:n]
		for c := range f {
			f[c] = 1
		}
		p.drop.ApplyRow(f, s.b, h, i, j0)
		for c, x := range f {
			pd[c] *= x
			dpRow[c] *= x
		}
	}
	k.DsFromDp(dpRow, row, rows.delta[i])
	if sum >= 1 {
		// Where P rounds to exactly 1 the other probabilities of the row
		// sum to less than 2⁻²³, and dS = P·(dP − D) = −Σ_k P_k·(dP_k − dP)
		// is below the rounding of dP itself: 0. Computed as dP − D it
		// would be the difference of two independently rounded dot
		// products (D = dO·O in float64, dP by the kernel).
		for c, x := range row[:n] {
			if x == 1 {
				dpRow[c] = 0
			}
		}
	}
	for c, x := range grad[:min(len(grad), n)] {
		dpRow[c] *= x
	}
	if p.ct != Float32 {
		// P̃ and dS in the inputs' type before they multiply.
		pr := row[:n]
		if p.dropOn {
			pr = ws.pDrop[r*np : r*np+n]
		}
		roundTo(pr, p.ct, k)
		roundTo(dpRow[:n], p.ct, k)
	}
}

// dot64 returns Σ a[i]·b[i] accumulated in float64 (the products of two
// float32 are exact in float64) and rounded once.
func dot64(a, b []float32) float32 {
	var s float64
	for i, x := range a {
		s += float64(x) * float64(b[i])
	}
	return float32(s)
}
