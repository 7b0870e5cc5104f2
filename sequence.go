package flashattn

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
	lse0, lseH int     // LSE of (head h, row i) is at lse0 + h*lseH + i
	nqAll      int     // query rows in q: nq, and with VarLen.SeqUsedQ the padding rows nq..nqAll-1
	qpos, kpos int     // positions of row 0 and key 0 for masks, modifiers and dropout (Options.Offsets)
	route      kvRoute // where the forward reads its K/V tiles (kvsource.go)

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
		s.block = blockVis{m: o.BlockMask, b: s.b, nq: nq, nk: nk, qo: s.qpos, ko: s.kpos}
		s.all.add(&s.block)
	}
	if o.Mask != nil {
		cls, _ := o.Mask.(BlockClassifier)
		s.mask = maskVis{m: o.Mask, cls: cls, b: s.b, nq: nq, nk: nk, qo: s.qpos, ko: s.kpos}
		s.all.add(&s.mask)
	}
	s.vis = &s.all
}
