package flashattn

// dqPass computes dQ over query blocks, when the KV pass did not (see
// backward.go): for each query block, the KV blocks of the KV pass's grid
// that it sees, in ascending order, recomputing S, P, dP and dS (gradTile)
// and adding dS·K. The additions are those of the one-pass form, in the
// same order, so dQ is bit for bit the same.
type dqPass struct {
	b     *backwardPass
	tasks []rowBlock
}

// dqTasks lists query blocks: blockQ rows of one head of one sequence.
func (c *call) dqTasks() []rowBlock {
	p, a := &c.plan, &c.arena
	tasks := a.blocks[:0]
	for si := range p.seqs {
		if p.seqs[si].nk > 0 {
			tasks = p.appendQueryBlocks(tasks, si)
		}
	}
	a.blocks = tasks
	return tasks
}

func (d *dqPass) run(ws *workspace, t int) {
	b, rb := d.b, d.tasks[t]
	p := b.p
	s := &p.seqs[rb.seq]
	ws.forBackward(p)
	h, hk := rb.h0, rb.h0/p.group
	dp, m := p.dimPad, rb.i1-rb.i0
	rows := b.headRows(rb.seq, h)
	qt := b.queryTile(&rows, rb.i0, rb.i1)
	acc := grow(&ws.dq, m*dp)
	clear(acc)
	for j0 := 0; j0 < s.nk; j0 += p.bwdBlockK {
		n := min(p.bwdBlockK, s.nk-j0)
		kind := s.vis.tile(rb, j0, j0+n)
		if kind == BlockEmpty {
			continue
		}
		kt := b.kv.backwardTile(rb.seq, hk, j0, n)
		b.gradTile(ws, &kt, &qt, s, h, rb.i0, rb.i1, j0, n, kind, &rows)
		b.dqProduct(ws, &kt, m, n, acc)
	}
	for r := 0; r < m; r++ {
		b.storeDQ(ws, s, h, rb.i0+r, acc[r*dp:r*dp+p.dim])
	}
}
