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

// rowsPerKVHead returns the query rows per KV head of sub-blocks that the
// multi-head decode kernels take at once, 0 if they cannot: two or more
// sub-blocks of m rows each, of consecutive KV heads, whose rows (of Q,
// the softmax state, O and S) follow one another — decoding one token with
// multi-head attention (m = 1) or grouped-query attention (m query heads
// per KV head). The kernels then read each key's heads side by side, in
// address order, rather than one head's keys a whole key row apart.
func rowsPerKVHead(subs []subBlock) int {
	if len(subs) < 2 {
		return 0
	}
	m := subs[0].m
	for i, sb := range subs {
		if sb.m != m || sb.r0 != i*m || sb.s0 != sb.r0 || sb.hk != subs[0].hk+i {
			return 0
		}
	}
	return m
}

// decodeScoresHeads is decodeScores for all the sub-blocks of
// rowsPerKVHead (m rows each) at once: rows 0..len(subs)·m-1 of the S
// tile, by the multi-head kernels of one row per KV head (m = 1) or of
// grouped-query attention.
func (p *plan) decodeScoresHeads(ws *workspace, s *sequence, subs []subBlock, j0, n, np int) {
	d, qRows, k, nh, m := p.dim, ws.fwd.q, p.k, len(subs), subs[0].m
	f := &formats[k.dt]
	ldk, hs := f.bytes(k.ss), f.bytes(k.hs)
	p.cacheRuns(k, s, subs[0].hk, j0, n, func(j, mk, o int) {
		out := ws.fwd.s[j-j0:]
		if m == 1 {
			p.dec.ScoresHeads[f.kf](out, np, qRows, nh, k.raw[f.bytes(o):], ldk, hs, mk, d)
		} else {
			p.dec.ScoresGroup[f.kf](out, np, qRows, m, nh, k.raw[f.bytes(o):], ldk, hs, mk, d)
		}
		p.scaleRows(out, np, nh*m, mk, k.scale)
	})
}

// decodeAccumHeads is decodeAccum for all the sub-blocks of rowsPerKVHead
// at once.
func (p *plan) decodeAccumHeads(ws *workspace, s *sequence, subs []subBlock, j0, n, np int) {
	d, dpad, v, nh, m := p.dimV, p.dimVPad, p.v, len(subs), subs[0].m
	f := &formats[v.dt]
	ldv, hs := f.bytes(v.ss), f.bytes(v.hs)
	o := ws.fwd.acc
	p.cacheRuns(v, s, subs[0].hk, j0, n, func(j, mk, off int) {
		pr := ws.fwd.s[j-j0:]
		p.scaleRows(pr, np, nh*m, mk, v.scale)
		if m == 1 {
			p.dec.AccumHeads[f.kf](o, dpad, pr, np, nh, v.raw[f.bytes(off):], ldv, hs, mk, d)
		} else {
			p.dec.AccumGroup[f.kf](o, dpad, pr, np, m, nh, v.raw[f.bytes(off):], ldv, hs, mk, d)
		}
	})
}

// headsTile reports whether the block of sequence s with sub-blocks subs
// runs its tiles by the multi-head decode kernels (tileHeads): K and V
// read in place, and one row per KV head, or the rows per KV head of the
// grouped-query kernels of both caches' formats.
func (p *plan) headsTile(s *sequence, subs []subBlock) bool {
	if s.route.from != fromCacheInPlace {
		return false
	}
	switch m := rowsPerKVHead(subs); m {
	case 0:
		return false
	case 1:
		return true
	default:
		kf, vf, nh := formats[p.k.dt].kf, formats[p.v.dt].kf, len(subs)
		return p.dec.ScoresGroup[kf] != nil && p.dec.AccumGroup[vf] != nil && (p.dec.GroupFast(true, kf, m, nh) || p.dec.GroupFast(false, vf, m, nh))
	}
}
