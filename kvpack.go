package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// packedKV holds K and V of the (sequence, KV head) pairs whose tiles are
// read by several query blocks, packed once per call in the kernels' layout:
// Kᵀ in strips of kernel.W keys (for S = Q·Kᵀ) and V as rows padded to
// dimPad (for O += P·V). Without it every query block would repack every K/V
// tile, which costs as much as a quarter of the forward pass. Extra memory:
// about twice the size of K, O(N), pooled for the next call.
//
// With native 16-bit products (plan.native) K and V are packed instead in
// the VNNI pair layout of the type: Kᵀ as the B of S = Q·Kᵀ (strips of 16
// keys, strip stride 16·dimEven) and V as the B of O += P·V (strips of 16
// dims over all the keys, strip stride 16·keysEven).
type packedKV struct {
	p      *plan
	buf    []float32
	kt, vp []int // offsets into buf (or h) per seq*kvHeads+hk; -1 when not packed
	h      []uint16
	ldbV   []int // native: V's strip stride per seq*kvHeads+hk
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

// packKV packs every (sequence, KV head) read by two or more row blocks.
// Decoding (one stacked row block per KV head) packs tile by tile instead,
// since each tile is then read once.
func (c *call) packKV() error {
	p, a := &c.plan, &c.arena
	nu := len(p.seqs) * p.kvHeads
	kv := &c.kv
	*kv = packedKV{p: p, kt: grow(&a.kvOffK, nu), vp: grow(&a.kvOffV, nu), ldbV: grow(&a.kvLdbV, nu)}
	total := 0
	chunks := a.packChunks[:0]
	for si := range p.seqs {
		s := &p.seqs[si]
		blocks := p.group * ((s.nq + p.blockQ - 1) / p.blockQ)
		if p.stacked(s) {
			blocks = 1
		}
		for hk := 0; hk < p.kvHeads; hk++ {
			u := si*p.kvHeads + hk
			kv.kt[u], kv.vp[u] = -1, -1
			if blocks < 2 || s.nk == 0 {
				continue
			}
			kv.kt[u] = total
			if p.native {
				kv.ldbV[u] = kernel.W * even(s.nk)
				total += kernel.Pad(s.nk) * even(p.dim)
				kv.vp[u] = total
				total += p.dimPad / kernel.W * kv.ldbV[u]
				continue
			}
			total += kernel.Pad(s.nk) * p.dim
			// V is packed even when its rows need no padding: rows a
			// multiple of 2 KiB apart fall into a few L1 sets and evict
			// each other, which slowed O += P·V by half.
			kv.vp[u] = total
			total += s.nk * p.dimPad
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
// with a stride of a whole key row, latency-bound.
func (pp *packPass) run(ws *workspace, t int) {
	p, kv := pp.p, pp.kv
	si, j0 := pp.chunks[2*t], pp.chunks[2*t+1]
	s := &p.seqs[si]
	for j := j0; j < min(j0+packChunk, s.nk); j += kernel.W {
		n := min(kernel.W, s.nk-j)
		for hk := 0; hk < p.kvHeads; hk++ {
			u := si*p.kvHeads + hk
			// 16 keys: within one page of a paged cache (pages are
			// multiples of 16 keys).
			if p.native {
				pp.packNative(ws, s, u, hk, j, n)
				continue
			}
			kr, ldk := p.kRows(&ws.convK, s, j, hk, n)
			kernel.PackBt(kv.buf[kv.kt[u]+j*p.dim:], kr, ldk, n, p.dim)
			vr, ldv := p.vRows(&ws.convV, s, j, hk, n)
			kernel.PackRows(kv.buf[kv.vp[u]+j*p.dimPad:], vr, ldv, n, p.dim)
		}
	}
}

// tile returns the packed Kᵀ strips of keys j0..j0+n-1 (j0 a multiple of
// kernel.W) of (sequence si, KV head hk), and their packed V rows with its
// leading dimension; nil where that pair was not packed.
func (kv *packedKV) tile(si, hk, j0, n int) (kt, vp []float32, ldv int) {
	u := si*kv.p.kvHeads + hk
	if kv.kt[u] < 0 || kv.p.native {
		return nil, nil, 0
	}
	d, dp := kv.p.dim, kv.p.dimPad
	kt = kv.buf[kv.kt[u]+j0*d : kv.kt[u]+(j0+kernel.Pad(n))*d]
	vp = kv.buf[kv.vp[u]+j0*dp : kv.vp[u]+(j0+n)*dp]
	return kt, vp, dp
}

// even rounds n up to an even number (the pairs of the VNNI layout).
func even(n int) int { return n + n%2 }

// packNative packs keys j..j+n-1 (j a multiple of kernel.W) of unit u into
// the VNNI buffers: 16-bit rows of the compute type as they are, others
// rounded to it.
func (pp *packPass) packNative(ws *workspace, s *sequence, u, hk, j, n int) {
	p, kv := pp.p, pp.kv
	e := p.ct.elem()
	d, ldbK := p.dim, kernel.W*even(p.dim)
	kDst := kv.h[kv.kt[u]+j/kernel.W*ldbK:]
	vDst := kv.h[kv.vp[u]:]
	tb, r := p.kv.at(s, j)
	if p.kv.k.dt == p.ct {
		kr, ld := p.kv.k.rows16(tb, r, hk)
		p.kern.PackVNNI16Into(kDst, ldbK, 0, kr, ld, d, n, true)
	} else {
		kr, ld := p.kRows(&ws.convK, s, j, hk, n)
		p.kern.PackVNNIInto(kDst, ldbK, 0, kr, ld, d, n, true, e)
	}
	if p.kv.v.dt == p.ct {
		vr, ld := p.kv.v.rows16(tb, r, hk)
		p.kern.PackVNNI16Into(vDst, kv.ldbV[u], j, vr, ld, n, d, false)
	} else {
		vr, ld := p.vRows(&ws.convV, s, j, hk, n)
		p.kern.PackVNNIInto(vDst, kv.ldbV[u], j, vr, ld, n, d, false, e)
	}
}

// tileNative returns, for native products, the packed Kᵀ strips of keys
// j0.. (j0 a multiple of kernel.W) of (sequence si, KV head hk) and the
// packed V from key j0 with its strip stride; nil where the pair was not
// packed.
func (kv *packedKV) tileNative(si, hk, j0 int) (kt, v []uint16, ldbV int) {
	u := si*kv.p.kvHeads + hk
	if kv.kt[u] < 0 {
		return nil, nil, 0
	}
	ldbK := kernel.W * even(kv.p.dim)
	return kv.h[kv.kt[u]+j0/kernel.W*ldbK:], kv.h[kv.vp[u]+kernel.W*j0:], kv.ldbV[u]
}
