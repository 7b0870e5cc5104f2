package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// kvsource.go decides, once per call and per sequence, where the forward
// reads each key tile's K and V from (kvRoute), and locates a tile there
// (keyTile). Every other part of the forward follows the route.

// kvFrom is where a sequence's K and V tiles come from in the forward.
type kvFrom uint8

const (
	// fromPacked: packed once per call by the pack pass (packedKV) —
	// float32 strips of Kᵀ and padded V rows, or the native 16-bit
	// products' VNNI layout — because two or more row blocks read each
	// tile.
	fromPacked kvFrom = iota
	// fromCacheInPlace: the decode kernels compute S and P·V from the KV
	// cache where it lies, converting 16-bit and q8_0 elements in
	// registers (few query rows per KV head, a cache in the compute type).
	fromCacheInPlace
	// fromStaged: each key tile of K and V is copied for all the row
	// block's KV heads at once — gathered from a paged cache, converted
	// from another type, or read in address order for several KV heads —
	// then used like fromRows. Reading the tile per head instead walks
	// memory with the stride of a whole key row, which ran at half speed.
	fromStaged
	// fromRows: K rows are read where they lie in k (converted if k is not
	// in the compute type) and V rows copied per tile: one row block reads
	// each tile, so packing would cost more than it saves.
	fromRows
)

// kvRoute is the forward's K/V route of one sequence.
type kvRoute struct {
	from kvFrom
	// sT: (fromStaged, fromRows) so few query rows per KV head that S is
	// computed transposed, Sᵀ = K·Qᵀ, from the K rows (Dot4T, or MulABt
	// against Qᵀ packed per sub-block), instead of packing each K tile
	// for S = Q·Kᵀ.
	sT bool
}

// inPlaceRows is the most query rows per KV head whose K and V the decode
// kernels read from the cache in place (fromCacheInPlace). Their wrapper
// cuts any number of rows into tiles of up to 16 that share each L2-sized
// block of keys, so the cache is still read from memory once per KV head;
// staging instead copies every key tile and transposes its K for rows that
// read it once (measured on Zen 4, 4 sequences × 4 speculative tokens over
// 4096 keys, 32 query heads on 4 KV heads, d 128, paged float32 cache:
// 32 rows per KV head, about 1.5× faster in place than staged). From
// packRowsMin rows a stacked block is packed instead (routeKV tests packs
// first).
const inPlaceRows = packRowsMin

// routeKV sets the route of every sequence (see kvFrom). A sequence that is
// not packed has one row block per KV head: its query rows (of the one
// query head of its KV head), or, stacked, its rows of every query head.
func (p *plan) routeKV() {
	inPlaceTypes := p.fromCache && (p.ct == Float32 || p.k.dt == p.ct && p.v.dt == p.ct)
	for i := range p.seqs {
		s := &p.seqs[i]
		m, several := s.nq, false // rows per KV head; several KV heads per block
		if p.stacked(s) {
			m, several = p.group*s.nq, p.kvHeads > 1
		}
		few := m <= kernel.W
		switch {
		case p.packs(s):
			s.route = kvRoute{from: fromPacked}
		case inPlaceTypes && m <= inPlaceRows:
			s.route = kvRoute{from: fromCacheInPlace}
		case p.fromCache && (p.pages.blockSize > 0 || p.k.dt != Float32 || p.v.dt != Float32 || several && few && p.dot4T()):
			s.route = kvRoute{from: fromStaged, sT: few}
		default:
			s.route = kvRoute{from: fromRows, sT: few}
		}
	}
}

// dot4T reports whether few-row S tiles are computed by Dot4T from K read
// in place (KV caches only; its rows need a head dim that is a multiple of
// 8), rather than as MulABt against Qᵀ packed per sub-block.
func (p *plan) dot4T() bool { return p.fromCache && p.dim%8 == 0 }

// kvTile is where the keys and values of one tile are for one sub-block:
// packed Kᵀ strips (kt), or K rows read in place or staged (k, ldk); V rows
// padded to dimVPad (v, ldv), or nil if they are to be copied on demand.
type kvTile struct {
	seq *sequence
	// inPlace: the decode kernels read the tile from the KV cache where it
	// lies (fromCacheInPlace); sT: S is computed transposed (kvRoute.sT).
	inPlace, sT bool
	kt          []float32
	k           []float32
	ldk         int
	v           []float32
	ldv         int
	// Native 16-bit products: Kᵀ and V packed in the VNNI layout.
	kh, vh []uint16
	ldbV   int
}

// keyTile locates keys j0..j0+n-1 of sub-block sb (the si-th of its row
// block) of sequence seq, for a staged block of step keys per KV head.
func (f *forwardPass) keyTile(ws *workspace, seq, si int, sb subBlock, j0, n, step int) kvTile {
	p := f.p
	s := &p.seqs[seq]
	t := kvTile{seq: s, sT: s.route.sT}
	switch s.route.from {
	case fromCacheInPlace:
		t.inPlace = true
	case fromPacked:
		if p.native {
			t.kh, t.vh, t.ldbV = f.kv.tileNative(seq, sb.hk, j0)
		} else {
			t.kt, t.v, t.ldv = f.kv.tile(seq, sb.hk, j0, n)
		}
	case fromStaged:
		t.k, t.ldk = ws.fwd.kStage[si*step*p.dim:], p.dim
		t.v, t.ldv = ws.fwd.vStage[si*step*p.dimVPad:], p.dimVPad
	default: // fromRows
		t.k, t.ldk = p.kRows(&ws.conv.in1, s, j0, sb.hk, n)
	}
	return t
}

// kRows and vRows return keys j..j+n-1 of sequence s for KV head hk as a
// float32 matrix and its leading dimension (see keyRows).
func (p *plan) kRows(scratch *[]float32, s *sequence, j, hk, n int) ([]float32, int) {
	return p.keyRows(p.k, scratch, s, j, hk, n)
}

func (p *plan) vRows(scratch *[]float32, s *sequence, j, hk, n int) ([]float32, int) {
	return p.keyRows(p.v, scratch, s, j, hk, n)
}

// keyRows returns keys j..j+n-1 of sequence s in v (the call's k or v) for
// KV head hk as a float32 matrix and its leading dimension: as
// view.matrix returns them when they lie in one page (or the cache is not
// paged), else gathered row by row from their pages into *scratch (a
// LeftPad off the 16-key grid puts a page boundary inside a group of
// kernel.W keys), converted the same way.
func (p *plan) keyRows(v view, scratch *[]float32, s *sequence, j, hk, n int) ([]float32, int) {
	tb, r := p.keyAt(s, j)
	if p.inPage(r, n) {
		return v.matrix(scratch, tb, r, hk, n, p.ct, &p.kern)
	}
	d := v.shape[3]
	buf := grow(scratch, n*d)
	for i := 0; i < n; i++ {
		tb, r := p.keyAt(s, j+i)
		v.rowTo(buf[i*d:(i+1)*d], tb, r, hk, p.ct, &p.kern)
	}
	return buf, d
}
