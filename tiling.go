package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// tiling is the geometry of a call, from its shape and options alone: the
// sequences with what each query row sees, the tile sizes, and (tasks.go)
// the task lists of every pass. It reads no tensor, so ValidateShape and
// CountTraffic build one without any data.
type tiling struct {
	seqs           []sequence
	heads, kvHeads int // H, Hk
	group          int // H / Hk: query heads per KV head
	dim, dimPad    int // head dim of Q and K, and padded to the kernel width
	dimV, dimVPad  int // head dim of V and O (MLA: may differ), and padded
	cacheBytes     int // the cache (L2) the tiles are sized for
	blockQ, blockK int // forward tile: query rows (a microtile), keys
	superQ         int // forward super-block: query rows whose microtiles share each K/V tile in L2
	bwdBlockK      int // backward KV block
	alignQ         int // backward query tiles start on multiples of it
	maxRows        int // rows of the largest row block: blockQ, or a stacked block's
	lseLen         int // LSE entries: batch·heads·seqlen_q (heads·total with VarLen)
	masked         bool
	fromCache      bool    // the keys are a KV cache's (forward only)
	kvBatch        int     // batch dimension of k and v (blocks when paged)
	kvRows         int     // seqlen dimension of k and v (block size when paged)
	pages          pages   // a paged cache's page table
	cache          cacheAt // a KV-cache call's appends, rotary and splits
	mem            tilingMem
}

// tilingMem is what a tiling keeps from call to call.
type tilingMem struct {
	seqs              []sequence
	pageTable, cacheE []int32
	cuNew             []int32     // a copy of KVCache.CuSeqlensKNew
	news              []newKeys   // cacheAt.news
	appends           []slotWrite // checkPagedAppend's scratch
}

// tileParams are the inputs of a tiling besides the shape and options.
type tileParams struct {
	cacheBytes  int  // size the tiles for a cache of this many bytes
	native      bool // native 16-bit products: query tiles start on even rows
	fitBackward bool // halve the backward's KV block when there are few of them (fitKVBlocks)
}

// build validates shape s (resolved) against the options that shape the
// sequences (VarLen, KVCache) and sets the tiling; the other options are
// checked against the sequences by Options.checkSequences. Option values
// must have been validated (Options.validate).
func (t *tiling) build(s Shape, o *Options, tp tileParams) error {
	mem := t.mem
	B, Sq, H, D, Sk, Hk := s.Batch, s.SeqQ, s.Heads, s.Dim, s.SeqK, s.KVHeads
	if H%Hk != 0 {
		return argErr("k", "q has %d heads, not a multiple of the %d heads of k and v", H, Hk)
	}
	cached := o.KVCache != nil
	// A cache row per sequence: q's batch, or with VarLen its sequences.
	rowPerSeq := !cached || o.KVCache.BlockTable == nil && o.KVCache.BatchIdx == nil
	if rowPerSeq && !(cached && o.VarLen != nil) && s.KVBatch != B {
		return argErr("k", "k has batch %d, want %d (q's)", s.KVBatch, B)
	}
	*t = tiling{
		heads: H, kvHeads: Hk, group: H / Hk,
		dim: D, dimPad: kernel.Pad(D),
		dimV: s.DimV, dimVPad: kernel.Pad(s.DimV),
		masked:    o.BlockMask != nil || o.Mask != nil,
		fromCache: cached,
		kvBatch:   s.KVBatch, kvRows: Sk,
		mem: mem,
	}
	t.setTiles(tp.cacheBytes, Sk, o, tp.native)
	switch {
	case o.VarLen != nil:
		if err := t.varlenSequences(o.VarLen, B, Sq, Sk, cached); err != nil {
			return err
		}
		if n := len(t.seqs); cached && rowPerSeq && s.KVBatch != n {
			return argErr("k", "the KV cache k has batch %d, want %d (one row per sequence of VarLen)", s.KVBatch, n)
		}
	default:
		t.seqs = grow(&t.mem.seqs, B)
		for b := range t.seqs {
			t.seqs[b] = sequence{b: b, tb: b, kvb: b, nq: Sq, nk: Sk, lse0: b * H * Sq, lseH: Sq}
		}
		t.lseLen = B * H * Sq
	}
	if cached {
		if err := t.cacheSequences(o, s); err != nil {
			return err
		}
	}
	for i := range t.seqs {
		sq := &t.seqs[i]
		sq.nqAll = max(sq.nqAll, sq.nq)
		if f := o.Offsets; f != nil {
			sq.qpos, sq.kpos = f.Query, f.Key
		}
	}
	if err := o.checkSequences(t.seqs, H); err != nil {
		return err
	}
	for i := range t.seqs {
		t.seqs[i].setVisibility(o)
	}
	if o.BlockK == 0 && tp.fitBackward {
		t.fitKVBlocks()
	}
	return nil
}

// setTiles sizes the tiles for a cache of cacheBytes (see blockSizesFor) and
// the options: the forward's, the backward's KV block, and their alignment
// to a block mask and to the pairs of native 16-bit products.
func (t *tiling) setTiles(cacheBytes, seqK int, o *Options, native bool) {
	t.cacheBytes = cacheBytes
	t.blockQ, t.blockK = blockSizesFor(t.dim, cacheBytes, o)
	t.bwdBlockK = backwardKeyBlock(t.blockK, seqK, o)
	t.alignQ = 1
	if m := o.BlockMask; m != nil && o.BlockQ == 0 && o.BlockK == 0 {
		t.blockQ, t.bwdBlockK = alignToMask(t.blockQ, t.bwdBlockK, m.shape)
		t.alignQ = t.blockQ
	}
	if native {
		// The backward's query tiles start on even rows (pairs of the VNNI
		// layout of Q and dO).
		t.blockQ = even(t.blockQ)
		t.alignQ = even(t.alignQ)
	}
	t.superQ = superBlockRows(t.dim, t.dimV, cacheBytes, t.blockQ, o)
	t.maxRows = max(t.superQ, maxStackRows)
}

// bwdTaskTarget is the number of KV blocks the backward aims at, however
// few (sequence, KV head) pairs a call has: enough for 64 workers to get 4
// each. It is a fixed number, not the worker count, so that the KV blocks,
// and with them the results, do not depend on the worker count.
const bwdTaskTarget = 256

// fitKVBlocks halves the backward's KV block (down to 64 keys) while the
// call has fewer than bwdTaskTarget of them.
func (t *tiling) fitKVBlocks() {
	blocks := func(bk int) (n int) {
		for _, s := range t.seqs {
			if s.nq > 0 {
				n += t.kvHeads * ((s.nk + bk - 1) / bk)
			}
		}
		return n
	}
	for t.bwdBlockK >= 128 && t.bwdBlockK%32 == 0 && blocks(t.bwdBlockK) < bwdTaskTarget {
		t.bwdBlockK /= 2
	}
}

// keyAt returns the batch index and row of k and v that hold key j of
// sequence s: through the page table when the cache is paged.
func (t *tiling) keyAt(s *sequence, j int) (tb, row int) {
	j += s.k0
	if t.pages.blockSize == 0 {
		return s.kvb, j
	}
	return int(t.pages.table[s.b*t.pages.perSeq+j/t.pages.blockSize]), j % t.pages.blockSize
}

// inPage reports whether n keys from row r of a cache page (keyAt's row)
// lie in that page: always when the cache is not paged.
func (t *tiling) inPage(r, n int) bool {
	return t.pages.blockSize == 0 || r+n <= t.pages.blockSize
}

// stacked reports whether sequence s is processed as one row block of all
// its query heads (few query rows: decoding).
func (t *tiling) stacked(s *sequence) bool {
	return t.heads > 1 && s.nq*t.heads <= maxStackRows
}

// maxStackRows bounds the rows of a stacked (decoding) row block. 128
// stacks MLA's decoding (128 query heads sharing one latent), whose one
// row per head would otherwise be 128 single-row products reading the
// whole cache each (measured on Zen 4, 128 heads, 576/512, bf16 latent of
// 32k tokens: 1.6 s per step with 64, 0.11 s with 128).
const maxStackRows = 128

// readers is the number of forward row blocks that read each K/V tile of
// sequence s.
func (t *tiling) readers(s *sequence) int {
	if t.stacked(s) {
		return 1
	}
	return t.group * ((s.nq + t.blockQ - 1) / t.blockQ)
}

// packRowsMin is the rows per KV head of a stacked block from which its
// K and V are packed although one block reads them: with that many rows
// (MLA's 128 query heads on one latent) the products dominate, so the
// packed layouts (and the native 16-bit products) pay for the one pass
// that packs them.
const packRowsMin = 64

// packs reports whether the forward packs sequence s's K and V once per
// call (the route fromPacked): two or more row blocks read each tile, or a
// stacked block has packRowsMin rows or more per KV head. Any LeftPad: a
// group of kernel.W keys that a page boundary cuts is gathered from its
// pages (plan.keyRows).
func (t *tiling) packs(s *sequence) bool {
	if s.nk == 0 {
		return false
	}
	if t.stacked(s) {
		return t.group*s.nq >= packRowsMin
	}
	return t.readers(s) >= 2
}
