package flashattn

// decode.go holds what the forward pass does differently when a sequence has
// few query rows (decoding): all its query heads are stacked into one row
// block, cut into sub-blocks by KV head, and reading a KV cache stages each
// key tile of K and V for every KV head at once.

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
		len(subs) > 1 && f.fewRows(subs) && p.dim%8 == 0
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
		for si, sb := range subs {
			tb, row := p.kv.at(s, j0+j)
			p.kv.k.rowTo(kb[(si*step+j)*d:(si*step+j+1)*d], tb, row, sb.hk, p.ct, &p.kern)
			vr := vb[(si*step+j)*dp : (si*step+j+1)*dp]
			p.kv.v.rowTo(vr[:d], tb, row, sb.hk, p.ct, &p.kern)
			clear(vr[d:])
		}
	}
}
