package flashattn

import (
	"math"

	"github.com/flashattn/flashattn/internal/kernel"
)

// mergePass combines the key splits of each row block (flash-decoding) by
// their log-sum-exp: O = Σ_s e^{m_s−M} o_s / Σ_s e^{m_s−M} l_s, in a fixed
// order, so the result does not depend on the worker count.
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
	return parallel(c.plan.workers, len(blocks), mp)
}

func (mp *mergePass) runTask(ws *workspace, t int) {
	p, part, b := mp.p, mp.part, &mp.blocks[t]
	s := &p.seqs[b.seq]
	first := b.slot - b.slot%mp.splits
	for r := 0; r < b.height(); r++ {
		h, i := b.at(r)
		o := ws.outRow(mp.out, s.tb, s.q0+i, h, p.dim)
		mx := negInf
		for sp := 0; sp < mp.splits; sp++ {
			mx = max(mx, part.m[(first+sp)*p.maxRows+r])
		}
		clear(o)
		lv := negInf
		if mx != negInf {
			var l float32
			for sp := 0; sp < mp.splits; sp++ {
				slot := first + sp
				ms := part.m[slot*p.maxRows+r]
				if ms == negInf {
					continue
				}
				w := kernel.Exp(ms - mx)
				l += w * part.l[slot*p.maxRows+r]
				po := part.o[(slot*p.maxRows+r)*p.dimPad:]
				for c := range o {
					o[c] += w * po[c]
				}
			}
			inv := 1 / l
			for c := range o {
				o[c] *= inv
			}
			lv = mx + float32(math.Log(float64(l)))
		}
		mp.out.commit(o, s.tb, s.q0+i, h, &p.kern)
		if mp.lse != nil {
			mp.lse[s.lse0+h*s.lseH+i] = lv
		}
	}
}
