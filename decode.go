package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// decode.go holds what the forward pass does differently when a sequence has
// few query rows (decoding): all its query heads are stacked into one row
// block, cut into sub-blocks by KV head; reading a KV cache, the decode
// kernels compute S and P·V from K and V where they lie (converting 16-bit
// and q8_0 caches in registers), or each key tile of K and V is staged for
// every KV head at once.

// subBlock is the part of a row block that reads one KV head: rows
// r0..r0+m-1, the query heads of KV head hk.
type subBlock struct{ hk, r0, m int }

// maxStackRows bounds the rows of a stacked (decoding) row block.
const maxStackRows = 64

// stacked reports whether sequence s is processed as one block of all heads.
func (p *plan) stacked(s *sequence) bool {
	return p.heads > 1 && s.nq*p.heads <= maxStackRows
}

// staged reports whether task t copies each key tile of K and V for all its
// KV heads before using it: when reading a KV cache that was not packed,
// paged (the pages are gathered), in a 16-bit type (converted on the way),
// or for several KV heads with few rows. Reading the tile per head instead
// walks memory with the stride of a whole key row, which ran at half speed.
func (f *forwardPass) staged(t *fwdTask, subs []subBlock) bool {
	p := f.p
	if !p.decoding || f.kv.kt[t.seq*p.kvHeads+subs[0].hk] >= 0 {
		return false
	}
	return p.kv.blockSize > 0 || p.kv.k.dt != Float32 || p.kv.v.dt != Float32 ||
		len(subs) > 1 && f.fewRows(subs) && p.dot4T()
}

// decodeStep is the key tile of a staged block over nkv KV heads: K and V of
// the tile for all of them take about half of L2.
func (p *plan) decodeStep(nkv int) int {
	_, l2 := cacheSizes()
	n := l2 / 2 / (4 * 2 * nkv * p.dimPad)
	return min(max(n/16*16, 16), p.blockK)
}

// stageKV copies keys j0..j0+n-1 of K and V for the KV heads of subs, in
// address order, into ws.kdec (rows of dim, per head blocks of step rows) and
// ws.vdec (rows padded to dimPad).
func (p *plan) stageKV(ws *workspace, s *sequence, subs []subBlock, j0, n, step int) {
	d, dp := p.dim, p.dimPad
	kb := grow(&ws.kdec, len(subs)*step*d)
	vb := grow(&ws.vdec, len(subs)*step*dp)
	for j := 0; j < n; j++ {
		tb, row := p.kv.at(s, j0+j)
		for si, sb := range subs {
			p.kv.k.rowTo(kb[(si*step+j)*d:(si*step+j+1)*d], tb, row, sb.hk, p.ct, &p.kern)
			vr := vb[(si*step+j)*dp : (si*step+j+1)*dp]
			p.kv.v.rowTo(vr[:d], tb, row, sb.hk, p.ct, &p.kern)
			clear(vr[d:])
		}
	}
}

// inPlace reports whether the sub-blocks of a decoding task read K and V
// where they lie, through the decode kernels (which convert 16-bit and
// q8_0 caches in registers), instead of staging each tile.
func (f *forwardPass) inPlace(t *fwdTask, subs []subBlock) bool {
	p := f.p
	return p.inPlaceDecode && f.kv.kt[t.seq*p.kvHeads+subs[0].hk] < 0 && subs[0].m <= decodeRows
}

// decodeRows is the most query rows per KV head the decode kernels take in
// one call.
const decodeRows = 16

// cacheRuns calls f for keys j0..j0+n-1 of sequence s in runs that lie in
// one page of a paged cache (the whole range otherwise), with the run's
// first key, its length and the offset in v (the cache's k or v) of its
// first row for KV head hk.
func (p *plan) cacheRuns(v view, s *sequence, hk, j0, n int, f func(j, m, off int)) {
	for j := j0; j < j0+n; {
		m := j0 + n - j
		if bs := p.kv.blockSize; bs > 0 {
			m = min(m, bs-(s.k0+j)%bs)
		}
		tb, r := p.kv.at(s, j)
		f(j, m, v.off(tb, r, hk))
		j += m
	}
}

// decodeScores sets rows sb.r0.. of the S tile (stride np) to Q·Kᵀ for
// keys j0..j0+n-1 read in place.
func (p *plan) decodeScores(ws *workspace, s *sequence, sb subBlock, j0, n, np int) {
	dec, d, qp, k := &p.dec, p.dim, ws.qp[sb.r0*p.dim:], p.kv.k
	p.cacheRuns(k, s, sb.hk, j0, n, func(j, m, o int) {
		out := ws.s[sb.r0*np+j-j0:]
		switch k.dt {
		case Float32:
			dec.ScoresF32(out, np, qp, sb.m, k.data[o:], k.ss, m, d)
		case BFloat16:
			dec.ScoresBF16(out, np, qp, sb.m, k.h[o:], k.ss, m, d)
		case Float16:
			dec.ScoresF16(out, np, qp, sb.m, k.h[o:], k.ss, m, d)
		case Q8_0:
			dec.ScoresQ8(out, np, qp, sb.m, k.q8[kernel.Q8RowBytes(o):], kernel.Q8RowBytes(k.ss), m, d)
		}
	})
}

// decodeAccum adds P·V (rows sb.r0.. of the P tile, stride np) to the
// sub-block's output rows, for keys j0..j0+n-1 read in place.
func (p *plan) decodeAccum(ws *workspace, s *sequence, sb subBlock, j0, n, np int) {
	dec, d, dp, v := &p.dec, p.dim, p.dimPad, p.kv.v
	o := ws.o[sb.r0*dp:]
	p.cacheRuns(v, s, sb.hk, j0, n, func(j, m, off int) {
		pr := ws.s[sb.r0*np+j-j0:]
		switch v.dt {
		case Float32:
			dec.AccumF32(o, dp, pr, np, sb.m, v.data[off:], v.ss, m, d)
		case BFloat16:
			dec.AccumBF16(o, dp, pr, np, sb.m, v.h[off:], v.ss, m, d)
		case Float16:
			dec.AccumF16(o, dp, pr, np, sb.m, v.h[off:], v.ss, m, d)
		case Q8_0:
			dec.AccumQ8(o, dp, pr, np, sb.m, v.q8[kernel.Q8RowBytes(off):], kernel.Q8RowBytes(v.ss), m, d)
		}
	})
}
