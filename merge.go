package flashattn

// mergePass combines the key splits of each row block (flash-decoding) by
// their log-sum-exp (lseMerge, with a_s the split's running max and l_s its
// running sum), so the result does not depend on the worker count.
type mergePass struct {
	p      *plan
	out    view
	lse    []float32
	part   *partials
	splits int
	blocks []fwdTask // the first split of each split row block
	mem    []fwdTask // blocks' memory, kept from call to call
}

func (c *call) mergeSplits(splits int) error {
	f, mp := &c.fwd, &c.merge
	blocks := mp.mem[:0]
	for _, t := range f.tasks {
		if t.slot >= 0 && t.slot%splits == 0 {
			blocks = append(blocks, t)
		}
	}
	*mp = mergePass{p: &c.plan, out: f.out, lse: f.lse, part: &f.part, splits: splits, blocks: blocks, mem: blocks}
	return c.plan.parallel(len(blocks), mp)
}

func (mp *mergePass) runTask(ws *workspace, t int) {
	p, part, b := mp.p, mp.part, &mp.blocks[t]
	s := &p.seqs[b.seq]
	first := b.slot - b.slot%mp.splits
	lm := &ws.merge
	lm.reset(mp.splits, p.dimV)
	for r := 0; r < b.height(); r++ {
		h, i := b.at(r)
		for sp := range mp.splits {
			slot := (first+sp)*p.maxRows + r
			lm.a[sp], lm.l[sp] = float64(part.m[slot]), float64(part.l[slot])
			lm.o[sp] = part.o[slot*p.dimVPad:]
		}
		o := ws.outRow(mp.out, s.tb, s.q0+i, h, p.dimV)
		lm.sink, lm.hasSink = 0, p.sinks != nil
		if lm.hasSink {
			lm.sink = float64(p.sinks[h])
		}
		lv := lm.row(o)
		mp.out.commit(o, s.tb, s.q0+i, h, &p.kern)
		if mp.lse != nil {
			mp.lse[s.lse0+h*s.lseH+i] = lv
		}
	}
}
