package flashattn

// mergePass combines the key splits of each row block (flash-decoding) by
// their log-sum-exp (lseMerge, with a_s the split's running max and l_s its
// running sum), so the result does not depend on the worker count.
type mergePass struct {
	p      *plan
	out    view
	lse    []float32
	part   *partials
	blocks []fwdTask // the first split of each split row block
	mem    []fwdTask // blocks' memory, kept from call to call
}

func (c *call) mergeSplits() error {
	f, mp := &c.fwd, &c.merge
	blocks := mp.mem[:0]
	for _, t := range f.tasks {
		if t.slot >= 0 && t.split == 0 {
			blocks = append(blocks, t)
		}
	}
	*mp = mergePass{p: &c.plan, out: f.out, lse: f.lse, part: &f.part, blocks: blocks, mem: blocks}
	return c.plan.parallel(len(blocks), mp)
}

func (mp *mergePass) runTask(ws *workspace, t int) {
	p, part, b := mp.p, mp.part, &mp.blocks[t]
	s := &p.seqs[b.seq]
	first, m := b.slot, b.height() // the block's splits' rows: first + split·m + r
	lm := &ws.merge
	lm.reset(b.parts, p.dimV)
	dvp, stride := p.dimVPad, m*p.dimVPad // a row's splits lie stride apart
	row := grow(&ws.conv.out, dvp)
	for r := 0; r < m; r++ {
		h, i := b.at(r)
		for sp := range b.parts {
			slot := first + sp*m + r
			lm.a[sp], lm.l[sp] = float64(part.m[slot]), float64(part.l[slot])
		}
		lm.sink, lm.hasSink = 0, p.sinks != nil
		if lm.hasSink {
			lm.sink = float64(p.sinks[h])
		}
		lv := lm.rowStrided(&p.kern, row, part.o[(first+r)*dvp:], stride, dvp)
		p.dimVRow(mp.out, row, s.tb, s.q0+i, h)
		if mp.lse != nil {
			mp.lse[s.lse0+h*s.lseH+i] = lv
		}
	}
}

// dimVRow stores the first dimV elements of row as row (b, s, h) of out.
func (p *plan) dimVRow(out view, row []float32, b, s, h int) {
	if out.dt == Float32 {
		copy(out.row(b, s, h)[:p.dimV], row)
		return
	}
	out.storeRow(row[:p.dimV], b, s, h, &p.kern)
}
