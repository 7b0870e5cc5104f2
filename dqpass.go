package flashattn

// dqPass computes dQ over query blocks, when the KV pass did not (see
// backward.go): for each query block, the KV blocks of the KV pass's grid
// that it sees, in ascending order, and for each KV block the block's
// microtiles of blockQ rows in turn (more than one in a super-block, see
// tiling.dqTasks), recomputing S, P, dP and dS (gradTile) and adding dS·K.
// The additions are those of the one-pass form, in the same order, so dQ is
// bit for bit the same.
type dqPass struct {
	b     *backwardPass
	tasks []rowBlock
	mem   []rowBlock // the task list's memory, kept from call to call
}

func (d *dqPass) run(b *backwardPass) error {
	*d = dqPass{b: b, mem: d.mem}
	d.tasks = b.p.dqTasks(&d.mem, b.p.workers)
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
	acc := grow(&ws.bwd.dq, m*dpad)
	clear(acc)
	for j0 := 0; j0 < s.nk; j0 += p.bwdBlockK {
		n := min(p.bwdBlockK, s.nk-j0)
		if s.vis.tile(rb, j0, j0+n) == BlockEmpty {
			continue
		}
		blk := b.kv.backwardTile(rb.seq, hk, j0, n)
		for i0 := rb.i0; i0 < rb.i1; i0 += p.blockQ { // the microtiles, while blk is in the cache
			i1 := min(i0+p.blockQ, rb.i1)
			kind := s.vis.tile(rowBlock{rb.seq, h, 1, i0, i1}, j0, j0+n)
			if kind == BlockEmpty {
				continue
			}
			qt := b.queryTile(&hr, i0, i1)
			b.gradTile(ws, &blk, &qt, tileAt{s, h, i0, i1, j0, n, kind}, &hr)
			b.dqProduct(ws, &blk, i1-i0, n, acc[(i0-rb.i0)*dpad:])
		}
	}
	for r := 0; r < m; r++ {
		b.storeDQ(ws, s, h, rb.i0+r, acc[r*dpad:r*dpad+p.dim])
	}
}
