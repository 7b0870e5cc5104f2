package flashattn

// varlenSequences sets the sequences of a variable-length batch: q, k and v
// are packed [total, heads, dim] tensors (batch must be 1) of totalQ and
// totalK rows, and vl says where each sequence starts. This is the one
// place that checks VarLen's cu_seqlens: two slices of equal length ≥ 2
// (batch+1), starting at 0, never decreasing, ending at the packed totals;
// SeqUsedK one entry per sequence, each within its sequence's keys.
//
// With a KV cache (cached) the keys are the cache's, not packed: CuSeqlensK
// and SeqUsedK must be nil, and each sequence's keys are left for
// cacheSequences to set.
func (t *tiling) varlenSequences(vl *VarLen, batch, totalQ, totalK int, cached bool) error {
	if batch != 1 {
		return argErr("q", "with VarLen, q, k and v must be packed [total, heads, dim] tensors (Batch 1), q has Batch %d", batch)
	}
	cq, ck := vl.CuSeqlensQ, vl.CuSeqlensK
	switch {
	case cached && ck != nil:
		return argErr("Options.VarLen.CuSeqlensK", "VarLen.CuSeqlensK is not used with a KVCache (the cached keys are KVCache.SeqLens, the new ones KVCache.CuSeqlensKNew): leave it nil")
	case cached && vl.SeqUsedK != nil:
		return argErr("Options.VarLen.SeqUsedK", "VarLen.SeqUsedK is not used with a KVCache (KVCache.SeqLens says how many keys each sequence has): leave it nil")
	case len(cq) < 2 || !cached && len(cq) != len(ck):
		return argErr("Options.VarLen.CuSeqlensQ", "VarLen needs CuSeqlensQ and CuSeqlensK of equal length ≥ 2 (batch+1), have %d and %d", len(cq), len(ck))
	}
	nb := len(cq) - 1
	if vl.SeqUsedK != nil && len(vl.SeqUsedK) != nb {
		return argErr("Options.VarLen.SeqUsedK", "VarLen.SeqUsedK has %d entries, want %d (one per sequence)", len(vl.SeqUsedK), nb)
	}
	if vl.SeqUsedQ != nil && len(vl.SeqUsedQ) != nb {
		return argErr("Options.VarLen.SeqUsedQ", "VarLen.SeqUsedQ has %d entries, want %d (one per sequence)", len(vl.SeqUsedQ), nb)
	}
	if err := checkCuSeqlens("VarLen.CuSeqlensQ", cq, totalQ); err != nil {
		return err
	}
	if !cached {
		if err := checkCuSeqlens("VarLen.CuSeqlensK", ck, totalK); err != nil {
			return err
		}
	}
	t.seqs = grow(&t.mem.seqs, nb)
	for b := range t.seqs {
		q0, nq := int(cq[b]), int(cq[b+1]-cq[b])
		k0, nk := 0, 0 // with a cache: set by cacheSequences
		if !cached {
			k0, nk = int(ck[b]), int(ck[b+1]-ck[b])
		}
		if vl.SeqUsedK != nil {
			u := int(vl.SeqUsedK[b])
			if u < 0 || u > nk {
				return argErr("Options.VarLen.SeqUsedK", "VarLen.SeqUsedK[%d] is %d, want 0..%d", b, u, nk)
			}
			nk = u
		}
		all := nq
		if vl.SeqUsedQ != nil {
			u := int(vl.SeqUsedQ[b])
			if u < 0 || u > nq {
				return argErr("Options.VarLen.SeqUsedQ", "VarLen.SeqUsedQ[%d] is %d, want 0..%d", b, u, nq)
			}
			nq = u
		}
		t.seqs[b] = sequence{b: b, q0: q0, nq: nq, nqAll: all, k0: k0, nk: nk, lse0: q0, lseH: totalQ}
	}
	t.lseLen = t.heads * totalQ
	return nil
}

// checkCuSeqlens checks one cu_seqlens slice, the option Options.name
// (VarLen.CuSeqlensQ, KVCache.CuSeqlensKNew ...): starting at 0, never
// decreasing, ending at total (the packed tensor's rows). Its length is the
// caller's to check. The argument's name is built only on an error: a call
// allocates nothing in steady state.
func checkCuSeqlens(name string, cu []int32, total int) error {
	bad := func(format string, a ...any) error { return argErr("Options."+name, format, a...) }
	if cu[0] != 0 {
		return bad("%s[0] is %d, want 0", name, cu[0])
	}
	for i := 1; i < len(cu); i++ {
		if cu[i] < cu[i-1] {
			return bad("%s decreases at index %d (%d < %d)", name, i, cu[i], cu[i-1])
		}
	}
	if n := len(cu) - 1; int(cu[n]) != total {
		return bad("%s ends at %d, but the packed tensor has %d rows", name, cu[n], total)
	}
	return nil
}
