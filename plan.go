package flashattn

import (
	"math"

	"github.com/flashattn/flashattn/internal/dropout"
	"github.com/flashattn/flashattn/internal/kernel"
)

// plan is a validated call: shapes, views, options and tile sizes resolved
// once, shared read-only by every pass of the call.
type plan struct {
	kern           kernel.Impl
	dec            kernel.Decode // decoding kernels (KV caches)
	inPlaceDecode  bool          // decoding reads the cache in place
	seqs           []sequence
	heads, kvHeads int         // H, Hk
	group          int         // H / Hk: query heads per KV head
	dim, dimPad    int         // head dim, and padded to the kernel width
	ct             DType       // compute type: the products' operands are rounded to it
	half           kernel.Half // the 16-bit products, when native
	native         bool        // ct is 16-bit and its products run natively (not widened to float32)
	blockQ, blockK int         // forward tile: query rows, keys
	bwdBlockK      int         // backward KV block
	alignQ         int         // backward query tiles start on multiples of it
	maxRows        int         // rows of the largest row block: blockQ, or a stacked block's
	q              view
	kv             kvSource
	cache          cacheState // KV-cache calls: new keys, rotary, splits
	lseLen         int
	scale          float32
	mods           scoreMods
	dropOn         bool
	drop           dropout.Mask
	masked         bool // a BlockMask or Mask is set
	decoding       bool // reading a KV cache (forward only)
	workers        int
}

// sequence is one attention problem of the batch: a dense batch element or a
// variable-length sequence. Its queries are rows q0..q0+nq-1 of batch tb of
// q, its keys rows k0..k0+nk-1 of batch kvb of k and v (or cache positions
// k0.. through the page table).
type sequence struct {
	b          int // index in the batch: ALiBi row, dropout and mask coordinate
	tb         int // batch index inside q, out and the gradients (0 for varlen)
	kvb        int // batch index inside k and v (the cache row; unused when paged)
	q0, nq     int
	k0, nk     int
	lse0, lseH int // LSE of (head h, row i) is at lse0 + h*lseH + i

	vis   visibility // &band alone, or &all
	band  band
	block blockVis
	mask  maskVis
	all   allOf
}

// setVisibility makes vis the intersection of the band with the block mask
// and element mask of o, if any, for the sequence's nq × nk scores.
func (s *sequence) setVisibility(o *Options) {
	nq, nk := s.nq, s.nk
	s.band = newBand(o, nq, nk)
	s.vis = &s.band
	if o.BlockMask == nil && o.Mask == nil {
		return
	}
	s.all.add(&s.band)
	if o.BlockMask != nil {
		s.block = blockVis{m: o.BlockMask, b: s.b, nq: nq, nk: nk}
		s.all.add(&s.block)
	}
	if o.Mask != nil {
		cls, _ := o.Mask.(BlockClassifier)
		s.mask = maskVis{m: o.Mask, cls: cls, b: s.b, nq: nq, nk: nk}
		s.all.add(&s.mask)
	}
	s.vis = &s.all
}

// newPlan validates q, k, v and the options and builds the plan shared by
// the passes of the call. Its slices come from a (pooled).
func newPlan(p *plan, a *arena, q, k, v Tensor, o *Options) error {
	if o == nil {
		o = &Options{}
	}
	if err := o.validate(); err != nil {
		return err
	}
	qv, err := q.check("q", false, -1, -1, -1, -1)
	if err != nil {
		return err
	}
	B, Sq, H, D := q.Batch, q.Seq, q.Heads, q.Dim
	kb := B // the batch dimension of k and v: num_blocks when paged
	if c := o.KVCache; c != nil && (c.BlockTable != nil || c.BatchIdx != nil) {
		kb = -1
	}
	kv, err := k.check("k", false, kb, -1, -1, D)
	if err != nil {
		return err
	}
	Sk, Hk := k.Seq, k.Heads
	vv, err := v.check("v", false, k.Batch, Sk, Hk, D)
	if err != nil {
		return err
	}
	if H%Hk != 0 {
		return argErr("k", "q has %d heads, not a multiple of the %d heads of k and v", H, Hk)
	}
	ct, err := computeType(q, k, v)
	if err != nil {
		return err
	}
	if q.DType() == Q8_0 || o.KVCache == nil && (k.DType() == Q8_0 || v.DType() == Q8_0) {
		return argErr("k", "q8_0 tensors are only accepted as the k and v of a KVCache call (a quantised cache)")
	}
	*p = plan{
		kern:  kernel.Select(),
		dec:   kernel.SelectDecode(),
		heads: H, kvHeads: Hk, group: H / Hk,
		dim: D, dimPad: kernel.Pad(D),
		q:        qv,
		ct:       ct,
		kv:       kvSource{k: kv, v: vv, batch: k.Batch, rows: Sk},
		workers:  o.workers(),
		masked:   o.BlockMask != nil || o.Mask != nil,
		decoding: o.KVCache != nil,
	}
	p.mods = scoreMods{softcap: o.Softcap, heads: H, user: o.ScoreMod}
	if ct != Float32 {
		p.half = kernel.HalfPath(ct.elem())
		p.native = p.half.Name != "f32"
	}
	_, l2 := cacheSizes()
	p.setTiles(l2, Sk, o)
	// Decoding reads the cache in place, unless the compute type is 16-bit
	// with a float32 cache (the decode kernels do not round K).
	p.inPlaceDecode = o.KVCache != nil && (ct == Float32 || k.DType() == ct && v.DType() == ct)
	p.scale = o.Scale
	if p.scale == 0 {
		p.scale = float32(1 / math.Sqrt(float64(D)))
	}
	if o.Dropout > 0 {
		p.dropOn = true
		p.drop = dropout.NewMask(o.Seed, o.Dropout)
	}
	switch {
	case o.VarLen != nil && o.KVCache != nil:
		return argErr("Options.KVCache", "KVCache and VarLen cannot be combined")
	case o.VarLen != nil:
		if err := p.varlenSequences(a, o, q, k); err != nil {
			return err
		}
	default:
		p.seqs = grow(&a.seqs, B)
		for b := range p.seqs {
			p.seqs[b] = sequence{b: b, tb: b, kvb: b, nq: Sq, nk: Sk, lse0: b * H * Sq, lseH: Sq}
		}
		p.lseLen = B * H * Sq
	}
	if o.KVCache != nil {
		if err := p.cacheSequences(a, o, o.KVCache, q, k); err != nil {
			return err
		}
	}
	nb := len(p.seqs)
	switch len(o.ALiBi) {
	case 0:
	case H:
		p.mods.alibi = o.ALiBi
	case nb * H:
		p.mods.alibi, p.mods.alibiBatch = o.ALiBi, true
	default:
		return argErr("Options.ALiBi", "ALiBi has %d slopes, want %d ([heads]) or %d ([batch, heads])", len(o.ALiBi), H, nb*H)
	}
	if m := o.BlockMask; m != nil {
		if err := checkBlockMask(m, p.seqs, H); err != nil {
			return err
		}
	}
	for i := range p.seqs {
		s := &p.seqs[i]
		s.setVisibility(o)
	}
	if o.BlockK == 0 {
		p.fitKVBlocks()
	}
	return nil
}

// bwdTaskTarget is the number of KV blocks the backward aims at, however
// few (sequence, KV head) pairs a call has: enough for 64 workers to get 4
// each. It is a fixed number, not the worker count, so that the KV blocks,
// and with them the results, do not depend on the worker count.
const bwdTaskTarget = 256

// fitKVBlocks halves the backward's KV block (down to 64 keys) while the
// call has fewer than bwdTaskTarget of them.
func (p *plan) fitKVBlocks() {
	blocks := func(bk int) (n int) {
		for _, s := range p.seqs {
			if s.nq > 0 {
				n += p.kvHeads * ((s.nk + bk - 1) / bk)
			}
		}
		return n
	}
	for p.bwdBlockK >= 128 && p.bwdBlockK%32 == 0 && blocks(p.bwdBlockK) < bwdTaskTarget {
		p.bwdBlockK /= 2
	}
}

// checkBlockMask checks that m covers every sequence and head.
func checkBlockMask(m *BlockMask, seqs []sequence, heads int) error {
	s := m.shape
	switch {
	case s.Batch != 1 && s.Batch != len(seqs):
		return argErr("Options.BlockMask", "BlockMask has batch %d, want 1 or %d", s.Batch, len(seqs))
	case s.Heads != 1 && s.Heads != heads:
		return argErr("Options.BlockMask", "BlockMask has %d heads, want 1 or %d", s.Heads, heads)
	}
	for b, sq := range seqs {
		if sq.nq > s.SeqQ || sq.nk > s.SeqK {
			return argErr("Options.BlockMask", "BlockMask covers %d × %d positions, but sequence %d has %d queries and %d keys", s.SeqQ, s.SeqK, b, sq.nq, sq.nk)
		}
	}
	return nil
}

func (p *plan) varlenSequences(a *arena, o *Options, q, k Tensor) error {
	vl := o.VarLen
	if q.Batch != 1 {
		return argErr("q", "with VarLen, q, k and v must be packed [total, heads, dim] tensors (Batch 1), q has Batch %d", q.Batch)
	}
	cq, ck := vl.CuSeqlensQ, vl.CuSeqlensK
	if len(cq) < 2 || len(cq) != len(ck) {
		return argErr("Options.VarLen.CuSeqlensQ", "VarLen needs CuSeqlensQ and CuSeqlensK of equal length ≥ 2 (batch+1), have %d and %d", len(cq), len(ck))
	}
	nb := len(cq) - 1
	if vl.SeqUsedK != nil && len(vl.SeqUsedK) != nb {
		return argErr("Options.VarLen.SeqUsedK", "VarLen.SeqUsedK has %d entries, want %d (one per sequence)", len(vl.SeqUsedK), nb)
	}
	for _, c := range []struct {
		name  string
		cu    []int32
		total int
	}{{"CuSeqlensQ", cq, q.Seq}, {"CuSeqlensK", ck, k.Seq}} {
		arg := "Options.VarLen." + c.name
		if c.cu[0] != 0 {
			return argErr(arg, "VarLen.%s[0] is %d, want 0", c.name, c.cu[0])
		}
		for i := 1; i < len(c.cu); i++ {
			if c.cu[i] < c.cu[i-1] {
				return argErr(arg, "VarLen.%s decreases at index %d (%d < %d)", c.name, i, c.cu[i], c.cu[i-1])
			}
		}
		if int(c.cu[nb]) != c.total {
			return argErr(arg, "VarLen.%s ends at %d, but the packed tensor has %d rows", c.name, c.cu[nb], c.total)
		}
	}
	H, totalQ := q.Heads, q.Seq
	p.seqs = grow(&a.seqs, nb)
	for b := range p.seqs {
		q0, nq := int(cq[b]), int(cq[b+1]-cq[b])
		k0, nk := int(ck[b]), int(ck[b+1]-ck[b])
		if vl.SeqUsedK != nil {
			u := int(vl.SeqUsedK[b])
			if u < 0 || u > nk {
				return argErr("Options.VarLen.SeqUsedK", "VarLen.SeqUsedK[%d] is %d, want 0..%d", b, u, nk)
			}
			nk = u
		}
		p.seqs[b] = sequence{b: b, q0: q0, nq: nq, k0: k0, nk: nk, lse0: q0, lseH: totalQ}
	}
	p.lseLen = H * totalQ
	return nil
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

// setTiles sizes the tiles for an L2 of l2 bytes (see blockSizesFor) and the
// options: the forward's, the backward's KV block, and their alignment to a
// block mask and to the pairs of native 16-bit products.
func (p *plan) setTiles(l2, seqK int, o *Options) {
	p.blockQ, p.blockK = blockSizesFor(p.dim, l2, o)
	p.bwdBlockK = backwardKeyBlock(p.blockK, seqK, o)
	p.alignQ = 1
	if m := o.BlockMask; m != nil && o.BlockQ == 0 && o.BlockK == 0 {
		p.blockQ, p.bwdBlockK = alignToMask(p.blockQ, p.bwdBlockK, m.shape)
		p.alignQ = p.blockQ
	}
	if p.native {
		// The backward's query tiles start on even rows (pairs of the VNNI
		// layout of Q and dO).
		p.blockQ = even(p.blockQ)
		p.alignQ = even(p.alignQ)
	}
	p.maxRows = max(p.blockQ, maxStackRows)
}
