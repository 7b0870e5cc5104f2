package flashattn

import "math"

// kvSource addresses the keys and values of every sequence: rows of the k
// and v tensors, directly or through the page table of a paged KV cache.
type kvSource struct {
	k, v      view
	batch     int // batch dimension of the tensors (number of blocks when paged)
	rows      int // seqlen dimension of the tensors (block size when paged)
	table     []int32
	perSeq    int // blocks per sequence in table
	blockSize int // 0 when not paged
}

// at returns the tensor batch index and row of key j of sequence s: through
// the page table when the cache is paged.
func (src *kvSource) at(s *sequence, j int) (tb, row int) {
	j += s.k0
	if src.blockSize == 0 {
		return s.kvb, j
	}
	return int(src.table[s.b*src.perSeq+j/src.blockSize]), j % src.blockSize
}

// kRows and vRows return keys j..j+n-1 of sequence s for KV head hk as a
// float32 matrix and its leading dimension (see view.rows): in place, or
// converted into *scratch. With a paged cache the n keys must lie in one
// page.
func (p *plan) kRows(scratch *[]float32, s *sequence, j, hk, n int) ([]float32, int) {
	tb, r := p.kv.at(s, j)
	return p.kv.k.rows(scratch, tb, r, hk, n, p.ct, &p.kern)
}

func (p *plan) vRows(scratch *[]float32, s *sequence, j, hk, n int) ([]float32, int) {
	tb, r := p.kv.at(s, j)
	return p.kv.v.rows(scratch, tb, r, hk, n, p.ct, &p.kern)
}

// cacheState is what a KV-cache call does besides attending: the new keys
// and values to append, the rotary embedding, the split override.
type cacheState struct {
	knew, vnew view    // [batch, snew, kv_heads, dim]; unset when snew is 0
	snew       int     // new keys per sequence
	end        []int32 // per sequence: SeqLens, where the new keys go
	rotary     *Rotary
	ropeCausal bool // query rows at increasing positions (causal or window)
	numSplits  int
}

// cacheSequences checks a KV-cache call's options against the tensors and
// sets each sequence's keys: cache row, first valid position, count. It
// copies the page table and the per-sequence counts, so that the caller
// changing them during the call cannot send a read out of bounds.
func (p *plan) cacheSequences(a *arena, o *Options, c *KVCache, q, k Tensor) error {
	B := len(p.seqs)
	for _, s := range []struct {
		name string
		x    []int32
	}{{"SeqLens", c.SeqLens}, {"BatchIdx", c.BatchIdx}, {"LeftPad", c.LeftPad}} {
		if s.x != nil && len(s.x) != B || s.name == "SeqLens" && len(s.x) != B {
			return argErr("Options.KVCache."+s.name, "KVCache.%s has %d entries, want %d (one per sequence)", s.name, len(s.x), B)
		}
	}
	capacity := k.Seq
	if c.BlockTable != nil {
		if c.BatchIdx != nil {
			return argErr("Options.KVCache.BatchIdx", "KVCache.BatchIdx cannot be combined with BlockTable")
		}
		if k.Seq%16 != 0 {
			return argErr("k", "paged KVCache block size %d (k's seqlen) must be a multiple of 16", k.Seq)
		}
		if c.BlocksPerSeq <= 0 || len(c.BlockTable) != B*c.BlocksPerSeq {
			return argErr("Options.KVCache.BlockTable", "KVCache.BlockTable has %d entries, want batch %d × BlocksPerSeq %d", len(c.BlockTable), B, c.BlocksPerSeq)
		}
		table := grow(&a.blockTable, len(c.BlockTable))
		copy(table, c.BlockTable)
		for i, blk := range table {
			if blk < 0 || int(blk) >= k.Batch {
				return argErr("Options.KVCache.BlockTable", "KVCache.BlockTable[%d] is %d, want 0..%d (k has %d blocks)", i, blk, k.Batch-1, k.Batch)
			}
		}
		p.kv.table, p.kv.perSeq, p.kv.blockSize = table, c.BlocksPerSeq, k.Seq
		var ok bool
		if capacity, ok = mulAdd(c.BlocksPerSeq, k.Seq, 0); !ok {
			return argErr("Options.KVCache.BlocksPerSeq", "KVCache.BlocksPerSeq %d × block size %d overflows int", c.BlocksPerSeq, k.Seq)
		}
	}
	cs := &p.cache
	*cs = cacheState{numSplits: c.NumSplits, ropeCausal: o.Causal || o.Window != nil}
	if c.NumSplits < 0 || c.NumSplits > maxNumSplits {
		return argErr("Options.KVCache.NumSplits", "KVCache.NumSplits %d must be in 0..%d", c.NumSplits, maxNumSplits)
	}
	if err := p.newKeys(c, q, k); err != nil {
		return err
	}
	cs.end = grow(&a.cacheEnd, B)
	for b := range p.seqs {
		s := &p.seqs[b]
		end := c.SeqLens[b] // each read once: the caller's slices may change
		cs.end[b] = end
		if end < 0 || int(end)+cs.snew > capacity {
			return argErr("Options.KVCache.SeqLens", "KVCache.SeqLens[%d] is %d: with %d new keys, want 0..%d (the cache's capacity)", b, end, cs.snew, capacity-cs.snew)
		}
		if c.BatchIdx != nil {
			r := c.BatchIdx[b]
			if r < 0 || int(r) >= k.Batch {
				return argErr("Options.KVCache.BatchIdx", "KVCache.BatchIdx[%d] is %d, want 0..%d (k has %d rows)", b, r, k.Batch-1, k.Batch)
			}
			s.kvb = int(r)
		}
		if c.LeftPad != nil {
			l := c.LeftPad[b]
			if l < 0 || l > end {
				return argErr("Options.KVCache.LeftPad", "KVCache.LeftPad[%d] is %d, want 0..%d (SeqLens[%d])", b, l, end, b)
			}
			s.k0 = int(l)
		}
		s.nk = int(end) + cs.snew - s.k0
		if r := cs.rotary; r != nil {
			first, last := int(end)-s.k0, int(end)-s.k0+max(cs.snew, s.nq)
			if last > len(r.Cos)/(r.Dim/2) {
				return argErr("Options.KVCache.Rotary", "KVCache.Rotary has %d positions, sequence %d needs %d", len(r.Cos)/(r.Dim/2), b, last)
			}
			// The rows this call uses must be finite.
			half := r.Dim / 2
			for _, tab := range [][]float32{r.Cos, r.Sin} {
				for i, x := range tab[first*half : last*half] {
					if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
						return argErr("Options.KVCache.Rotary", "KVCache.Rotary table entry [%d, %d] is %v, want a finite number", first+i/half, i%half, x)
					}
				}
			}
		}
	}
	return nil
}

// newKeys checks KNew, VNew and Rotary.
func (p *plan) newKeys(c *KVCache, q, k Tensor) error {
	cs := &p.cache
	switch nk, nv := c.KNew.fields(), c.VNew.fields(); {
	case nk == 0 && nv == 0:
		if c.Rotary != nil {
			return argErr("Options.KVCache.Rotary", "KVCache.Rotary needs KNew and VNew (flash-attn rotates the new keys and the queries)")
		}
		return nil
	case nk == 0 || nv == 0:
		return argErr("Options.KVCache.KNew", "KVCache.KNew and VNew must be given together")
	}
	var err error
	if cs.knew, err = c.KNew.check("Options.KVCache.KNew", false, q.Batch, -1, k.Heads, k.Dim); err != nil {
		return err
	}
	if cs.vnew, err = c.VNew.check("Options.KVCache.VNew", false, q.Batch, c.KNew.Seq, k.Heads, k.Dim); err != nil {
		return err
	}
	cs.snew = c.KNew.Seq
	if r := c.Rotary; r != nil {
		switch {
		case r.Dim <= 0 || r.Dim%2 != 0 || r.Dim > k.Dim:
			return argErr("Options.KVCache.Rotary", "Rotary.Dim %d must be even, in 2..%d (the head dim)", r.Dim, k.Dim)
		case len(r.Cos) != len(r.Sin) || len(r.Cos) == 0 || len(r.Cos)%(r.Dim/2) != 0:
			return argErr("Options.KVCache.Rotary", "Rotary.Cos and Sin have %d and %d entries, want equal multiples of Dim/2 = %d ([max_pos, Dim/2])", len(r.Cos), len(r.Sin), r.Dim/2)
		}
		cs.rotary = r
	}
	return nil
}

// maxNumSplits bounds KVCache.NumSplits (flash-attn's cap): the partial
// results it needs grow with it.
const maxNumSplits = 128
