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

// bwdTask is one unit of backward work (FA2 parallelises the backward over
// K/V blocks): sequence seq, KV head hk, and the KV blocks chunk,
// chunk+chunks, chunk+2·chunks, ... (round robin, which balances a causal
// mask). The task owns the dK, dV rows of its blocks; its dQ contributions
// go to its own partial buffer (slot ≥ 0) that is reduced in a fixed order
// afterwards, or straight to dq when chunks is 1.
type bwdTask struct {
	seq, hk       int
	chunk, chunks int
	slot          int // offset of the task's partial dQ (group × nq × dimPad), -1 if none
}

// bwdTarget is the number of tasks the chunking aims for. It is fixed (not
// the worker count) so results are the same for any number of workers.
const bwdTarget = 8

// backwardTasks lists the tasks and the size of the partial dQ buffer.
func (c *call) backwardTasks() (tasks []bwdTask, partLen int) {
	p, a := &c.plan, &c.arena
	tasks = a.bwdTasks[:0]
	defer func() { a.bwdTasks = tasks }()
	total := 0
	for _, s := range p.seqs {
		total += s.nq * s.nk
	}
	for si, s := range p.seqs {
		if s.nq == 0 || s.nk == 0 {
			continue
		}
		nkb := (s.nk + p.bwdBlockK - 1) / p.bwdBlockK
		ch := (bwdTarget*s.nq*s.nk + p.kvHeads*total - 1) / (p.kvHeads * total)
		ch = min(max(ch, 1), nkb)
		for hk := 0; hk < p.kvHeads; hk++ {
			for i := 0; i < ch; i++ {
				t := bwdTask{seq: si, hk: hk, chunk: i, chunks: ch, slot: -1}
				if ch > 1 {
					t.slot = partLen
					partLen += p.group * s.nq * p.dimPad
				}
				tasks = append(tasks, t)
			}
		}
	}
	return tasks, partLen
}

// backwardPass is the parallel pass of FA2's backward over K/V blocks.
type backwardPass struct {
	p      *plan
	grads  gradViews
	tasks  []bwdTask
	dqPart []float32
	corr   []float32 // per LSE entry: the factor that makes the row's P exact (nil: all 1)
	// dkAcc and dvAcc are where dK and dV accumulate: the outputs
	// themselves when float32, else float32 buffers rounded at the end.
	dkAcc, dvAcc view
}

// reducePass sums the partial dQ of each (sequence, KV head) in chunk
// order and writes scale·sum to dq.
type reducePass struct {
	b     *backwardPass
	tasks []bwdTask // chunk 0 of each chunked (sequence, KV head)
}

func (c *call) backward() error {
	p, a, b := &c.plan, &c.arena, &c.bwd
	// Keys that no query sees (and keys past SeqUsedK) get zero gradients.
	b.p = p
	b.dkAcc, b.dvAcc = b.grads.dk, b.grads.dv
	if b.dkAcc.dt != Float32 || b.dvAcc.dt != Float32 {
		n := p.kv.batch * p.kv.rows * p.kvHeads * p.dim
		buf := grow(&a.dkvAcc, 2*n)
		b.dkAcc, b.dvAcc = denseView(buf[:n], b.grads.dk.shape), denseView(buf[n:], b.grads.dv.shape)
	}
	b.clearKV()
	if err := c.fixLSE(); err != nil {
		return err
	}
	tasks, partLen := c.backwardTasks()
	b.tasks = tasks
	b.dqPart = grow(&a.dqPart, partLen)
	clear(b.dqPart)
	if err := parallel(p.workers, len(tasks), b); err != nil {
		return err
	}
	b.storeKV()
	if partLen == 0 {
		return nil
	}
	reds := a.reduces[:0]
	for _, t := range tasks {
		if t.slot >= 0 && t.chunk == 0 {
			reds = append(reds, t)
		}
	}
	a.reduces = reds
	c.reduce = reducePass{b: b, tasks: reds}
	return parallel(p.workers, len(reds), &c.reduce)
}

func (r *reducePass) run(ws *workspace, t int) {
	b, u := r.b, &r.tasks[t]
	p := b.p
	s := &p.seqs[u.seq]
	size := p.group * s.nq * p.dimPad
	for hh := 0; hh < p.group; hh++ {
		h := u.hk*p.group + hh
		for i := 0; i < s.nq; i++ {
			dst := ws.outRow(b.grads.dq, s.tb, s.q0+i, h, p.dim)
			off := u.slot + (hh*s.nq+i)*p.dimPad
			for c := range dst {
				var acc float32
				for ch := 0; ch < u.chunks; ch++ {
					acc += b.dqPart[off+ch*size+c]
				}
				dst[c] = p.scale * acc
			}
			b.grads.dq.commit(dst, s.tb, s.q0+i, h, &p.kern)
		}
	}
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

// task runs FA2's Algorithm 2 for one task: for each query head of its KV
// head, and each KV block it owns, stream the query blocks that see the
// block (keyBlock).
func (b *backwardPass) task(ws *workspace, u *bwdTask) {
	p, g := b.p, &b.grads
	s := &p.seqs[u.seq]
	ws.forBackward(p, s.nq)
	d, dp := p.dim, p.dimPad
	nkb := (s.nk + p.bwdBlockK - 1) / p.bwdBlockK
	for hh := 0; hh < p.group; hh++ {
		h := u.hk*p.group + hh
		rows := headRows{delta: ws.delta[:s.nq], lse: ws.lse[:s.nq]}
		// This head's Q and dO, packed once for all its KV blocks.
		rows.q, rows.do = grow(&ws.qall, s.nq*dp), grow(&ws.doall, s.nq*dp)
		qr, ldq := p.q.rows(&ws.convK, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
		kernel.PackRows(rows.q, qr, ldq, s.nq, d)
		dor, lddo := g.do.rows(&ws.convV, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
		kernel.PackRows(rows.do, dor, lddo, s.nq, d)
		o := grow(&ws.convO, d)
		for i := range rows.delta {
			g.o.rowTo(o, s.tb, s.q0+i, h, Float32, &p.kern)
			rows.delta[i] = dot64(rows.do[i*dp:i*dp+d], o) // rowsum(dO∘O), rounded once
			rows.lse[i] = g.lse[s.lse0+h*s.lseH+i]
		}
		rows.corr = nil
		if b.corr != nil {
			rows.corr = b.corr[s.lse0+h*s.lseH:][:s.nq]
		}
		if u.slot >= 0 {
			rows.dq = b.dqPart[u.slot+hh*s.nq*dp:][:s.nq*dp]
		} else {
			rows.dq = grow(&ws.dq, s.nq*dp)
			clear(rows.dq)
		}
		for kb := u.chunk; kb < nkb; kb += u.chunks {
			j0 := kb * p.bwdBlockK
			b.keyBlock(ws, s, h, u.hk, j0, min(p.bwdBlockK, s.nk-j0), &rows)
		}
		if u.slot < 0 {
			for i := 0; i < s.nq; i++ {
				dst := ws.outRow(g.dq, s.tb, s.q0+i, h, d)
				for c, x := range rows.dq[i*dp : i*dp+d] {
					dst[c] = p.scale * x
				}
				g.dq.commit(dst, s.tb, s.q0+i, h, &p.kern)
			}
		}
	}
}

// headRows is one query head's per-row data in the backward: Q and dO rows
// padded to dimPad, D = rowsum(dO∘O), LSE, and the dQ accumulator.
type headRows struct {
	q, do, delta, lse, dq []float32
	corr                  []float32 // nil, or the LSE correction factors (see lsefix.go)
}

// keyBlock is Algorithm 2's inner loop for KV block [j0, j0+n) of KV head hk
// against query head h: for each query tile that sees the block,
//
//	S = Q·Kᵀ, dP = dO·Vᵀ                    recompute
//	P = exp(mask(mods(scale·S)) − LSE)      (dropout: P̃, dP̃)
//	dS = P∘(dP − D)·mods′                   softmax and modifier chain rule
//	dV += P̃ᵀ·dO, dK += dSᵀ·Q, dQ += dS·K
//
// then adds the block's dV and scale·dK to the outputs (dQ is scaled when
// it is written).
func (b *backwardPass) keyBlock(ws *workspace, s *sequence, h, hk, j0, n int, rows *headRows) {
	p := b.p
	qlo, qhi := s.vis.rows(h, j0, j0+n)
	if qlo >= qhi {
		return
	}
	qlo -= qlo % p.alignQ
	k := &p.kern
	d, dp, np := p.dim, p.dimPad, kernel.Pad(n)
	kr, ldk := p.kRows(&ws.convK, s, j0, hk, n)
	kernel.PackBt(ws.kt, kr, ldk, n, d)
	kernel.PackRows(ws.kp, kr, ldk, n, d)
	vr, ldv := p.vRows(&ws.convV, s, j0, hk, n)
	kernel.PackBt(ws.vt, vr, ldv, n, d)
	dk, dv := ws.dk[:n*dp], ws.dv[:n*dp]
	clear(dk)
	clear(dv)
	for i0 := qlo; i0 < qhi; i0 += p.blockQ {
		i1 := min(i0+p.blockQ, qhi)
		kind := s.vis.tile(rowBlock{h0: h, nh: 1, i0: i0, i1: i1}, j0, j0+n)
		if kind == BlockEmpty {
			continue
		}
		m := i1 - i0
		qp, dop := rows.q[i0*dp:i1*dp], rows.do[i0*dp:i1*dp]
		k.MulABt(ws.s, np, qp, dp, ws.kt, m, np, d)
		k.MulABt(ws.dP, np, dop, dp, ws.vt, m, np, d)
		for r := 0; r < m; r++ {
			b.gradRow(ws, s, h, i0+r, j0, n, r, kind, rows)
		}
		pmat := ws.s
		if p.dropOn {
			pmat = ws.pDrop
		}
		k.MulAddAtB(dv, dp, pmat, np, dop, dp, n, dp, m)
		k.MulAddAtB(dk, dp, ws.dP, np, qp, dp, n, dp, m)
		k.MulAddAB(rows.dq[i0*dp:], dp, ws.dP, np, ws.kp, dp, m, dp, n)
	}
	for jj := 0; jj < n; jj++ {
		dkr := b.dkAcc.row(s.tb, s.k0+j0+jj, hk)[:d]
		dvr := b.dvAcc.row(s.tb, s.k0+j0+jj, hk)[:d]
		for c := range dkr {
			dkr[c] += p.scale * dk[jj*dp+c]
			dvr[c] += dv[jj*dp+c]
		}
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
