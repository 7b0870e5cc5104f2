package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// packedKV holds K and V of the (sequence, KV head) pairs whose tiles are
// read more than once, packed once per call in the layouts of the tile
// products. Without it every query block would repack every K/V tile,
// which costs as much as a quarter of the forward pass. Extra memory: two
// (forward) or three (backward) times the size of K, O(N), pooled for the
// next call.
//
// The forward packs Kᵀ in strips of kernel.W keys (for S = Q·Kᵀ) and V as
// rows padded to dimPad (for O += P·V); the backward Kᵀ and Vᵀ in strips
// (for S and dP = dO·Vᵀ) and K as padded rows (for dQ += dS·K). With native
// 16-bit products (plan.native) each is packed instead in the VNNI pair
// layout of the type: transposed operands in strips of 16 keys (strip
// stride 16·even(dim)), the others as k = keys (strip stride 16·even(nk)).
type packedKV struct {
	p        *plan
	backward bool
	buf      []float32
	h        []uint16 // native
	// Offsets into buf (or h) per seq*kvHeads+hk, -1 when not packed:
	// kt, vt the transposed operands (Kᵀ, Vᵀ), kr, vr the row operands
	// (K, V); a forward packs kt and vr, a backward kt, vt and kr.
	kt, vt, kr, vr []int
	ldb            []int // native row operands: strip stride per pair
}

// packPass packs K and V in parallel, packChunk keys of one sequence (all
// KV heads) per task.
type packPass struct {
	p      *plan
	kv     *packedKV
	chunks []int // task t packs sequence chunks[2t] from key chunks[2t+1]
}

// packChunk is the number of keys one packing task handles.
const packChunk = 256

// packKV packs what the pass needs: for the forward every (sequence, KV
// head) read by two or more row blocks (decoding, one stacked row block per
// KV head, packs tile by tile instead, since each tile is then read once);
// for the backward every one.
func (c *call) packKV(backward bool) error {
	p, a := &c.plan, &c.arena
	nu := len(p.seqs) * p.kvHeads
	kv := &c.kv
	*kv = packedKV{p: p, backward: backward,
		kt: grow(&a.kvOffKt, nu), vt: grow(&a.kvOffVt, nu), kr: grow(&a.kvOffK, nu), vr: grow(&a.kvOffV, nu), ldb: grow(&a.kvLdb, nu)}
	total := 0
	chunks := a.packChunks[:0]
	de := p.dim
	if p.native {
		de = even(p.dim)
	}
	for si := range p.seqs {
		s := &p.seqs[si]
		readers := p.group * ((s.nq + p.blockQ - 1) / p.blockQ)
		if p.stacked(s) && !backward {
			readers = 1
		}
		for hk := 0; hk < p.kvHeads; hk++ {
			u := si*p.kvHeads + hk
			kv.kt[u], kv.vt[u], kv.kr[u], kv.vr[u] = -1, -1, -1, -1
			if readers < 2 && !backward || s.nk == 0 || s.nq == 0 {
				continue
			}
			trans := kernel.Pad(s.nk) * de // a transposed operand
			rows := s.nk * p.dimPad        // a row operand
			if p.native {
				kv.ldb[u] = kernel.W * even(s.nk)
				rows = p.dimPad / kernel.W * kv.ldb[u]
			}
			kv.kt[u], total = total, total+trans
			if backward {
				kv.vt[u], total = total, total+trans
				kv.kr[u], total = total, total+rows
			} else {
				// V is packed even when its rows need no padding: rows
				// a multiple of 2 KiB apart fall into a few L1 sets and
				// evict each other, which slowed O += P·V by half.
				kv.vr[u], total = total, total+rows
			}
		}
		if kv.kt[si*p.kvHeads] >= 0 {
			for j0 := 0; j0 < s.nk; j0 += packChunk {
				chunks = append(chunks, si, j0)
			}
		}
	}
	a.packChunks = chunks
	if total == 0 {
		return nil
	}
	if p.native {
		kv.h = grow(&a.kvBuf16, total)
	} else {
		kv.buf = grow(&a.kvBuf, total)
	}
	c.pack = packPass{p: p, kv: kv, chunks: chunks}
	return parallel(p.workers, len(chunks)/2, &c.pack)
}

// run packs keys j0..j0+packChunk-1 of one sequence for every KV head. It
// walks the keys in address order, 16 at a time with the heads inside, so K
// and V are read as contiguous memory; packing one head at a time read them
// with a stride of a whole key row, latency-bound. 16 keys lie within one
// page of a paged cache (pages are multiples of 16 keys).
func (pp *packPass) run(ws *workspace, t int) {
	p := pp.p
	si, j0 := pp.chunks[2*t], pp.chunks[2*t+1]
	s := &p.seqs[si]
	for j := j0; j < min(j0+packChunk, s.nk); j += kernel.W {
		n := min(kernel.W, s.nk-j)
		for hk := 0; hk < p.kvHeads; hk++ {
			pp.pack(ws, s, si*p.kvHeads+hk, hk, j, n)
		}
	}
}

// pack packs keys j..j+n-1 (j a multiple of kernel.W) of unit u.
func (pp *packPass) pack(ws *workspace, s *sequence, u, hk, j, n int) {
	p, kv := pp.p, pp.kv
	d := p.dim
	if !p.native {
		kr, ldk := p.kRows(&ws.convK, s, j, hk, n)
		vr, ldv := p.vRows(&ws.convV, s, j, hk, n)
		kernel.PackBt(kv.buf[kv.kt[u]+j*d:], kr, ldk, n, d)
		if kv.backward {
			kernel.PackBt(kv.buf[kv.vt[u]+j*d:], vr, ldv, n, d)
			kernel.PackRows(kv.buf[kv.kr[u]+j*p.dimPad:], kr, ldk, n, d)
		} else {
			kernel.PackRows(kv.buf[kv.vr[u]+j*p.dimPad:], vr, ldv, n, d)
		}
		return
	}
	ldbT := kernel.W * even(d)
	tb, r := p.kv.at(s, j)
	packT := func(v view, scratch *[]float32, off int) { // strips of 16 keys
		packVNNIRows(p, v, scratch, tb, r, hk, kv.h[off+j/kernel.W*ldbT:], ldbT, 0, d, n, true)
	}
	packR := func(v view, scratch *[]float32, off int) { // k = keys, pair rows from j
		packVNNIRows(p, v, scratch, tb, r, hk, kv.h[off:], kv.ldb[u], j, n, d, false)
	}
	packT(p.kv.k, &ws.convK, kv.kt[u])
	if kv.backward {
		packT(p.kv.v, &ws.convV, kv.vt[u])
		packR(p.kv.k, &ws.convK, kv.kr[u])
	} else {
		packR(p.kv.v, &ws.convV, kv.vr[u])
	}
}

// packVNNIRows packs rows (tb, r.., h) of v — n of them when transposed (rows
// of Bᵀ, k = dim), else k of them (rows of B, n = dim) — into dst from pair
// row p0/2 in the VNNI layout of the compute type: 16-bit rows of that type
// as they are, others converted and rounded.
func packVNNIRows(p *plan, v view, scratch *[]float32, tb, r, h int, dst []uint16, ldb, p0, k, n int, transposed bool) {
	rows := k
	if transposed {
		rows = n
	}
	if v.dt == p.ct {
		src, ld := v.rows16(tb, r, h)
		p.kern.PackVNNI16Into(dst, ldb, p0, src, ld, k, n, transposed)
		return
	}
	src, ld := v.rows(scratch, tb, r, h, rows, p.ct, &p.kern)
	p.kern.PackVNNIInto(dst, ldb, p0, src, ld, k, n, transposed, p.ct.elem())
}

// even rounds n up to an even number (the pairs of the VNNI layout).
func even(n int) int { return n + n%2 }

// tile returns, for the forward, the packed Kᵀ strips of keys j0..j0+n-1
// (j0 a multiple of kernel.W) of (sequence si, KV head hk), and their packed
// V rows with its leading dimension; nil where that pair was not packed.
func (kv *packedKV) tile(si, hk, j0, n int) (kt, vp []float32, ldv int) {
	u := si*kv.p.kvHeads + hk
	if kv.kt[u] < 0 || kv.p.native {
		return nil, nil, 0
	}
	d, dp := kv.p.dim, kv.p.dimPad
	kt = kv.buf[kv.kt[u]+j0*d : kv.kt[u]+(j0+kernel.Pad(n))*d]
	vp = kv.buf[kv.vr[u]+j0*dp : kv.vr[u]+(j0+n)*dp]
	return kt, vp, dp
}

// tileNative returns, for the forward with native products, the packed Kᵀ
// strips of keys j0.. (j0 a multiple of kernel.W) of (sequence si, KV head
// hk) and the packed V from key j0 with its strip stride; nil where the
// pair was not packed.
func (kv *packedKV) tileNative(si, hk, j0 int) (kt, v []uint16, ldbV int) {
	u := si*kv.p.kvHeads + hk
	if kv.kt[u] < 0 {
		return nil, nil, 0
	}
	ldbK := kernel.W * even(kv.p.dim)
	return kv.h[kv.kt[u]+j0/kernel.W*ldbK:], kv.h[kv.vr[u]+kernel.W*j0:], kv.ldb[u]
}

// bwdTile is a KV block of the backward's packed K and V: Kᵀ and Vᵀ (the B
// of S = Q·Kᵀ and dP = dO·Vᵀ) and K (the B of dQ += dS·K), as float32 or,
// with native products, in the VNNI layout (K with strip stride ldbK).
type bwdTile struct {
	kt, vt, kp    []float32
	ktH, vtH, kpH []uint16
	ldbK          int
}

// backwardTile returns keys j0..j0+n-1 (j0 a multiple of kernel.W) of
// (sequence si, KV head hk).
func (kv *packedKV) backwardTile(si, hk, j0, n int) bwdTile {
	p := kv.p
	u := si*p.kvHeads + hk
	if p.native {
		ldbT := kernel.W * even(p.dim)
		return bwdTile{
			ktH:  kv.h[kv.kt[u]+j0/kernel.W*ldbT:],
			vtH:  kv.h[kv.vt[u]+j0/kernel.W*ldbT:],
			kpH:  kv.h[kv.kr[u]+kernel.W*j0:],
			ldbK: kv.ldb[u],
		}
	}
	d, dp, np := p.dim, p.dimPad, kernel.Pad(n)
	return bwdTile{
		kt: kv.buf[kv.kt[u]+j0*d : kv.kt[u]+(j0+np)*d],
		vt: kv.buf[kv.vt[u]+j0*d : kv.vt[u]+(j0+np)*d],
		kp: kv.buf[kv.kr[u]+j0*dp : kv.kr[u]+(j0+n)*dp],
	}
}
