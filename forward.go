package flashattn

import (
	"fmt"
	"math"
	"slices"

	"github.com/flashattn/flashattn/internal/kernel"
)

// Forward computes attention O = softmax(mask(scale·QKᵀ))·V for q
// [batch, seqlen_q, heads, dim] and k, v [batch, seqlen_k, kv_heads, dim]
// and returns O (shaped like q, dense) and the log-sum-exp of every score row,
// LSE [batch, heads, seqlen_q] (with VarLen: [heads, total_q]). opts may be
// nil for the defaults. See ForwardInto to reuse output buffers.
func Forward(q, k, v Tensor, opts *Options) (out Tensor, lse []float32, err error) {
	p, err := newProblem(q, k, v, opts)
	if err != nil {
		return Tensor{}, nil, err
	}
	out = NewTensor(q.Batch, q.Seq, q.Heads, q.Dim)
	lse = make([]float32, p.lseLen)
	p.forward(mustView(out), lse)
	p.release()
	return out, lse, nil
}

// ForwardInto is Forward writing into caller-owned buffers: out must have
// q's shape (any non-overlapping strides) and lse, unless nil, at least
// batch·heads·seqlen_q elements. Repeated calls allocate nothing (the
// workspaces and packed K/V buffers are pooled), so it suits hot loops.
func ForwardInto(out Tensor, lse []float32, q, k, v Tensor, opts *Options) error {
	p, err := newProblem(q, k, v, opts)
	if err != nil {
		return err
	}
	defer p.release()
	ov, err := out.check("out", true, q.Batch, q.Seq, q.Heads, q.Dim)
	if err != nil {
		return err
	}
	if lse != nil && len(lse) < p.lseLen {
		return fmt.Errorf("flashattn: lse has %d elements, want %d", len(lse), p.lseLen)
	}
	p.forward(ov, lse)
	return nil
}

func mustView(t Tensor) view {
	v, err := t.check("out", true, -1, -1, -1, -1)
	if err != nil {
		panic(err) // unreachable: t was allocated with its own shape
	}
	return v
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

// fwdTask is one unit of forward work: a row block against keys j0..j1-1.
type fwdTask struct {
	rowBlock
	j0, j1 int
	part   int // -1: write the output; else the partial-result slot
	cost   int
}

// maxSplits bounds the split of one row block along the keys
// (flash-decoding) and splitTarget is the number of tasks below which
// splitting starts. Both are fixed, not tied to the worker count, so that
// results do not depend on it.
const (
	splitTarget = 16
	maxSplits   = 16
)

// forwardTasks lists the tasks, heaviest first, and the number of
// partial-result slots the key splits need.
func (p *problem) forwardTasks() (tasks []fwdTask, splits, slots int) {
	blocks, tasks := p.sc.blocks[:0], p.sc.tasks[:0]
	defer func() { p.sc.blocks, p.sc.tasks = blocks, tasks }()
	for si := range p.seqs {
		s := &p.seqs[si]
		if s.nq == 0 {
			continue
		}
		if p.stacked(s) {
			blocks = append(blocks, rowBlock{si, 0, p.heads, 0, s.nq})
			continue
		}
		// Heads inside: tasks of equal cost run in this order, so the
		// workers read neighbouring rows of Q and write neighbouring rows
		// of O at about the same time.
		for i0 := 0; i0 < s.nq; i0 += p.bq {
			for h := 0; h < p.heads; h++ {
				blocks = append(blocks, rowBlock{si, h, 1, i0, min(i0+p.bq, s.nq)})
			}
		}
	}
	splits = 1
	if len(blocks) < splitTarget {
		splits = min(maxSplits, (splitTarget+len(blocks)-1)/len(blocks))
	}
	for bi, rb := range blocks {
		lo, hi := p.seqs[rb.seq].band.keys(rb.i0, rb.i1)
		lo = lo / kernel.W * kernel.W // tiles start on strip boundaries of the packed K
		nkb := (hi - lo + p.bk - 1) / p.bk
		ns := min(splits, max(1, nkb/2))
		if ns == 1 {
			tasks = append(tasks, fwdTask{rb, lo, hi, -1, rb.rows() * (hi - lo)})
			continue
		}
		for s := 0; s < ns; s++ {
			j0 := lo + s*nkb/ns*p.bk
			j1 := min(hi, lo+(s+1)*nkb/ns*p.bk)
			tasks = append(tasks, fwdTask{rb, j0, j1, bi*splits + s, rb.rows() * (j1 - j0)})
		}
		slots = len(blocks) * splits
	}
	slices.SortStableFunc(tasks, func(a, b fwdTask) int { return b.cost - a.cost })
	return tasks, splits, slots
}

// partials holds the unnormalised results of key-split tasks until they are
// merged: per slot, maxRows output rows (stride dp), their running max and
// sum.
type partials struct {
	o, m, l []float32
}

func (p *problem) forward(out view, lse []float32) {
	p.out, p.lse = out, lse
	tasks, splits, slots := p.forwardTasks()
	p.tasks, p.splits = tasks, splits
	p.packKV()
	if slots > 0 {
		p.part = partials{
			o: grow(&p.sc.partO, slots*p.maxRows*p.dp),
			m: grow(&p.sc.partM, slots*p.maxRows),
			l: grow(&p.sc.partL, slots*p.maxRows),
		}
		for i := range p.part.m {
			p.part.m[i] = negInf
		}
	}
	p.phase = phaseForward
	parallel(p.workers, len(tasks), p)
	if slots == 0 {
		return
	}
	// Merge the key splits of each row block in a fixed order.
	merges := p.sc.merges[:0]
	for _, t := range tasks {
		if t.part >= 0 && t.part%splits == 0 {
			merges = append(merges, t)
		}
	}
	p.sc.merges, p.merges = merges, merges
	p.phase = phaseMerge
	parallel(p.workers, len(merges), p)
}

// forwardTask runs FA2's inner loop for one task: stream the K/V tiles of
// its key range past the query block, keeping the online softmax state.
// A block that stacks several KV heads' query heads (decoding) visits, for
// each key tile, every KV head in turn, so K and V are read in memory order.
func (p *problem) forwardTask(ws *workspace, t *fwdTask) {
	out, lse, part, pk := p.out, p.lse, &p.part, &p.pk
	ws.forTile(p)
	k := &p.impl
	s := &p.seqs[t.seq]
	m, d, dp := t.rows(), p.d, p.dp
	nr := t.i1 - t.i0 // rows per head
	st := rowState{m: ws.m, l: ws.l, o: ws.o, dp: dp}
	st.reset(m)
	qp := ws.qp[:(m+3)*d] // 3 spare rows: Dot4T reads rows in fours
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		scaleRow(qp[r*d:(r+1)*d], p.q.row(s.tb, s.q0+i, h), p.scale)
	}
	subs := ws.subs[:0]
	for h := t.h0; h < t.h0+t.nh; {
		hk := h / p.group
		he := min(t.h0+t.nh, (hk+1)*p.group)
		subs = append(subs, subBlock{hk, (h - t.h0) * nr, (he - h) * nr})
		h = he
	}
	ws.subs = subs
	// (scale·Q)ᵀ packed per sub-block when sub-blocks have few rows.
	fewRows := subs[0].m <= kernel.W
	if fewRows && d%8 != 0 {
		for si, sb := range subs {
			kernel.PackBt(ws.qt[si*kernel.W*d:], qp[sb.r0*d:], d, sb.m, d)
		}
	}
	// Decoding several KV heads: each key tile of K and V is first copied
	// for all those heads in address order (one pass over contiguous
	// memory), then read per head from L2. Reading it per head instead
	// walks memory with a stride of a whole key row and ran at half speed.
	prepacked := pk.kt[t.seq*p.kvh+subs[0].hk] >= 0
	step, staged := p.bk, !prepacked && (p.paged != nil || len(subs) > 1 && fewRows && d%8 == 0)
	if staged {
		step = p.decodeStep(len(subs))
	}
	for j0 := t.j0; j0 < t.j1; j0 += step {
		n := min(step, t.j1-j0)
		np := kernel.Pad(n)
		full := s.band.full(t.i0, t.i1, j0, j0+n)
		pass := p.needsScorePass(full)
		if staged {
			p.stageKV(ws, s, subs, j0, n, step)
		}
		for si, sb := range subs {
			sTile := ws.s[sb.r0*np:]
			kt, vp, ldv := pk.tile(t.seq, sb.hk, j0, n)
			var kr []float32
			ldk := p.k.ss
			if !staged && !prepacked {
				kr = p.krow(s, j0, sb.hk) // n keys in place (not paged)
			}
			if staged {
				kr, ldk = ws.kdec[si*step*d:], d
				vp, ldv = ws.vdec[si*step*dp:], dp
			}
			switch {
			case kt != nil:
				k.MulABt(sTile, np, qp[sb.r0*d:], d, kt, sb.m, np, d)
			case fewRows:
				// Few rows (decoding): Sᵀ = K·(scale·Q)ᵀ reads K where it
				// lies, instead of transposing a K tile used only once.
				sT := ws.st[:n*kernel.W]
				if d%8 == 0 {
					for q4 := 0; q4 < sb.m; q4 += 4 {
						k.Dot4T(sT[q4:], kernel.W, qp[(sb.r0+q4)*d:(sb.r0+q4+4)*d], kr, ldk, n, d)
					}
				} else {
					k.MulABt(sT, kernel.W, kr, ldk, ws.qt[si*kernel.W*d:(si+1)*kernel.W*d], n, kernel.W, d)
				}
				for r := 0; r < sb.m; r++ {
					row := sTile[r*np : r*np+n]
					for j := range row {
						row[j] = sT[j*kernel.W+r]
					}
				}
			default:
				kernel.PackBt(ws.kt, kr, ldk, n, d)
				k.MulABt(sTile, np, qp[sb.r0*d:], d, ws.kt, sb.m, np, d)
			}
			for r := sb.r0; r < sb.r0+sb.m; r++ {
				row := ws.s[r*np : (r+1)*np]
				h, i := t.at(r)
				if pass {
					p.scoreRow(row, n, nil, s, h, i, j0, !full)
				}
				for c := n; c < np; c++ {
					row[c] = negInf
				}
				st.update(k, r, row)
				if p.dropOn {
					p.drop.ApplyRow(row[:n], s.b, h, i, j0)
				}
			}
			if vp == nil {
				vp, ldv = p.vTile(ws, s, sb.hk, j0, n)
			}
			k.MulAddAB(ws.o[sb.r0*dp:], dp, sTile, np, vp, ldv, sb.m, dp, n)
		}
	}
	if t.part >= 0 {
		copy(part.o[t.part*p.maxRows*dp:], ws.o[:m*dp])
		copy(part.m[t.part*p.maxRows:], ws.m[:m])
		copy(part.l[t.part*p.maxRows:], ws.l[:m])
		return
	}
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		v := st.finish(r, p.outRow(out, s, h, i), d)
		if lse != nil {
			lse[s.lse0+h*s.lseH+i] = v
		}
	}
}

func (p *problem) outRow(out view, s *sequence, h, i int) []float32 {
	return out.row(s.tb, s.q0+i, h)[:p.d]
}

// mergeSplits combines the key splits of one row block by their log-sum-exp
// (flash-decoding): O = Σ_s e^{m_s−M} o_s / Σ_s e^{m_s−M} l_s.
func (p *problem) mergeSplits(t *fwdTask) {
	splits, part, out, lse := p.splits, &p.part, p.out, p.lse
	s := &p.seqs[t.seq]
	first := t.part - t.part%splits
	for r := 0; r < t.rows(); r++ {
		h, i := t.at(r)
		o := p.outRow(out, s, h, i)
		mx := negInf
		for sp := 0; sp < splits; sp++ {
			mx = max(mx, part.m[(first+sp)*p.maxRows+r])
		}
		clear(o)
		lv := negInf
		if mx != negInf {
			var l float32
			for sp := 0; sp < splits; sp++ {
				slot := first + sp
				ms := part.m[slot*p.maxRows+r]
				if ms == negInf {
					continue
				}
				w := kernel.Exp(ms - mx)
				l += w * part.l[slot*p.maxRows+r]
				po := part.o[(slot*p.maxRows+r)*p.dp:]
				for c := range o {
					o[c] += w * po[c]
				}
			}
			inv := 1 / l
			for c := range o {
				o[c] *= inv
			}
			lv = mx + float32(math.Log(float64(l)))
		}
		if lse != nil {
			lse[s.lse0+h*s.lseH+i] = lv
		}
	}
}

// scaleRow sets dst = scale·src (len(dst) elements): the softmax scale is
// folded into the packed Q tile once, instead of into every score.
func scaleRow(dst, src []float32, scale float32) {
	src = src[:len(dst)]
	for c, x := range src {
		dst[c] = x * scale
	}
}

// vTile returns V rows j0..j0+n-1 of (sequence s, KV head hk), for a tile
// that was not packed ahead (decoding: read once), as the B operand of
// O += P·V and its leading dimension. The rows are copied into ws.vp even
// when they need no padding: in place, rows kilobytes apart share a few L1
// sets, and the kernel's column passes would go back to L2 (measured: the
// copy is faster).
func (p *problem) vTile(ws *workspace, s *sequence, hk, j0, n int) ([]float32, int) {
	kernel.PackRows(ws.vp, p.vrow(s, j0, hk), p.v.ss, n, p.d)
	return ws.vp, p.dp
}

// subBlock is the part of a row block that reads one KV head: rows
// r0..r0+m-1, the query heads of KV head hk.
type subBlock struct{ hk, r0, m int }

// maxStackRows bounds the rows of a stacked (decoding) row block.
const maxStackRows = 64

// stacked reports whether sequence s is decoded as one block of all heads.
func (p *problem) stacked(s *sequence) bool {
	return p.heads > 1 && s.nq*p.heads <= maxStackRows
}

// decodeStep is the key tile of a staged decoding block over nkv KV heads:
// K and V of the tile for all of them take about half of L2.
func (p *problem) decodeStep(nkv int) int {
	_, l2 := cacheSizes()
	n := l2 / 2 / (4 * 2 * nkv * p.dp)
	return min(max(n/16*16, 16), p.bk)
}

// stageKV copies keys j0..j0+n-1 of K and V for the KV heads of subs, in
// address order, into ws.kdec (rows of d, per head blocks of step rows) and
// ws.vdec (rows padded to dp).
func (p *problem) stageKV(ws *workspace, s *sequence, subs []subBlock, j0, n, step int) {
	d, dp := p.d, p.dp
	kb := grow(&ws.kdec, len(subs)*step*d)
	vb := grow(&ws.vdec, len(subs)*step*dp)
	for j := 0; j < n; j++ {
		for si, sb := range subs {
			copy(kb[(si*step+j)*d:(si*step+j+1)*d], p.krow(s, j0+j, sb.hk))
			vr := vb[(si*step+j)*dp : (si*step+j+1)*dp]
			copy(vr[:d], p.vrow(s, j0+j, sb.hk))
			clear(vr[d:])
		}
	}
}
