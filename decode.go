package flashattn

// decode.go holds what the forward pass does differently when a sequence has
// few query rows (decoding): its row block is cut into sub-blocks by KV head,
// and, by the sequence's route (kvsource.go), the decode kernels of the
// cache's format (formats.go, kernel.Decode's tables) compute S and P·V from
// a KV cache where it lies (converting 16-bit, q8_0, q4_0 and fp8 caches in
// registers), or each key tile of K and V is staged for every KV head at
// once.

// subBlock is the part of a row block that reads one KV head: rows
// r0..r0+m-1 of the block's Q, softmax state and output accumulators, the
// query heads of KV head hk, whose scores are rows s0..s0+m-1 of the S tile
// (s0 = r0, except for a super-block's microtiles, whose S rows start at 0).
type subBlock struct{ hk, r0, m, s0 int }

// decodeStep is the key tile of a staged block over nkv KV heads: K and V of
// the tile for all of them take about half of L2.
func (p *plan) decodeStep(nkv int) int {
	n := p.cacheBytes / 2 / (4 * nkv * (p.dimPad + p.dimVPad))
	return min(max(n/16*16, 16), p.blockK)
}

// stageKV copies keys j0..j0+n-1 of K and V for the KV heads of subs, in
// address order, into ws.fwd.kStage (rows of dim, per head blocks of step
// rows) and ws.fwd.vStage (rows padded to dimVPad).
func (p *plan) stageKV(ws *workspace, s *sequence, subs []subBlock, j0, n, step int) {
	d, dv, dvpad := p.dim, p.dimV, p.dimVPad
	kb := grow(&ws.fwd.kStage, len(subs)*step*d)
	vb := grow(&ws.fwd.vStage, len(subs)*step*dvpad)
	for j := 0; j < n; j++ {
		tb, row := p.keyAt(s, j0+j)
		for si, sb := range subs {
			p.k.rowTo(kb[(si*step+j)*d:(si*step+j+1)*d], tb, row, sb.hk, p.ct, &p.kern)
			vr := vb[(si*step+j)*dvpad : (si*step+j+1)*dvpad]
			p.v.rowTo(vr[:dv], tb, row, sb.hk, p.ct, &p.kern)
			clear(vr[dv:])
		}
	}
}

// cacheRuns calls f for keys j0..j0+n-1 of sequence s in runs that lie in
// one page of a paged cache (the whole range otherwise), with the run's
// first key, its length and the offset in v (the cache's k or v) of its
// first row for KV head hk.
func (p *plan) cacheRuns(v view, s *sequence, hk, j0, n int, f func(j, m, off int)) {
	for j := j0; j < j0+n; {
		m := j0 + n - j
		if bs := p.pages.blockSize; bs > 0 {
			m = min(m, bs-(s.k0+j)%bs)
		}
		tb, r := p.keyAt(s, j)
		f(j, m, v.off(tb, r, hk))
		j += m
	}
}

// decodeScores sets rows sb.s0.. of the S tile (stride np) to Q·Kᵀ for
// keys j0..j0+n-1 read in place, by the decode kernel of the cache's
// format; an fp8 cache's scale multiplies the scores (k_scale folded into
// S).
func (p *plan) decodeScores(ws *workspace, s *sequence, sb subBlock, j0, n, np int) {
	d, qRows, k := p.dim, ws.fwd.q[sb.r0*p.dim:], p.k
	f := &formats[k.dt]
	scores, ldk := p.dec.Scores[f.kf], f.bytes(k.ss)
	p.cacheRuns(k, s, sb.hk, j0, n, func(j, m, o int) {
		out := ws.fwd.s[sb.s0*np+j-j0:]
		scores(out, np, qRows, sb.m, k.raw[f.bytes(o):], ldk, m, d)
		p.scaleRows(out, np, sb.m, m, k.scale)
	})
}

// decodeAccum adds P·V (rows sb.s0.. of the P tile, stride np) to the
// sub-block's output rows, for keys j0..j0+n-1 read in place; an fp8
// cache's scale multiplies P first (v_scale folded into P, which is not
// read again).
func (p *plan) decodeAccum(ws *workspace, s *sequence, sb subBlock, j0, n, np int) {
	d, dpad, v := p.dimV, p.dimVPad, p.v
	f := &formats[v.dt]
	accum, ldv := p.dec.Accum[f.kf], f.bytes(v.ss)
	o := ws.fwd.acc[sb.r0*dpad:]
	p.cacheRuns(v, s, sb.hk, j0, n, func(j, m, off int) {
		pr := ws.fwd.s[sb.s0*np+j-j0:]
		p.scaleRows(pr, np, sb.m, m, v.scale)
		accum(o, dpad, pr, np, sb.m, v.raw[f.bytes(off):], ldv, m, d)
	})
}

// scaleRows multiplies the first n values of rows rows of x (stride ld)
// by an fp8 cache's scale c (nothing for 0 or 1).
func (p *plan) scaleRows(x []float32, ld, rows, n int, c float32) {
	if c == 0 || c == 1 {
		return
	}
	for r := 0; r < rows; r++ {
		row := x[r*ld : r*ld+n]
		for i := range row {
			row[i] *= c
		}
	}
}

// oneRowPerHead reports whether the sub-blocks are one query row each, of
// consecutive KV heads (multi-head attention decoding, one new token): the
// multi-head decode kernels then read each key's heads side by side.
func oneRowPerHead(subs []subBlock) bool {
	if len(subs) < 2 {
		return false
	}
	for i, sb := range subs {
		if sb.m != 1 || sb.r0 != i || sb.hk != subs[0].hk+i {
			return false
		}
	}
	return true
}

// decodeScoresHeads is decodeScores for all the sub-blocks of
// oneRowPerHead at once: rows 0..len(subs)-1 of the S tile.
func (p *plan) decodeScoresHeads(ws *workspace, s *sequence, subs []subBlock, j0, n, np int) {
	d, qRows, k, nh := p.dim, ws.fwd.q, p.k, len(subs)
	f := &formats[k.dt]
	scores, ldk, hs := p.dec.ScoresHeads[f.kf], f.bytes(k.ss), f.bytes(k.hs)
	p.cacheRuns(k, s, subs[0].hk, j0, n, func(j, m, o int) {
		out := ws.fwd.s[j-j0:]
		scores(out, np, qRows, nh, k.raw[f.bytes(o):], ldk, hs, m, d)
		p.scaleRows(out, np, nh, m, k.scale)
	})
}

// decodeAccumHeads is decodeAccum for all the sub-blocks of oneRowPerHead
// at once.
func (p *plan) decodeAccumHeads(ws *workspace, s *sequence, subs []subBlock, j0, n, np int) {
	d, dpad, v, nh := p.dimV, p.dimVPad, p.v, len(subs)
	f := &formats[v.dt]
	accum, ldv, hs := p.dec.AccumHeads[f.kf], f.bytes(v.ss), f.bytes(v.hs)
	o := ws.fwd.acc
	p.cacheRuns(v, s, subs[0].hk, j0, n, func(j, m, off int) {
		pr := ws.fwd.s[j-j0:]
		p.scaleRows(pr, np, nh, m, v.scale)
		accum(o, dpad, pr, np, nh, v.raw[f.bytes(off):], ldv, hs, m, d)
	})
}
