package flashattn

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
	if src.blockSize == 0 {
		return s.tb, s.k0 + j
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

// cacheSequences sets the key counts of a KV-cache call and, for a paged
// cache, copies the page table (so that the caller changing it during the
// call cannot send a read out of bounds).
func (p *plan) cacheSequences(a *arena, c *KVCache, k Tensor) error {
	B := len(p.seqs)
	if len(c.SeqLens) != B {
		return argErr("Options.KVCache.SeqLens", "KVCache.SeqLens has %d entries, want %d (one per sequence)", len(c.SeqLens), B)
	}
	capacity := k.Seq
	if c.BlockTable != nil {
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
	for b := range p.seqs {
		n := c.SeqLens[b] // read once: the caller's slice may change
		if n < 0 || int(n) > capacity {
			return argErr("Options.KVCache.SeqLens", "KVCache.SeqLens[%d] is %d, want 0..%d", b, n, capacity)
		}
		p.seqs[b].nk = int(n)
	}
	return nil
}
