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
	buf      []float32 // float32 layouts
	h        []uint16  // native
	// Offsets into buf (or h) per seq*kvHeads+hk, -1 when not packed:
	// kt, vt the transposed operands (Kᵀ, Vᵀ), kr, vr the row operands
	// (K, V); a forward packs kt and vr, a backward kt, vt and kr.
	kt, vt, kr, vr []int
	ldb            []int // native row operands: strip stride per pair
}

// packPass packs K and V in parallel, packChunk keys of one sequence (all
// KV heads) per task. It owns the packed buffers (kv) for the call.
type packPass struct {
	p      *plan
	kv     packedKV
	chunks []int // task t packs sequence chunks[2t] from key chunks[2t+1]
	mem    packMem
}

// packMem is what the pack pass keeps from call to call.
type packMem struct {
	buf                 []float32
	h                   []uint16
	kt, vt, kr, vr, ldb []int
	chunks              []int
}

// packChunk is the number of keys one packing task handles.
const packChunk = 256

// run packs what a pass needs: for the forward every sequence whose route
// is fromPacked (kvsource.go); for the backward every one.
func (pp *packPass) run(p *plan, backward bool) error {
	m := &pp.mem
	*pp = packPass{p: p, mem: *m}
	m = &pp.mem
	nu := len(p.seqs) * p.kvHeads
	kv := &pp.kv
	*kv = packedKV{p: p, backward: backward,
		kt: grow(&m.kt, nu), vt: grow(&m.vt, nu), kr: grow(&m.kr, nu), vr: grow(&m.vr, nu), ldb: grow(&m.ldb, nu)}
	total := 0
	chunks := m.chunks[:0]
	de, deV := p.dim, p.dimV // depths of the transposed operands Kᵀ, Vᵀ
	if p.native {
		de, deV = even(p.dim), even(p.dimV)
	}
	for si := range p.seqs {
		s := &p.seqs[si]
		packed := s.nk > 0 && s.nq > 0 && (backward || s.route.from == fromPacked)
		for hk := 0; hk < p.kvHeads; hk++ {
			u := si*p.kvHeads + hk
			kv.kt[u], kv.vt[u], kv.kr[u], kv.vr[u] = -1, -1, -1, -1
			if !packed {
				continue
			}
			trans, transV := kernel.Pad(s.nk)*de, kernel.Pad(s.nk)*deV // transposed operands
			rows, rowsV := s.nk*p.dimPad, s.nk*p.dimVPad               // row operands
			if p.native {
				kv.ldb[u] = kernel.W * even(s.nk)
				rows, rowsV = p.dimPad/kernel.W*kv.ldb[u], p.dimVPad/kernel.W*kv.ldb[u]
			}
			kv.kt[u], total = total, total+trans
			if backward {
				kv.vt[u], total = total, total+transV
				kv.kr[u], total = total, total+rows
			} else {
				// V is packed even when its rows need no padding: rows
				// a multiple of 2 KiB apart fall into a few L1 sets and
				// evict each other, which slowed O += P·V by half.
				kv.vr[u], total = total, total+rowsV
			}
		}
		if packed {
			for j0 := 0; j0 < s.nk; j0 += packChunk {
				chunks = append(chunks, si, j0)
			}
		}
	}
	m.chunks = chunks
	if total == 0 {
		return nil
	}
	if p.native {
		kv.h = grow(&m.h, total)
	} else {
		kv.buf = grow(&m.buf, total)
	}
	pp.chunks = chunks
	return p.parallel(len(chunks)/2, pp)
}

// runTask packs keys j0..j0+packChunk-1 of one sequence for every KV head. It
// walks the keys in address order, 16 at a time with the heads inside, so K
// and V are read as contiguous memory; packing one head at a time read them
// with a stride of a whole key row, latency-bound. The 16 keys of a group
// lie in one page of a paged cache (pages are multiples of 16 keys) unless
// the sequence's LeftPad is off that grid; then the pack gathers the
// group from its two pages (plan.keyRows).
func (pp *packPass) runTask(ws *workspace, t int) {
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
	p, kv := pp.p, &pp.kv
	d, dv := p.dim, p.dimV
	if !p.native {
		kr, ldk := p.kRows(&ws.conv.in1, s, j, hk, n)
		vr, ldv := p.vRows(&ws.conv.in2, s, j, hk, n)
		kernel.PackBt(kv.buf[kv.kt[u]+j*d:], kr, ldk, n, d)
		if kv.backward {
			kernel.PackBt(kv.buf[kv.vt[u]+j*dv:], vr, ldv, n, dv)
			kernel.PackRows(kv.buf[kv.kr[u]+j*p.dimPad:], kr, ldk, n, d)
		} else {
			kernel.PackRows(kv.buf[kv.vr[u]+j*p.dimVPad:], vr, ldv, n, dv)
		}
		return
	}
	packT := func(v view, scratch *[]float32, off, d int) { // strips of 16 keys
		ldbT := kernel.W * even(d)
		p.packVNNI(vnniRows{v: v, r: j, h: hk, n: n, transposed: true, seq: s}, scratch, vnniDst{kv.h[off+j/kernel.W*ldbT:], ldbT, 0, d})
	}
	packR := func(v view, scratch *[]float32, off, d int) { // k = keys, pair rows from j
		p.packVNNI(vnniRows{v: v, r: j, h: hk, n: n, seq: s}, scratch, vnniDst{kv.h[off:], kv.ldb[u], j, d})
	}
	packT(p.k, &ws.conv.in1, kv.kt[u], d)
	if kv.backward {
		packT(p.v, &ws.conv.in2, kv.vt[u], dv)
		packR(p.k, &ws.conv.in1, kv.kr[u], d)
	} else {
		packR(p.v, &ws.conv.in2, kv.vr[u], dv)
	}
}

// vnniRows are rows (tb, r.., h) of view v to pack: n rows of the head dim;
// transposed, they are the rows of Bᵀ (k = the head dim), else of B (n =
// the head dim, k = the rows). With seq set they are keys r..r+n-1 of
// that sequence instead, through the page table of a paged cache (tb
// unused).
type vnniRows struct {
	v          view
	tb, r, h   int
	n          int
	transposed bool
	seq        *sequence
}

// vnniDst is where packed rows go: a VNNI matrix with strip stride ldb,
// written from pair row p0/2; cols is its other dimension, the head dim.
type vnniDst struct {
	h       []uint16
	ldb, p0 int
	cols    int
}

// packVNNI packs src into dst in the VNNI layout of the compute type:
// 16-bit rows of that type as they are, others converted and rounded
// (through *scratch). Keys a page boundary cuts (vnniRows.seq) are
// gathered into *scratch as float32 (plan.keyRows) and rounded back to
// the type, which gives the 16-bit values unchanged.
func (p *plan) packVNNI(src vnniRows, scratch *[]float32, dst vnniDst) {
	k, n := src.n, dst.cols // rows of B (k) × its columns (n)
	if src.transposed {
		k, n = dst.cols, src.n
	}
	tb, r, together := src.tb, src.r, true // together: the rows are rows r.. of tb
	if src.seq != nil {
		tb, r = p.keyAt(src.seq, src.r)
		together = p.inPage(r, src.n)
	}
	var rows []float32
	var ld int
	switch {
	case together && src.v.dt == p.ct:
		rows, ld := src.v.rows16(tb, r, src.h)
		p.kern.PackVNNI16Into(dst.h, dst.ldb, dst.p0, rows, ld, k, n, src.transposed)
		return
	case together:
		rows, ld = src.v.matrix(scratch, tb, r, src.h, src.n, p.ct, &p.kern)
	default:
		rows, ld = p.keyRows(src.v, scratch, src.seq, src.r, src.h, src.n)
	}
	p.kern.PackVNNIInto(dst.h, dst.ldb, dst.p0, rows, ld, k, n, src.transposed, p.ct.elem())
}

// tile returns, for the forward, the packed Kᵀ strips of keys j0..j0+n-1
// (j0 a multiple of kernel.W) of (sequence si, KV head hk), and their packed
// V rows with its leading dimension; nil where that pair was not packed.
func (kv *packedKV) tile(si, hk, j0, n int) (kt, vp []float32, ldv int) {
	u := si*kv.p.kvHeads + hk
	if kv.kt[u] < 0 || kv.p.native {
		return nil, nil, 0
	}
	d, dvpad := kv.p.dim, kv.p.dimVPad
	kt = kv.buf[kv.kt[u]+j0*d : kv.kt[u]+(j0+kernel.Pad(n))*d]
	vp = kv.buf[kv.vr[u]+j0*dvpad : kv.vr[u]+(j0+n)*dvpad]
	return kt, vp, dvpad
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
