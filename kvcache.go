package flashattn

import "math"

// kvcache.go holds the geometry of a KV-cache call (flash-attn's
// flash_attn_with_kvcache): which cache rows or pages hold each sequence's
// keys, where the new keys go, and the checks of the KVCache option against
// the shape. Appending (kvappend.go) and reading (kvsource.go, decode.go)
// use it.

// pages is a paged cache's page table: a copy of KVCache.BlockTable, so that
// the caller changing it during the call cannot send a read out of bounds.
type pages struct {
	table     []int32
	perSeq    int // blocks per sequence in table
	blockSize int // keys per block; 0 when not paged
}

// cacheAt is what a KV-cache call does besides attending: the new keys and
// values to append, the rotary embedding, the split override.
type cacheAt struct {
	newRows    int       // new keys of all sequences (0: nothing to append)
	news       []newKeys // per sequence: its new keys in KNew and VNew
	end        []int32   // per sequence: SeqLens, where the new keys go
	rotary     *Rotary
	ropeCausal bool // query rows at increasing positions (causal or local, see ropeAdvances)
	numSplits  int
}

// newKeys is where one sequence's new keys and values are in KNew and
// VNew: rows i0..i0+n-1 of their batch element tb. A dense call's are the
// Snew rows of batch element b, a VarLen call's the rows CuSeqlensKNew[b]..
// of the packed tensors (batch 0): one mechanism for both.
type newKeys struct{ tb, i0, n int }

// maxNumSplits bounds KVCache.NumSplits (flash-attn's cap): the partial
// results it needs grow with it.
const maxNumSplits = 128

// cacheSequences checks a KV-cache call's options against the shape (k
// and v are the cache) and sets each sequence's keys: cache row, first
// valid position, count. It copies the page table and the per-sequence
// counts.
func (t *tiling) cacheSequences(o *Options, s Shape) error {
	c := o.KVCache
	B := len(t.seqs)
	for _, x := range []struct {
		name string
		x    []int32
	}{{"SeqLens", c.SeqLens}, {"BatchIdx", c.BatchIdx}, {"LeftPad", c.LeftPad}} {
		if x.x != nil && len(x.x) != B || x.name == "SeqLens" && len(x.x) != B {
			return argErr("Options.KVCache."+x.name, "KVCache.%s has %d entries, want %d (one per sequence)", x.name, len(x.x), B)
		}
	}
	capacity := s.SeqK
	if c.BlockTable != nil {
		if c.BatchIdx != nil {
			return argErr("Options.KVCache.BatchIdx", "KVCache.BatchIdx cannot be combined with BlockTable")
		}
		if s.SeqK%16 != 0 {
			return argErr("k", "paged KVCache block size %d (k's seqlen) must be a multiple of 16", s.SeqK)
		}
		if c.BlocksPerSeq <= 0 || len(c.BlockTable) != B*c.BlocksPerSeq {
			return argErr("Options.KVCache.BlockTable", "KVCache.BlockTable has %d entries, want batch %d × BlocksPerSeq %d", len(c.BlockTable), B, c.BlocksPerSeq)
		}
		table := grow(&t.mem.pageTable, len(c.BlockTable))
		copy(table, c.BlockTable)
		for i, blk := range table {
			if blk < 0 || int(blk) >= s.KVBatch {
				return argErr("Options.KVCache.BlockTable", "KVCache.BlockTable[%d] is %d, want 0..%d (k has %d blocks)", i, blk, s.KVBatch-1, s.KVBatch)
			}
		}
		t.pages = pages{table: table, perSeq: c.BlocksPerSeq, blockSize: s.SeqK}
		var ok bool
		if capacity, ok = mulAdd(c.BlocksPerSeq, s.SeqK, 0); !ok {
			return argErr("Options.KVCache.BlocksPerSeq", "KVCache.BlocksPerSeq %d × block size %d overflows int", c.BlocksPerSeq, s.SeqK)
		}
	}
	cs := &t.cache
	*cs = cacheAt{numSplits: c.NumSplits, ropeCausal: ropeAdvances(o)}
	if c.NumSplits < 0 || c.NumSplits > maxNumSplits {
		return argErr("Options.KVCache.NumSplits", "KVCache.NumSplits %d must be in 0..%d", c.NumSplits, maxNumSplits)
	}
	if c.CuSeqlensKNew != nil && o.VarLen == nil {
		return argErr("Options.KVCache.CuSeqlensKNew", "KVCache.CuSeqlensKNew packs the new keys of a VarLen call: set Options.VarLen, or leave it nil (KNew is then [batch, Snew, kv_heads, dim])")
	}
	knew, _, err := newKeyViews(c, s)
	if err != nil {
		return err
	}
	if err := t.newKeySpans(c, knew, o.VarLen != nil); err != nil {
		return err
	}
	cs.rotary = c.Rotary // the queries rotate with or without new keys, as in flash-attn
	cs.end = grow(&t.mem.cacheE, B)
	for b := range t.seqs {
		sq := &t.seqs[b]
		n := cs.news[b].n
		end := c.SeqLens[b] // each read once: the caller's slices may change
		cs.end[b] = end
		if end < 0 || int(end) > capacity-n { // not end+n: it wraps on 32-bit platforms
			return argErr("Options.KVCache.SeqLens", "KVCache.SeqLens[%d] is %d: with %d new keys, want 0..%d (the cache's capacity)", b, end, n, capacity-n)
		}
		sq.kvb = b // VarLen's sequences are all batch 0 of q
		if c.BatchIdx != nil {
			r := c.BatchIdx[b]
			if r < 0 || int(r) >= s.KVBatch {
				return argErr("Options.KVCache.BatchIdx", "KVCache.BatchIdx[%d] is %d, want 0..%d (k has %d rows)", b, r, s.KVBatch-1, s.KVBatch)
			}
			sq.kvb = int(r)
		}
		if c.LeftPad != nil {
			l := c.LeftPad[b]
			if l < 0 || l > end {
				return argErr("Options.KVCache.LeftPad", "KVCache.LeftPad[%d] is %d, want 0..%d (SeqLens[%d])", b, l, end, b)
			}
			sq.k0 = int(l)
		}
		sq.nk = int(end) + n - sq.k0
		if r := cs.rotary; r != nil {
			if err := checkRotaryRows(r, b, int(end), int(end)+max(n, sq.nq)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ropeAdvances reports whether a KV-cache call rotates query row i at
// SeqLens + i (otherwise every row at SeqLens): flash-attn's rule, "causal
// or local", a window being local unless both sides are unbounded (its
// window_size (-1, -1), which hides nothing).
func ropeAdvances(o *Options) bool {
	w := o.Window
	return o.Causal || w != nil && (w.Left >= 0 || w.Right >= 0)
}

// newKeySpans sets where each sequence's new keys are in KNew and VNew
// (cacheAt.news, cacheAt.newRows): the Snew rows of its batch element, or,
// with VarLen, rows CuSeqlensKNew[b]..CuSeqlensKNew[b+1]-1 of the packed
// KNew (batch 1), checked as VarLen's cu_seqlens are (from a copy: the
// caller's slice may change).
func (t *tiling) newKeySpans(c *KVCache, knew view, varlen bool) error {
	cs := &t.cache
	news := grow(&t.mem.news, len(t.seqs))
	cs.news = news
	has := knew.shape[1] > 0
	cu := c.CuSeqlensKNew
	const arg = "Options.KVCache.CuSeqlensKNew"
	switch {
	case cu != nil && !has:
		return argErr(arg, "KVCache.CuSeqlensKNew is set, but KNew and VNew are not")
	case cu == nil && varlen && has:
		return argErr(arg, "with VarLen, KVCache.KNew and VNew are packed [1, total_new, kv_heads, dim]: CuSeqlensKNew must say which rows are each sequence's")
	case cu != nil && len(cu) != len(news)+1:
		return argErr(arg, "KVCache.CuSeqlensKNew has %d entries, want %d (sequences+1, as VarLen.CuSeqlensQ)", len(cu), len(news)+1)
	}
	if cu != nil {
		cu = append(t.mem.cuNew[:0], cu...)
		t.mem.cuNew = cu
		if err := checkCuSeqlens("KVCache.CuSeqlensKNew", cu, knew.shape[1]); err != nil {
			return err
		}
	}
	cs.newRows = 0
	for b := range news {
		switch {
		case cu != nil:
			news[b] = newKeys{tb: 0, i0: int(cu[b]), n: int(cu[b+1] - cu[b])}
		case has:
			news[b] = newKeys{tb: b, i0: 0, n: knew.shape[1]}
		default:
			news[b] = newKeys{}
		}
		cs.newRows += news[b].n
	}
	return nil
}

// checkRotaryRows checks that the positions [first, last) sequence b
// rotates to exist in r and are finite.
func checkRotaryRows(r *Rotary, b, first, last int) error {
	if last > len(r.Cos)/(r.Dim/2) {
		return argErr("Options.KVCache.Rotary", "KVCache.Rotary has %d positions, sequence %d needs %d", len(r.Cos)/(r.Dim/2), b, last)
	}
	half := r.Dim / 2
	for _, tab := range [][]float32{r.Cos, r.Sin} {
		for i, x := range tab[first*half : last*half] {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return argErr("Options.KVCache.Rotary", "KVCache.Rotary table entry [%d, %d] is %v, want a finite number", first+i/half, i%half, x)
			}
		}
	}
	return nil
}

// newKeyViews checks KNew, VNew and Rotary against the call's shape s
// (k and v being the cache) and returns the views of KNew and VNew (zero
// views when there are none).
func newKeyViews(c *KVCache, s Shape) (knew, vnew view, err error) {
	switch nk, nv := c.KNew.fields(), c.VNew.fields(); {
	case nk == 0 && nv == 0:
		return view{}, view{}, checkRotary(c.Rotary, s) // no new keys: the queries still rotate
	case nk == 0:
		return view{}, view{}, argErr("Options.KVCache.KNew", "KVCache.KNew and VNew must be given together")
	case nv == 0 && s.DimV > s.Dim:
		return view{}, view{}, argErr("Options.KVCache.VNew", "KVCache.VNew is unset: that is only for a v that is a view of the first columns of k (an MLA latent cache), and v is wider than k")
	}
	if knew, err = c.KNew.check("Options.KVCache.KNew", false, s.Batch, -1, s.KVHeads, s.Dim); err != nil {
		return view{}, view{}, err
	}
	if c.VNew.fields() != 0 {
		if vnew, err = c.VNew.check("Options.KVCache.VNew", false, s.Batch, c.KNew.Seq, s.KVHeads, s.DimV); err != nil {
			return view{}, view{}, err
		}
	}
	if err := checkRotary(c.Rotary, s); err != nil {
		return view{}, view{}, err
	}
	return knew, vnew, nil
}

// checkRotary checks rotary embedding r (nil: none) against the call's
// shape s: its channel range and the shape of its tables.
func checkRotary(r *Rotary, s Shape) error {
	switch {
	case r == nil:
		return nil
	case r.Offset < 0 || r.Offset%2 != 0 || r.Offset >= s.Dim:
		return argErr("Options.KVCache.Rotary", "Rotary.Offset %d must be even, in 0..%d (below the head dim)", r.Offset, s.Dim-1)
	case r.Dim <= 0 || r.Dim%2 != 0 || r.Dim > s.Dim-r.Offset:
		return argErr("Options.KVCache.Rotary", "Rotary.Dim %d must be even, in 2..%d (the head dim %d less Offset %d)", r.Dim, s.Dim-r.Offset, s.Dim, r.Offset)
	case len(r.Cos) != len(r.Sin) || len(r.Cos) == 0 || len(r.Cos)%(r.Dim/2) != 0:
		return argErr("Options.KVCache.Rotary", "Rotary.Cos and Sin have %d and %d entries, want equal multiples of Dim/2 = %d ([max_pos, Dim/2])", len(r.Cos), len(r.Sin), r.Dim/2)
	}
	return nil
}
