package flashattn

// mergeSplits combines the key splits of t's row block (flash-decoding),
// t being any of them, by their log-sum-exp (lseMerge, with a_s the
// split's running max and l_s its running sum) into its rows of O and
// LSE. The splits' order is fixed, so the result does not depend on the
// worker count nor on which split finished last (runTask).
func (f *forwardPass) mergeSplits(ws *workspace, t *fwdTask) {
	p, part := f.p, &f.part
	s := &p.seqs[t.seq]
	m := t.height()
	first := t.slot - t.split*m // the block's splits' rows: first + split·m + r
	lm := &ws.merge
	lm.reset(t.parts, p.dimV)
	dvp, stride := p.dimVPad, m*p.dimVPad // a row's splits lie stride apart
	row := grow(&ws.conv.out, dvp)
	for r := 0; r < m; r++ {
		h, i := t.at(r)
		for sp := range t.parts {
			slot := first + sp*m + r
			lm.a[sp], lm.l[sp] = float64(part.m[slot]), float64(part.l[slot])
		}
		lm.sink, lm.hasSink = 0, p.sinks != nil
		if lm.hasSink {
			lm.sink = float64(p.sinks[h])
		}
		lv := lm.rowStrided(&p.kern, row, part.o[(first+r)*dvp:], stride, dvp)
		p.dimVRow(f.out, row, s.tb, s.q0+i, h)
		if f.lse != nil {
			f.lse[s.lse0+h*s.lseH+i] = lv
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
