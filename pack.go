package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// packedKV holds K and V of the (sequence, KV head) pairs whose tiles are
// read by several query blocks, packed once per call in the kernels' layout:
// Kᵀ in strips of kernel.W keys (for S = Q·Kᵀ) and V as rows padded to dp
// (for O += P·V). Without it every query block would repack every K/V tile,
// which costs as much as a quarter of the forward pass. Extra memory: about
// twice the size of K, O(N), kept with the problem for the next call.
type packedKV struct {
	p      *problem
	buf    []float32
	kt, vp []int // offsets into buf per seq*kvh+hk; -1 when not packed
}

// packKV packs, in parallel, every (sequence, KV head) read by two or more
// row blocks. Decoding (one stacked row block per KV head) packs tile by tile
// instead, since each tile is then read once.
func (p *problem) packKV() {
	nu := len(p.seqs) * p.kvh
	pk := &p.pk
	*pk = packedKV{p: p, kt: growInts(&p.sc.pkKt, nu), vp: growInts(&p.sc.pkVp, nu)}
	total := 0
	units := p.sc.pkUnits[:0]
	for si := range p.seqs {
		s := &p.seqs[si]
		blocks := p.group * ((s.nq + p.bq - 1) / p.bq)
		if p.stacked(s) {
			blocks = 1
		}
		for hk := 0; hk < p.kvh; hk++ {
			u := si*p.kvh + hk
			pk.kt[u], pk.vp[u] = -1, -1
			if blocks < 2 || s.nk == 0 {
				continue
			}
			pk.kt[u] = total
			total += kernel.Pad(s.nk) * p.d
			// V is packed even when its rows need no padding: rows a
			// multiple of 2 KiB apart fall into a few L1 sets and evict
			// each other, which slowed O += P·V by half.
			pk.vp[u] = total
			total += s.nk * p.dp
		}
		if pk.kt[si*p.kvh] >= 0 {
			for j0 := 0; j0 < s.nk; j0 += packChunk {
				units = append(units, si, j0)
			}
		}
	}
	p.sc.pkUnits = units
	if total == 0 {
		return
	}
	pk.buf = grow(&p.sc.packBuf, total)
	p.phase = phasePack
	parallel(p.workers, len(units)/2, p)
}

// packChunk is the number of keys one packing task handles.
const packChunk = 256

// packUnit packs keys j0..j0+packChunk-1 of sequence si for every KV head.
// It walks the keys in address order, 16 at a time with the heads inside,
// so K and V are read as contiguous memory; packing one head at a time
// read them with a stride of a whole key row, latency-bound.
func (p *problem) packUnit(si, j0 int) {
	pk := &p.pk
	s := &p.seqs[si]
	for j := j0; j < min(j0+packChunk, s.nk); j += kernel.W {
		n := min(kernel.W, s.nk-j)
		for hk := 0; hk < p.kvh; hk++ {
			u := si*p.kvh + hk
			// 16 keys: within one page of a paged cache (pages are
			// multiples of 16 keys).
			kernel.PackBt(pk.buf[pk.kt[u]+j*p.d:], p.krow(s, j, hk), p.k.ss, n, p.d)
			kernel.PackRows(pk.buf[pk.vp[u]+j*p.dp:], p.vrow(s, j, hk), p.v.ss, n, p.d)
		}
	}
}

// growInts returns (*buf)[:n], reallocating if needed.
func growInts(buf *[]int, n int) []int {
	if cap(*buf) < n {
		*buf = make([]int, n)
	}
	*buf = (*buf)[:n]
	return *buf
}

// tile returns the packed Kᵀ strips of keys j0..j0+n-1 (j0 a multiple of
// kernel.W) of (sequence si, KV head hk), and their packed V rows with its
// leading dimension; nil where that pair was not packed.
func (pk *packedKV) tile(si, hk, j0, n int) (kt, vp []float32, ldv int) {
	u := si*pk.p.kvh + hk
	if pk.kt[u] < 0 {
		return nil, nil, 0
	}
	d, dp := pk.p.d, pk.p.dp
	kt = pk.buf[pk.kt[u]+j0*d : pk.kt[u]+(j0+kernel.Pad(n))*d]
	vp = pk.buf[pk.vp[u]+j0*dp : pk.vp[u]+(j0+n)*dp]
	return kt, vp, dp
}
