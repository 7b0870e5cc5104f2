package flashattn

import (
	"cmp"
	"slices"
	"unsafe"
)

// appendKV writes the new keys (rotated) and values of every sequence into
// the cache at positions SeqLens[b]... (each sequence's own count of them,
// see newKeys). A q8_0 cache is written only once
// every new row has been quantised without error (also q4_0): a failing row leaves the
// cache as it was. While the call is Reserve's (c.reserving) the rows are
// only converted and checked, in a workspace that grows as the append
// needs, and the cache is left as it is.
func (c *call) appendKV() error {
	p := &c.plan
	if p.cache.newRows == 0 {
		return nil
	}
	ws := workspaces.get()
	defer workspaces.put(ws)
	if p.k.dt.quantized() || p.v.dt.quantized() || c.reserving {
		if err := p.appendRows(ws, false); err != nil || c.reserving {
			return err
		}
	}
	return p.appendRows(ws, true)
}

// appendRows converts every new key (rotated) and value to the cache's
// type and, if write, stores it; it returns the first row that a q8_0 cache
// cannot hold.
func (p *plan) appendRows(ws *workspace, write bool) error {
	cs := &p.cache
	row := grow(&ws.conv.out, max(p.dim, p.dimV))
	store := func(dst view, tb, r, hk int) error {
		if write {
			return dst.storeRow(row[:dst.shape[3]], tb, r, hk, &p.kern)
		}
		if dst.dt.quantized() {
			q := grow(&ws.conv.q8, quantBytes(dst.dt, dst.shape[3]))
			return quantize(dst.dt, q, row[:dst.shape[3]], dst.scale)
		}
		return nil
	}
	for b := range p.seqs {
		s, nw := &p.seqs[b], cs.news[b]
		first := int(cs.end[b]) - s.k0 // key index of the first new key
		for i := 0; i < nw.n; i++ {
			tb, r := p.keyAt(s, first+i)
			for hk := 0; hk < p.kvHeads; hk++ {
				p.knew.rowTo(row[:p.dim], nw.tb, nw.i0+i, hk, Float32, &p.kern)
				if cs.rotary != nil {
					cs.rotary.rotate(row, int(cs.end[b])+i) // the absolute cache position, as flash-attn
				}
				if err := store(p.k, tb, r, hk); err != nil {
					return argErr("Options.KVCache.KNew", "KVCache.KNew[%d, %d, %d] cannot be stored in the %v cache: %v", b, i, hk, p.k.dt, err)
				}
				if p.vnew.shape[3] == 0 {
					continue // an MLA latent cache: v is k's first columns
				}
				p.vnew.rowTo(row[:p.dimV], nw.tb, nw.i0+i, hk, Float32, &p.kern)
				if err := store(p.v, tb, r, hk); err != nil {
					return argErr("Options.KVCache.VNew", "KVCache.VNew[%d, %d, %d] cannot be stored in the %v cache: %v", b, i, hk, p.v.dt, err)
				}
			}
		}
	}
	return nil
}

// checkAppend refuses, before anything is written, a KV-cache call whose
// appends would overwrite what the call reads or another append: new keys
// or values in the cache's memory (or in q's), a cache whose k and v share
// memory, two sequences appending to one cache row, and, with a page table,
// a slot written twice or written by one sequence and read by another (or
// read by the same sequence at another position).
func (p *plan) checkAppend() error {
	if p.cache.newRows == 0 {
		return nil
	}
	kr, vr := viewRegion(p.k), viewRegion(p.v)
	latent := p.vnew.shape[3] == 0 // MLA: v is a view of k's first columns, written with it
	if latent && !columnsOf(p.v, p.k) {
		return argErr("Options.KVCache.VNew", "KVCache.VNew is unset, but v is not a view of the first columns of k (an MLA latent cache)")
	}
	for _, x := range []struct {
		name string
		r    region
	}{{"KNew", viewRegion(p.knew)}, {"VNew", viewRegion(p.vnew)}} {
		if x.r.rowLen == 0 {
			continue
		}
		for _, in := range []struct {
			name string
			r    region
		}{{"the cache k", kr}, {"the cache v", vr}, {"q", viewRegion(p.q)}} {
			if overlaps(x.r, in.r) {
				return argErr("Options.KVCache."+x.name, "KVCache.%s shares memory with %s it is appended to or read with", x.name, in.name)
			}
		}
	}
	if !latent && overlaps(kr, vr) {
		return argErr("v", "the cache's k and v share memory: appending keys would overwrite values (for an MLA latent cache, leave KVCache.VNew unset)")
	}
	for _, c := range []struct {
		name string
		r    region
	}{{"k", kr}, {"v", vr}} {
		if overlaps(viewRegion(p.q), c.r) {
			return argErr("q", "q shares memory with the cache %s that new keys are appended to", c.name)
		}
	}
	if p.pages.blockSize == 0 {
		for b := range p.seqs {
			for b2 := range b {
				appends := p.cache.news[b].n > 0 || p.cache.news[b2].n > 0
				if appends && p.seqs[b].kvb == p.seqs[b2].kvb {
					return argErr("Options.KVCache.BatchIdx", "sequences %d and %d both append to cache row %d", b2, b, p.seqs[b].kvb)
				}
			}
		}
		return nil
	}
	return p.checkPagedAppend()
}

// checkPagedAppend checks a paged cache's appends slot by slot: each slot
// (block, row) written by at most one new key, and read by no other
// position of any sequence. It looks only at the blocks that hold new keys,
// and allocates nothing in steady state.
func (p *plan) checkPagedAppend() error {
	bs := p.pages.blockSize
	writes := p.mem.appends[:0] // (slot, writer, its key index), sorted by slot
	for b := range p.seqs {
		s := &p.seqs[b]
		first := int(p.cache.end[b]) - s.k0
		for i := 0; i < p.cache.news[b].n; i++ {
			tb, r := p.keyAt(s, first+i)
			writes = append(writes, slotWrite{tb*bs + r, b, first + i})
		}
	}
	p.mem.appends = writes
	slices.SortFunc(writes, func(a, b slotWrite) int { return cmp.Compare(a.slot, b.slot) })
	for i := 1; i < len(writes); i++ {
		if w, v := writes[i-1], writes[i]; w.slot == v.slot {
			return argErr("Options.KVCache.BlockTable", "sequences %d and %d append to the same cache slot (block %d, row %d)", w.seq, v.seq, w.slot/bs, w.slot%bs)
		}
	}
	for b := range p.seqs {
		s := &p.seqs[b]
		row := p.pages.table[b*p.pages.perSeq:]
		for pb := s.k0 / bs; pb*bs < s.k0+s.nk; pb++ {
			blk := int(row[pb])
			// The writes into this block.
			i, _ := slices.BinarySearchFunc(writes, blk*bs, func(w slotWrite, slot int) int { return cmp.Compare(w.slot, slot) })
			for ; i < len(writes) && writes[i].slot < (blk+1)*bs; i++ {
				w := writes[i]
				pos := pb*bs + w.slot%bs - s.k0 // sequence b's key index of that slot
				if pos >= 0 && pos < s.nk && (w.seq != b || w.pos != pos) {
					return argErr("Options.KVCache.BlockTable", "sequence %d appends to cache slot (block %d, row %d), which sequence %d reads as its key %d", w.seq, blk, w.slot%bs, b, pos)
				}
			}
		}
	}
	return nil
}

// slotWrite is one new key of a paged append: its slot (block·block size +
// row), the sequence writing it and its key index there.
type slotWrite struct{ slot, seq, pos int }

// columnsOf reports whether v is a view of the first columns of k: the
// same memory, strides and outer shape, with a head dim at most k's (an
// MLA latent cache, whose values are the keys' first columns).
func columnsOf(v, k view) bool {
	sameData := unsafe.SliceData(v.raw) == unsafe.SliceData(k.raw)
	return sameData && v.dt == k.dt && v.scale == k.scale && v.bs == k.bs && v.ss == k.ss && v.hs == k.hs &&
		v.shape[0] == k.shape[0] && v.shape[1] == k.shape[1] && v.shape[2] == k.shape[2] && v.shape[3] <= k.shape[3]
}
