package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// decode.go holds what the forward pass does differently when a sequence has
// few query rows (decoding): its row block is cut into sub-blocks by KV head,
// and, by the sequence's route (kvsource.go), the decode kernels compute S
// and P·V from a KV cache where it lies (converting 16-bit, q8_0 and q4_0 caches in
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
// keys j0..j0+n-1 read in place.
func (p *plan) decodeScores(ws *workspace, s *sequence, sb subBlock, j0, n, np int) {
	dec, d, qRows, k := &p.dec, p.dim, ws.fwd.q[sb.r0*p.dim:], p.k
	p.cacheRuns(k, s, sb.hk, j0, n, func(j, m, o int) {
		out := ws.fwd.s[sb.s0*np+j-j0:]
		switch k.dt {
		case Float32:
			dec.ScoresF32(out, np, qRows, sb.m, k.data[o:], k.ss, m, d)
		case BFloat16:
			dec.ScoresBF16(out, np, qRows, sb.m, k.h[o:], k.ss, m, d)
		case Float16:
			dec.ScoresF16(out, np, qRows, sb.m, k.h[o:], k.ss, m, d)
		case Q8_0:
			dec.ScoresQ8(out, np, qRows, sb.m, k.q[kernel.Q8RowBytes(o):], kernel.Q8RowBytes(k.ss), m, d)
		case Q4_0:
			dec.ScoresQ4(out, np, qRows, sb.m, k.q[kernel.Q4RowBytes(o):], kernel.Q4RowBytes(k.ss), m, d)
		}
	})
}

// decodeAccum adds P·V (rows sb.s0.. of the P tile, stride np) to the
// sub-block's output rows, for keys j0..j0+n-1 read in place.
func (p *plan) decodeAccum(ws *workspace, s *sequence, sb subBlock, j0, n, np int) {
	dec, d, dpad, v := &p.dec, p.dimV, p.dimVPad, p.v
	o := ws.fwd.acc[sb.r0*dpad:]
	p.cacheRuns(v, s, sb.hk, j0, n, func(j, m, off int) {
		pr := ws.fwd.s[sb.s0*np+j-j0:]
		switch v.dt {
		case Float32:
			dec.AccumF32(o, dpad, pr, np, sb.m, v.data[off:], v.ss, m, d)
		case BFloat16:
			dec.AccumBF16(o, dpad, pr, np, sb.m, v.h[off:], v.ss, m, d)
		case Float16:
			dec.AccumF16(o, dpad, pr, np, sb.m, v.h[off:], v.ss, m, d)
		case Q8_0:
			dec.AccumQ8(o, dpad, pr, np, sb.m, v.q[kernel.Q8RowBytes(off):], kernel.Q8RowBytes(v.ss), m, d)
		case Q4_0:
			dec.AccumQ4(o, dpad, pr, np, sb.m, v.q[kernel.Q4RowBytes(off):], kernel.Q4RowBytes(v.ss), m, d)
		}
	})
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
	dec, d, qRows, k, nh := &p.dec, p.dim, ws.fwd.q, p.k, len(subs)
	p.cacheRuns(k, s, subs[0].hk, j0, n, func(j, m, o int) {
		out := ws.fwd.s[j-j0:]
		switch k.dt {
		case Float32:
			dec.ScoresF32Heads(out, np, qRows, nh, k.data[o:], k.ss, k.hs, m, d)
		case BFloat16:
			dec.ScoresBF16Heads(out, np, qRows, nh, k.h[o:], k.ss, k.hs, m, d)
		case Float16:
			dec.ScoresF16Heads(out, np, qRows, nh, k.h[o:], k.ss, k.hs, m, d)
		case Q8_0:
			dec.ScoresQ8Heads(out, np, qRows, nh, k.q[kernel.Q8RowBytes(o):], kernel.Q8RowBytes(k.ss), kernel.Q8RowBytes(k.hs), m, d)
		case Q4_0:
			dec.ScoresQ4Heads(out, np, qRows, nh, k.q[kernel.Q4RowBytes(o):], kernel.Q4RowBytes(k.ss), kernel.Q4RowBytes(k.hs), m, d)
		}
	})
}

// decodeAccumHeads is decodeAccum for all the sub-blocks of oneRowPerHead
// at once.
func (p *plan) decodeAccumHeads(ws *workspace, s *sequence, subs []subBlock, j0, n, np int) {
	dec, d, dpad, v, nh := &p.dec, p.dimV, p.dimVPad, p.v, len(subs)
	o := ws.fwd.acc
	p.cacheRuns(v, s, subs[0].hk, j0, n, func(j, m, off int) {
		pr := ws.fwd.s[j-j0:]
		switch v.dt {
		case Float32:
			dec.AccumF32Heads(o, dpad, pr, np, nh, v.data[off:], v.ss, v.hs, m, d)
		case BFloat16:
			dec.AccumBF16Heads(o, dpad, pr, np, nh, v.h[off:], v.ss, v.hs, m, d)
		case Float16:
			dec.AccumF16Heads(o, dpad, pr, np, nh, v.h[off:], v.ss, v.hs, m, d)
		case Q8_0:
			dec.AccumQ8Heads(o, dpad, pr, np, nh, v.q[kernel.Q8RowBytes(off):], kernel.Q8RowBytes(v.ss), kernel.Q8RowBytes(v.hs), m, d)
		case Q4_0:
			dec.AccumQ4Heads(o, dpad, pr, np, nh, v.q[kernel.Q4RowBytes(off):], kernel.Q4RowBytes(v.ss), kernel.Q4RowBytes(v.hs), m, d)
		}
	})
}
