package flashattn

// varlenSequences sets the sequences of a variable-length batch: q, k and v
// are packed [total, heads, dim] tensors (batch must be 1) of totalQ and
// totalK rows, and vl says where each sequence starts. This is the one
// place that checks cu_seqlens: two slices of equal length ≥ 2 (batch+1),
// starting at 0, never decreasing, ending at the packed totals; SeqUsedK
// one entry per sequence, each within its sequence's keys.
func (t *tiling) varlenSequences(vl *VarLen, batch, totalQ, totalK int) error {
	if batch != 1 {
		return argErr("q", "with VarLen, q, k and v must be packed [total, heads, dim] tensors (Batch 1), q has Batch %d", batch)
	}
	cq, ck := vl.CuSeqlensQ, vl.CuSeqlensK
	if len(cq) < 2 || len(cq) != len(ck) {
		return argErr("Options.VarLen.CuSeqlensQ", "VarLen needs CuSeqlensQ and CuSeqlensK of equal length ≥ 2 (batch+1), have %d and %d", len(cq), len(ck))
	}
	nb := len(cq) - 1
	if vl.SeqUsedK != nil && len(vl.SeqUsedK) != nb {
		return argErr("Options.VarLen.SeqUsedK", "VarLen.SeqUsedK has %d entries, want %d (one per sequence)", len(vl.SeqUsedK), nb)
	}
	if vl.SeqUsedQ != nil && len(vl.SeqUsedQ) != nb {
		return argErr("Options.VarLen.SeqUsedQ", "VarLen.SeqUsedQ has %d entries, want %d (one per sequence)", len(vl.SeqUsedQ), nb)
	}
	for _, c := range []struct {
		name  string
		cu    []int32
		total int
	}{{"CuSeqlensQ", cq, totalQ}, {"CuSeqlensK", ck, totalK}} {
		// The argument's name is built only on an error: a call allocates
		// nothing in steady state.
		bad := func(format string, a ...any) error { return argErr("Options.VarLen."+c.name, format, a...) }
		if c.cu[0] != 0 {
			return bad("VarLen.%s[0] is %d, want 0", c.name, c.cu[0])
		}
		for i := 1; i < len(c.cu); i++ {
			if c.cu[i] < c.cu[i-1] {
				return bad("VarLen.%s decreases at index %d (%d < %d)", c.name, i, c.cu[i], c.cu[i-1])
			}
		}
		if int(c.cu[nb]) != c.total {
			return bad("VarLen.%s ends at %d, but the packed tensor has %d rows", c.name, c.cu[nb], c.total)
		}
	}
	t.seqs = grow(&t.mem.seqs, nb)
	for b := range t.seqs {
		q0, nq := int(cq[b]), int(cq[b+1]-cq[b])
		k0, nk := int(ck[b]), int(ck[b+1]-ck[b])
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
