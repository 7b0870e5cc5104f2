package flashattn

import (
	"fmt"
	"math"
	"sync"

	"github.com/flashattn/flashattn/internal/dropout"
	"github.com/flashattn/flashattn/internal/kernel"
)

// sequence is one attention problem of the batch: a dense batch element or a
// variable-length sequence. Its queries are rows q0..q0+nq-1 of tensor batch
// tb, its keys rows k0..k0+nk-1.
type sequence struct {
	b          int // index in the batch: ALiBi row, dropout coordinate
	tb         int // batch index inside the tensors (0 for varlen)
	q0, nq     int
	k0, nk     int
	lse0, lseH int // LSE of (head h, row i) is at lse0 + h*lseH + i
	band       band
}

// problem is a validated call: shapes, views and options resolved once.
type problem struct {
	impl       kernel.Impl
	seqs       []sequence
	heads, kvh int // H, Hk
	group      int // H / Hk
	d, dp      int // head dim, padded to the kernel width
	bq, bk     int
	bkB        int // KV block of the backward pass
	maxRows    int // rows of the largest row block: bq, or a stacked block's
	q, k, v    view
	lseLen     int
	paged      *KVCache // paged K/V (block table), nil otherwise
	blockSize  int
	tbatch     int // batch size of the tensors (1 for varlen)
	kRows      int // seqlen of the k and v tensors
	scale      float32
	softcap    float32
	alibi      []float32 // [H] or [B*H]
	alibiBatch bool
	dropOn     bool
	drop       dropout.Mask
	workers    int

	// The state of the call in progress: which parallel loop runs (see
	// run) and its inputs and outputs.
	phase  phase
	out    view
	lse    []float32
	g      *gradViews
	gv     gradViews
	splits int
	part   partials
	pk     packedKV
	tasks  []fwdTask
	merges []fwdTask
	units  []bwdUnit
	reds   []bwdUnit
	dqPart []float32

	sc scratch // buffers kept from call to call
}

// scratch is the memory a problem keeps when it returns to the pool, so
// that steady-state calls allocate nothing.
type scratch struct {
	seqs                []sequence
	blocks              []rowBlock
	tasks, merges       []fwdTask
	units, reds         []bwdUnit
	partO, partM, partL []float32
	dqPart, packBuf     []float32
	pkKt, pkVp, pkUnits []int
}

var problems = sync.Pool{New: func() any { return new(problem) }}

// release returns p to the pool, dropping its references to the caller's
// tensors.
func (p *problem) release() {
	sc := p.sc
	*p = problem{sc: sc}
	problems.Put(p)
}

// phase names the parallel loops of a call; problem.run dispatches on it.
type phase int

const (
	phasePack phase = iota
	phaseForward
	phaseMerge
	phaseBackward
	phaseReduce
)

// run does task t of the current phase (problem is the runner of every
// parallel loop, so no closure is allocated per call).
func (p *problem) run(ws *workspace, t int) {
	switch p.phase {
	case phasePack:
		p.packUnit(p.sc.pkUnits[2*t], p.sc.pkUnits[2*t+1])
	case phaseForward:
		p.forwardTask(ws, &p.tasks[t])
	case phaseMerge:
		p.mergeSplits(&p.merges[t])
	case phaseBackward:
		p.backwardUnit(ws, &p.units[t])
	case phaseReduce:
		p.reduceDQ(&p.reds[t])
	}
}

// newProblem validates q, k, v and the options and builds the plan shared by
// the forward and backward passes.
func newProblem(q, k, v Tensor, o *Options) (*problem, error) {
	if o == nil {
		o = &Options{}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	qv, err := q.check("q", false, -1, -1, -1, -1)
	if err != nil {
		return nil, err
	}
	B, Sq, H, D := q.Batch, q.Seq, q.Heads, q.Dim
	kb := B // the batch dimension of k and v: num_blocks when paged
	if c := o.KVCache; c != nil && c.BlockTable != nil {
		kb = -1
	}
	kv, err := k.check("k", false, kb, -1, -1, D)
	if err != nil {
		return nil, err
	}
	Sk, Hk := k.Seq, k.Heads
	vv, err := v.check("v", false, k.Batch, Sk, Hk, D)
	if err != nil {
		return nil, err
	}
	if H%Hk != 0 {
		return nil, fmt.Errorf("flashattn: q has %d heads, not a multiple of the %d heads of k and v", H, Hk)
	}
	p := problems.Get().(*problem)
	sc := p.sc
	*p = problem{
		sc:    sc,
		impl:  kernel.Select(),
		heads: H, kvh: Hk, group: H / Hk,
		d: D, dp: kernel.Pad(D),
		q: qv, k: kv, v: vv,
		softcap: o.Softcap,
		workers: o.workers(),
		tbatch:  B, kRows: Sk,
	}
	p.bq, p.bk = blockSizes(D, o)
	p.bkB = backwardBlock(p.bk, Sk, o)
	p.maxRows = max(p.bq, maxStackRows)
	p.scale = o.Scale
	if p.scale == 0 {
		p.scale = float32(1 / math.Sqrt(float64(D)))
	}
	if o.Dropout > 0 {
		p.dropOn = true
		p.drop = dropout.NewMask(o.Seed, o.Dropout)
	}
	if o.VarLen == nil || o.KVCache != nil {
		p.seqs = growSeqs(&p.sc.seqs, B)
		for b := range p.seqs {
			p.seqs[b] = sequence{b: b, tb: b, nq: Sq, nk: Sk, lse0: b * H * Sq, lseH: Sq, band: newBand(o, Sq, Sk)}
		}
		p.lseLen = B * H * Sq
	} else if err := p.varlenSequences(o, q, k); err != nil {
		p.release()
		return nil, err
	}
	if o.KVCache != nil {
		if err := p.cacheSequences(o, q, k); err != nil {
			p.release()
			return nil, err
		}
	}
	nb := len(p.seqs)
	switch len(o.ALiBi) {
	case 0:
	case H:
		p.alibi = o.ALiBi
	case nb * H:
		p.alibi, p.alibiBatch = o.ALiBi, true
	default:
		p.release()
		return nil, fmt.Errorf("flashattn: ALiBi has %d slopes, want %d ([heads]) or %d ([batch, heads])", len(o.ALiBi), H, nb*H)
	}
	return p, nil
}

func (p *problem) varlenSequences(o *Options, q, k Tensor) error {
	vl := o.VarLen
	if q.Batch != 1 {
		return fmt.Errorf("flashattn: with VarLen, q, k and v must be packed [total, heads, dim] tensors (Batch 1), q has Batch %d", q.Batch)
	}
	cq, ck := vl.CuSeqlensQ, vl.CuSeqlensK
	if len(cq) < 2 || len(cq) != len(ck) {
		return fmt.Errorf("flashattn: VarLen needs CuSeqlensQ and CuSeqlensK of equal length ≥ 2 (batch+1), have %d and %d", len(cq), len(ck))
	}
	nb := len(cq) - 1
	if vl.SeqUsedK != nil && len(vl.SeqUsedK) != nb {
		return fmt.Errorf("flashattn: VarLen.SeqUsedK has %d entries, want %d (one per sequence)", len(vl.SeqUsedK), nb)
	}
	for _, c := range []struct {
		name  string
		cu    []int32
		total int
	}{{"CuSeqlensQ", cq, q.Seq}, {"CuSeqlensK", ck, k.Seq}} {
		if c.cu[0] != 0 {
			return fmt.Errorf("flashattn: VarLen.%s[0] is %d, want 0", c.name, c.cu[0])
		}
		for i := 1; i < len(c.cu); i++ {
			if c.cu[i] < c.cu[i-1] {
				return fmt.Errorf("flashattn: VarLen.%s decreases at index %d (%d < %d)", c.name, i, c.cu[i], c.cu[i-1])
			}
		}
		if int(c.cu[nb]) != c.total {
			return fmt.Errorf("flashattn: VarLen.%s ends at %d, but the packed tensor has %d rows", c.name, c.cu[nb], c.total)
		}
	}
	H, totalQ := q.Heads, q.Seq
	p.seqs = growSeqs(&p.sc.seqs, nb)
	for b := range p.seqs {
		q0, nq := int(cq[b]), int(cq[b+1]-cq[b])
		k0, nk := int(ck[b]), int(ck[b+1]-ck[b])
		if vl.SeqUsedK != nil {
			u := int(vl.SeqUsedK[b])
			if u < 0 || u > nk {
				return fmt.Errorf("flashattn: VarLen.SeqUsedK[%d] is %d, want 0..%d", b, u, nk)
			}
			nk = u
		}
		p.seqs[b] = sequence{b: b, q0: q0, nq: nq, k0: k0, nk: nk, lse0: q0, lseH: totalQ, band: newBand(o, nq, nk)}
	}
	p.lseLen = H * totalQ
	return nil
}

// slope returns the ALiBi slope of (sequence b, head h), 0 without ALiBi.
func (p *problem) slope(b, h int) float32 {
	switch {
	case p.alibi == nil:
		return 0
	case p.alibiBatch:
		return p.alibi[b*p.heads+h]
	default:
		return p.alibi[h]
	}
}

// growSeqs returns (*buf)[:n], reallocating if needed.
func growSeqs(buf *[]sequence, n int) []sequence {
	if cap(*buf) < n {
		*buf = make([]sequence, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// cacheSequences sets the key counts (and the page table) of a KV-cache call.
func (p *problem) cacheSequences(o *Options, q, k Tensor) error {
	c := o.KVCache
	B := q.Batch
	if o.VarLen != nil {
		return fmt.Errorf("flashattn: KVCache and VarLen cannot be combined")
	}
	if len(c.SeqLens) != B {
		return fmt.Errorf("flashattn: KVCache.SeqLens has %d entries, want %d (one per sequence)", len(c.SeqLens), B)
	}
	capacity := k.Seq
	if c.BlockTable != nil {
		if k.Seq%16 != 0 {
			return fmt.Errorf("flashattn: paged KVCache block size %d (k's seqlen) must be a multiple of 16", k.Seq)
		}
		if c.BlocksPerSeq <= 0 || len(c.BlockTable) != B*c.BlocksPerSeq {
			return fmt.Errorf("flashattn: KVCache.BlockTable has %d entries, want batch %d × BlocksPerSeq %d", len(c.BlockTable), B, c.BlocksPerSeq)
		}
		for i, blk := range c.BlockTable {
			if blk < 0 || int(blk) >= k.Batch {
				return fmt.Errorf("flashattn: KVCache.BlockTable[%d] is %d, want 0..%d (k has %d blocks)", i, blk, k.Batch-1, k.Batch)
			}
		}
		p.paged, p.blockSize = c, k.Seq
		capacity = c.BlocksPerSeq * k.Seq
	}
	for b, n := range c.SeqLens {
		if n < 0 || int(n) > capacity {
			return fmt.Errorf("flashattn: KVCache.SeqLens[%d] is %d, want 0..%d", b, n, capacity)
		}
		s := &p.seqs[b]
		s.nk = int(n)
		s.band = newBand(o, s.nq, s.nk)
	}
	return nil
}

// krow and vrow return key j of sequence s for KV head hk (the row and what
// follows it in its tensor): through the page table when the cache is paged.
func (p *problem) krow(s *sequence, j, hk int) []float32 {
	if p.paged == nil {
		return p.k.row(s.tb, s.k0+j, hk)
	}
	blk := p.paged.BlockTable[s.b*p.paged.BlocksPerSeq+j/p.blockSize]
	return p.k.row(int(blk), j%p.blockSize, hk)
}

func (p *problem) vrow(s *sequence, j, hk int) []float32 {
	if p.paged == nil {
		return p.v.row(s.tb, s.k0+j, hk)
	}
	blk := p.paged.BlockTable[s.b*p.paged.BlocksPerSeq+j/p.blockSize]
	return p.v.row(int(blk), j%p.blockSize, hk)
}
