package flashattn

// dqPass computes dQ over query blocks, when the KV pass did not (see
// backward.go): for each query block, the KV blocks of the KV pass's grid
// that it sees, in ascending order, recomputing S, P, dP and dS (gradTile)
// and adding dS·K. The additions are those of the one-pass form, in the
// same order, so dQ is bit for bit the same.
type dqPass struct {
	b     *backwardPass
	tasks []rowBlock
	mem   []rowBlock // the task list's memory, kept from call to call
}

func (d *dqPass) run(b *backwardPass) error {
	*d = dqPass{b: b, mem: d.mem}
	d.tasks = b.p.dqTasks(&d.mem)
	return b.p.parallel(len(d.tasks), d)
}

func (d *dqPass) runTask(ws *workspace, t int) {
	b, rb := d.b, d.tasks[t]
	p := b.p
	s := &p.seqs[rb.seq]
	ws.sizeBackward(p)
	h, hk := rb.h0, rb.h0/p.group
	dpad, m := p.dimPad, rb.i1-rb.i0
	hr := b.headRows(rb.seq, h)
	qt := b.queryTile(&hr, rb.i0, rb.i1)
	acc := grow(&ws.bwd.dq, m*dpad)
	clear(acc)
	for j0 := 0; j0 < s.nk; j0 += p.bwdBlockK {
		n := min(p.bwdBlockK, s.nk-j0)
		kind := s.vis.tile(rb, j0, j0+n)
		if kind == BlockEmpty {
			continue
		}
		blk := b.kv.backwardTile(rb.seq, hk, j0, n)
		b.gradTile(ws, &blk, &qt, tileAt{s, h, rb.i0, rb.i1, j0, n, kind}, &hr)
		b.dqProduct(ws, &blk, m, n, acc)
	}
	for r := 0; r < m; r++ {
		b.storeDQ(ws, s, h, rb.i0+r, acc[r*dpad:r*dpad+p.dim])
	}
}
