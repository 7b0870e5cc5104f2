package flashattn

import (
	"slices"

	"github.com/flashattn/flashattn/internal/kernel"
)

// Forward computes attention O = softmax(mask(scale·QKᵀ))·V for q
// [batch, seqlen_q, heads, dim] and k, v [batch, seqlen_k, kv_heads, dim]
// and returns O (shaped like q, dense, of q's element type) and the
// log-sum-exp of every score row,
// LSE [batch, heads, seqlen_q] (with VarLen: [heads, total_q]). opts may be
// nil for the defaults. See ForwardInto to reuse output buffers.
func Forward(q, k, v Tensor, opts *Options) (out Tensor, lse []float32, err error) {
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return Tensor{}, nil, err
	}
	defer c.release()
	out = NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, q.Dim)
	lse = make([]float32, c.plan.lseLen)
	ov, _ := out.check("out", true, -1, -1, -1, -1) // its own dense shape: cannot fail
	if err := c.forward(ov, lse); err != nil {
		return Tensor{}, nil, err
	}
	return out, lse, nil
}

// ForwardInto is Forward writing into caller-owned buffers: out must have
// q's shape (any non-overlapping strides) and lse, unless nil, at least
// batch·heads·seqlen_q elements. out and lse must not share memory with the
// inputs or with each other, except that out may be q itself (the very same
// view: O then overwrites Q). Repeated calls allocate nothing (the
// workspaces and packed K/V buffers are pooled), so it suits hot loops.
func ForwardInto(out Tensor, lse []float32, q, k, v Tensor, opts *Options) error {
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return err
	}
	defer c.release()
	ov, err := out.check("out", true, q.Batch, q.Seq, q.Heads, q.Dim)
	if err != nil {
		return err
	}
	if ov.dt == Q8_0 {
		return argErr("out", "out cannot be q8_0 (a cache format)")
	}
	if lse != nil && len(lse) < c.plan.lseLen {
		return argErr("lse", "lse has %d elements, want %d", len(lse), c.plan.lseLen)
	}
	if err := c.checkForwardOutputs(ov, lse); err != nil {
		return err
	}
	return c.forward(ov, lse)
}

// rowBlock is the set of query rows one task processes as a single tile:
// heads h0..h0+nh-1 × rows i0..i1-1 of one sequence, head-major. Usually
// nh = 1. When a sequence has few query rows (decoding), all its query heads
// are stacked into one block (see stacked), so each K/V tile is read once for
// all the query heads that share it, and the KV heads in memory order.
type rowBlock struct {
	seq    int
	h0, nh int
	i0, i1 int
}

func (rb rowBlock) rows() int { return rb.nh * (rb.i1 - rb.i0) }

// at returns the head and sequence row of tile row r.
func (rb rowBlock) at(r int) (h, i int) {
	n := rb.i1 - rb.i0
	return rb.h0 + r/n, rb.i0 + r%n
}

// appendQueryBlocks appends the row blocks of sequence si, blockQ rows of
// one head each. The heads are inside: tasks of equal cost run in this
// order, so the workers read neighbouring rows of Q and write neighbouring
// rows of O (or dQ) at about the same time.
func (p *plan) appendQueryBlocks(blocks []rowBlock, si int) []rowBlock {
	nq := p.seqs[si].nq
	for i0 := 0; i0 < nq; i0 += p.blockQ {
		for h := 0; h < p.heads; h++ {
			blocks = append(blocks, rowBlock{si, h, 1, i0, min(i0+p.blockQ, nq)})
		}
	}
	return blocks
}

// fwdTask is one unit of forward work: a row block against keys j0..j1-1.
type fwdTask struct {
	rowBlock
	j0, j1 int
	slot   int // -1: write the output; else the partial-result slot
	cost   int
}

// maxSplits bounds the split of one row block along the keys
// (flash-decoding) and splitTarget is the number of tasks below which
// splitting starts. Both are fixed, not tied to the worker count, so that
// results do not depend on it.
const (
	splitTarget = 256
	maxSplits   = 16
)

// forwardTasks lists the tasks, heaviest first, and the number of
// partial-result slots the key splits need.
func (c *call) forwardTasks() (tasks []fwdTask, splits, slots int) {
	p, a := &c.plan, &c.arena
	blocks, tasks := a.blocks[:0], a.fwdTasks[:0]
	defer func() { a.blocks, a.fwdTasks = blocks, tasks }()
	for si := range p.seqs {
		s := &p.seqs[si]
		if s.nq == 0 {
			continue
		}
		if p.stacked(s) {
			blocks = append(blocks, rowBlock{si, 0, p.heads, 0, s.nq})
			continue
		}
		blocks = p.appendQueryBlocks(blocks, si)
	}
	splits = 1
	switch {
	case p.cache.numSplits > 0:
		splits = p.cache.numSplits
	case len(blocks) < splitTarget:
		splits = min(maxSplits, (splitTarget+len(blocks)-1)/len(blocks))
	}
	// Splits of at least two whole key tiles, or, when forced, of 16-key
	// groups.
	unit, perSplit := p.blockK, 2
	if p.cache.numSplits > 0 {
		unit, perSplit = kernel.W, 1
	}
	for bi, rb := range blocks {
		s := &p.seqs[rb.seq]
		lo, hi := s.vis.keys(rb)
		lo = lo / kernel.W * kernel.W // tiles start on strip boundaries of the packed K
		nu := (hi - lo + unit - 1) / unit
		ns := min(splits, max(1, nu/perSplit))
		if ns == 1 {
			tasks = append(tasks, fwdTask{rb, lo, hi, -1, rb.rows() * p.visibleKeys(s, rb, lo, hi)})
			continue
		}
		for sp := 0; sp < ns; sp++ {
			j0 := lo + sp*nu/ns*unit
			j1 := min(hi, lo+(sp+1)*nu/ns*unit)
			tasks = append(tasks, fwdTask{rb, j0, j1, bi*splits + sp, rb.rows() * p.visibleKeys(s, rb, j0, j1)})
		}
		slots = len(blocks) * splits
	}
	slices.SortStableFunc(tasks, func(a, b fwdTask) int { return b.cost - a.cost })
	return tasks, splits, slots
}

// visibleKeys counts the keys of [lo, hi) in tiles that rows rb compute.
func (p *plan) visibleKeys(s *sequence, rb rowBlock, lo, hi int) int {
	if !p.masked {
		return hi - lo
	}
	n := 0
	for j := lo; ; {
		j0, j1, _ := nextTile(s.vis, rb, j, hi, p.blockK)
		if j0 >= hi {
			return n
		}
		n += j1 - j0
		j = j1
	}
}

// partials holds the unnormalised results of key-split tasks until they are
// merged: per slot, maxRows output rows (stride dimPad), their running max
// and sum.
type partials struct {
	o, m, l []float32
}

// forwardPass is the parallel pass of FA2's forward: one task per row block
// (or per key split of one).
type forwardPass struct {
	p     *plan
	out   view
	lse   []float32
	kv    *packedKV
	tasks []fwdTask
	part  partials
}

func (c *call) forward(out view, lse []float32) error {
	p, a := &c.plan, &c.arena
	if err := c.appendKV(); err != nil {
		return err
	}
	tasks, splits, slots := c.forwardTasks()
	if err := c.packKV(false); err != nil {
		return err
	}
	f := &c.fwd
	*f = forwardPass{p: p, out: out, lse: lse, kv: &c.kv, tasks: tasks}
	if slots > 0 {
		f.part = partials{
			o: grow(&a.partO, slots*p.maxRows*p.dimPad),
			m: grow(&a.partM, slots*p.maxRows),
			l: grow(&a.partL, slots*p.maxRows),
		}
		for i := range f.part.m {
			f.part.m[i] = negInf
		}
	}
	if err := parallel(p.workers, len(tasks), f); err != nil {
		return err
	}
	if slots == 0 {
		return nil
	}
	return c.mergeSplits(splits)
}

func (f *forwardPass) run(ws *workspace, t int) { f.task(ws, &f.tasks[t]) }

// task runs FA2's Algorithm 1 for one row block: with the block's rows of
// Q loaded, for each key tile (j0, j1) that its mask does not hide,
//
//	S = Q·Kᵀ                                   scores
//	S = mask(mods(scale·S)); m, l, O rescaled  softmax (online)
//	O += P·V                                   accumulate
//
// then O /= l and LSE = m + log l (finish). A block that stacks several KV
// heads' query heads (decoding) visits, for each key tile, every KV head in
// turn (its sub-blocks), so K and V are read in memory order.
func (f *forwardPass) task(ws *workspace, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	st := f.start(ws, t)
	inPlace := f.inPlace(t, ws.subs)
	step, staged := p.blockK, !inPlace && f.staged(t, ws.subs)
	if staged {
		step = p.decodeStep(len(ws.subs))
	}
	for j := t.j0; ; {
		j0, j1, kind := nextTile(s.vis, t.rowBlock, j, t.j1, step)
		if j0 >= t.j1 {
			break
		}
		n, np := j1-j0, kernel.Pad(j1-j0)
		if staged {
			p.stageKV(ws, s, ws.subs, j0, n, step)
		}
		for si, sb := range ws.subs {
			if inPlace {
				p.decodeScores(ws, s, sb, j0, n, np)
				f.softmax(ws, &st, t, sb, kind, j0, n)
				p.decodeAccum(ws, s, sb, j0, n, np)
				continue
			}
			kv := f.keyTile(ws, t.seq, si, sb, j0, n, staged, step)
			f.scores(ws, sb, si, kv, n)
			f.softmax(ws, &st, t, sb, kind, j0, n)
			f.accumulate(ws, s, sb, kv, j0, n)
		}
		j = j1
	}
	f.finish(ws, &st, t)
}

// start loads the block's rows of Q into ws.qp, splits the block into
// sub-blocks by KV head (ws.subs) and returns the reset softmax state.
func (f *forwardPass) start(ws *workspace, t *fwdTask) rowState {
	p := f.p
	s := &p.seqs[t.seq]
	ws.forTile(p)
	m, d := t.rows(), p.dim
	st := rowState{m: ws.m, l: ws.l, o: ws.o, dimPad: p.dimPad}
	st.reset(m)
	qp := ws.qp[:(m+3)*d] // 3 spare rows: Dot4T reads rows in fours
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		row := qp[r*d : (r+1)*d]
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
	subs := ws.subs[:0]
	for h := t.h0; h < t.h0+t.nh; {
		hk := h / p.group
		he := min(t.h0+t.nh, (hk+1)*p.group)
		subs = append(subs, subBlock{hk, (h - t.h0) * nr, (he - h) * nr})
		h = he
	}
	ws.subs = subs
	if p.native {
		// Q in the type, rows of even(d) (the pad column is 0).
		de := even(d)
		qh := grow(&ws.qh, m*de)
		for r := 0; r < m; r++ {
			qh[r*de+de-1] = 0
			toHalf(&p.kern, p.ct, qh[r*de:r*de+d], qp[r*d:(r+1)*d])
		}
	}
	if f.fewRows(subs) && !p.dot4T() {
		// Sᵀ = K·Qᵀ needs Qᵀ packed per sub-block.
		for si, sb := range subs {
			kernel.PackBt(ws.qt[si*kernel.W*d:], qp[sb.r0*d:], d, sb.m, d)
		}
	}
	return st
}

// fewRows reports whether the sub-blocks have so few rows (decoding) that
// each K tile is better read where it lies than packed.
func (f *forwardPass) fewRows(subs []subBlock) bool { return subs[0].m <= kernel.W }

// dot4T reports whether few-row S tiles are computed by Dot4T from K read
// in place (KV caches only; its rows need a head dim that is a multiple of
// 8), rather than as MulABt against Qᵀ packed per sub-block.
func (p *plan) dot4T() bool { return p.decoding && p.dim%8 == 0 }

// kvTile is where the keys and values of one tile are for one sub-block:
// packed Kᵀ strips (kt), or K rows read in place or staged (k, ldk); V rows
// padded to dimPad (v, ldv), or nil if they are to be copied on demand.
type kvTile struct {
	kt     []float32
	k      []float32
	ldk    int
	v      []float32
	ldv    int
	staged bool
	// Native 16-bit products: Kᵀ and V packed in the VNNI layout.
	kh, vh []uint16
	ldbV   int
}

// keyTile locates keys j0..j0+n-1 of sub-block sb (the si-th) of
// sequence seq.
func (f *forwardPass) keyTile(ws *workspace, seq, si int, sb subBlock, j0, n int, staged bool, step int) kvTile {
	p := f.p
	var t kvTile
	if p.native {
		if t.kh, t.vh, t.ldbV = f.kv.tileNative(seq, sb.hk, j0); t.kh != nil {
			return t
		}
	}
	t.kt, t.v, t.ldv = f.kv.tile(seq, sb.hk, j0, n)
	switch {
	case t.kt != nil:
	case staged:
		t.k, t.ldk = ws.kdec[si*step*p.dim:], p.dim
		t.v, t.ldv = ws.vdec[si*step*p.dimPad:], p.dimPad
		t.staged = true
	default: // not paged: the rows in place
		t.k, t.ldk = p.kRows(&ws.convK, &p.seqs[seq], j0, sb.hk, n)
	}
	return t
}

// scores computes the S tile of sub-block sb: rows sb.r0.. of ws.s, n keys
// (padded to a multiple of kernel.W).
func (f *forwardPass) scores(ws *workspace, sb subBlock, si int, kv kvTile, n int) {
	p := f.p
	k, d := &p.kern, p.dim
	np := kernel.Pad(n)
	sTile := ws.s[sb.r0*np:]
	qp := ws.qp[sb.r0*d:]
	switch {
	case kv.kh != nil:
		de := even(d)
		p.half.Mul(sTile, np, ws.qh[sb.r0*de:], de, kv.kh, kernel.W*de, sb.m, np, de)
	case kv.kt != nil:
		k.MulABt(sTile, np, qp, d, kv.kt, sb.m, np, d)
	case f.fewRows(ws.subs):
		// Few rows: Sᵀ = K·Qᵀ reads K where it lies, instead of
		// transposing a K tile used only once. Dot4T (KV caches only)
		// sums in another order than the backward's products; the
		// MulABt form gives the backward's scores bit for bit.
		sT := ws.st[:n*kernel.W]
		if p.dot4T() {
			for q4 := 0; q4 < sb.m; q4 += 4 {
				k.Dot4T(sT[q4:], kernel.W, qp[q4*d:(q4+4)*d], kv.k, kv.ldk, n, d)
			}
		} else {
			k.MulABt(sT, kernel.W, kv.k, kv.ldk, ws.qt[si*kernel.W*d:(si+1)*kernel.W*d], n, kernel.W, d)
		}
		for r := 0; r < sb.m; r++ {
			row := sTile[r*np : r*np+n]
			for j := range row {
				row[j] = sT[j*kernel.W+r]
			}
		}
	default:
		kernel.PackBt(ws.kt, kv.k, kv.ldk, n, d)
		k.MulABt(sTile, np, qp, d, ws.kt, sb.m, np, d)
	}
}

// softmax turns the S rows of sub-block sb into P: score modifiers, the
// mask (partial tiles only), the online-softmax update, dropout.
func (f *forwardPass) softmax(ws *workspace, st *rowState, t *fwdTask, sb subBlock, kind BlockKind, j0, n int) {
	p := f.p
	s := &p.seqs[t.seq]
	np := kernel.Pad(n)
	for r := sb.r0; r < sb.r0+sb.m; r++ {
		row := ws.s[r*np : (r+1)*np]
		h, i := t.at(r)
		f := p.scoreRow(row, nil, nil, ws.keep, n, s, h, i, j0, kind)
		st.update(&p.kern, r, row, f)
		if p.dropOn {
			p.drop.ApplyRow(row[:n], s.b, h, i, j0)
		}
		if p.ct != Float32 {
			roundTo(row[:n], p.ct, &p.kern) // P in the inputs' type before P·V
		}
	}
}

// accumulate adds P·V of sub-block sb to its output rows.
func (f *forwardPass) accumulate(ws *workspace, s *sequence, sb subBlock, kv kvTile, j0, n int) {
	p := f.p
	np := kernel.Pad(n)
	if kv.vh != nil {
		// P in the type, rows of even(n) (the pad column is 0).
		ne := even(n)
		ph := grow(&ws.ph, sb.m*ne)
		for r := 0; r < sb.m; r++ {
			toHalf(&p.kern, p.ct, ph[r*ne:(r+1)*ne], ws.s[(sb.r0+r)*np:(sb.r0+r)*np+ne])
		}
		p.half.MulAdd(ws.o[sb.r0*p.dimPad:], p.dimPad, ph, ne, kv.vh, kv.ldbV, sb.m, p.dimPad, ne)
		return
	}
	if kv.v == nil {
		// V rows copied even when they need no padding: in place, rows
		// kilobytes apart share a few L1 sets, and the kernel's column
		// passes would go back to L2 (measured: the copy is faster).
		vr, ld := p.vRows(&ws.convV, s, j0, sb.hk, n)
		kernel.PackRows(ws.vp, vr, ld, n, p.dim)
		kv.v, kv.ldv = ws.vp, p.dimPad
	}
	p.kern.MulAddAB(ws.o[sb.r0*p.dimPad:], p.dimPad, ws.s[sb.r0*np:], np, kv.v, kv.ldv, sb.m, p.dimPad, n)
}

// finish writes the block's normalised rows of O and their LSE, or, for a
// key split, its unnormalised state to its partial-result slot.
func (f *forwardPass) finish(ws *workspace, st *rowState, t *fwdTask) {
	p := f.p
	s := &p.seqs[t.seq]
	m := t.rows()
	if t.slot >= 0 {
		copy(f.part.o[t.slot*p.maxRows*p.dimPad:], ws.o[:m*p.dimPad])
		copy(f.part.m[t.slot*p.maxRows:], ws.m[:m])
		copy(f.part.l[t.slot*p.maxRows:], ws.l[:m])
		return
	}
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		o := ws.outRow(f.out, s.tb, s.q0+i, h, p.dim)
		v := st.finish(r, o, p.dim)
		f.out.commit(o, s.tb, s.q0+i, h, &p.kern)
		if f.lse != nil {
			f.lse[s.lse0+h*s.lseH+i] = v
		}
	}
}
