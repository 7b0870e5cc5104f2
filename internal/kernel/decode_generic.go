package kernel

import (
	"encoding/binary"
	"sync"
)

// GenericDecode is the pure-Go implementation of the decode kernels: it
// widens one cache row at a time into a float32 buffer (the format's
// generic conversion, formatTable) and multiplies it into every query
// row. It runs everywhere and is the reference of the assembly kernels'
// self-check.
var GenericDecode = genericDecode()

func genericDecode() Decode {
	d := Decode{Name: "generic", ReadSum: readSumGeneric}
	for f := range NumFormats {
		d.Scores[f] = scoresGeneric(f)
		d.Accum[f] = accumGeneric(f)
		d.ScoresHeads[f] = headsScores(f, d.Scores[f])
		d.AccumHeads[f] = headsAccum(f, d.Accum[f])
	}
	return d
}

// headsScores is a multi-head Scores (see Decode.ScoresHeads) that
// calls one, the one-head kernel of format f, head by head; the assembly
// wrappers use it too when the layout does not suit their multi-head
// kernels (or there are none).
func headsScores(f Format, one ScoresFunc) ScoresHeadsFunc {
	g := groupScores(f, one)
	return func(s []float32, lds int, q []float32, heads int, k []byte, ldk, hs, n, d int) {
		g(s, lds, q, 1, heads, k, ldk, hs, n, d)
	}
}

// headsAccum is the multi-head Accum of the same kind.
func headsAccum(f Format, one AccumFunc) AccumHeadsFunc {
	g := groupAccum(f, one)
	return func(o []float32, ldo int, p []float32, ldp, heads int, v []byte, ldv, hs, n, d int) {
		g(o, ldo, p, ldp, 1, heads, v, ldv, hs, n, d)
	}
}

// groupScores is a grouped-query Scores (see Decode.ScoresGroup) that
// calls one head by head, like headsScores, with m rows per head (its
// panics name ScoresHeads for m = 1).
func groupScores(f Format, one ScoresFunc) ScoresGroupFunc {
	return tiledGroupScores(f, one, 0)
}

// tiledGroupScores is groupScores taking the keys by tiles of tile keys
// (0: all of them), every head of a tile before the next tile: with the
// heads of a key side by side, head by head over a tile of some tens of
// keys (groupTileKeys) reads the tile's rows from one window of memory
// while each head's Q rows stay in L1, where one pass per head over all
// the keys reads a fraction of every DRAM page at a time. tile is a
// multiple of 16, the most keys of a block of the one-head kernels, so
// that they group the same keys as in one call: the same bits.
func tiledGroupScores(f Format, one ScoresFunc, tile int) ScoresGroupFunc {
	names := [2]string{"ScoresHeads " + f.String(), "ScoresGroup " + f.String()}
	return func(s []float32, lds int, q []float32, m, heads int, k []byte, ldk, hs, n, d int) {
		name := names[1]
		if m == 1 {
			name = names[0]
		}
		f.checkDim(name, d)
		f.checkLd(name, ldk, hs)
		checkHeads(name, m, heads, n, d, s, n, lds, q, d, d, len(k), f.RowBytes(d), ldk, hs)
		if n == 0 || m == 0 {
			return
		}
		nt := n
		if tile > 0 {
			nt = tile
		}
		for j0 := 0; j0 < n; j0 += nt {
			jn := min(nt, n-j0)
			for h := 0; h < heads; h++ {
				one(s[h*m*lds+j0:], lds, q[h*m*d:], m, k[j0*ldk+h*hs:], ldk, jn, d)
			}
		}
	}
}

// groupTileKeys is the number of keys of a tile of the grouped-query
// scores that go head by head (tiledGroupScores): a multiple of 16, the
// most keys of a block of the one-head kernels, so that the tiles give
// the bits of one call. With 8 rows per KV head (no group kernel: the
// group form of 8 rows loads every Q operand from memory and lost to the
// one-head kernel, see _asm/decode.go) tiles of 64 keys read 8 KV heads of
// d = 128 side by side at 0.66-0.80 of ReadSum's bandwidth in float32 and
// 0.42-0.58 in fp16, against 0.65-0.77 and 0.34-0.46 in one pass per head
// (BenchmarkDecode group-scores m=8, 2 goroutines, Zen 4, alternated runs
// under load; 32 and 256 keys did no better).
const groupTileKeys = 64

// groupAccum is the grouped-query Accum of the same kind.
func groupAccum(f Format, one AccumFunc) AccumGroupFunc {
	names := [2]string{"AccumHeads " + f.String(), "AccumGroup " + f.String()}
	return func(o []float32, ldo int, p []float32, ldp, m, heads int, v []byte, ldv, hs, n, d int) {
		name := names[1]
		if m == 1 {
			name = names[0]
		}
		f.checkDim(name, d)
		f.checkLd(name, ldv, hs)
		checkHeads(name, m, heads, n, d, o, d, ldo, p, n, ldp, len(v), f.RowBytes(d), ldv, hs)
		if n == 0 || d == 0 || m == 0 {
			return
		}
		for h := 0; h < heads; h++ {
			one(o[h*m*ldo:], ldo, p[h*m*ldp:], ldp, m, v[h*hs:], ldv, n, d)
		}
	}
}

// widenQ8 sets dst to the values of the q8_0 row src (len(dst)/32 blocks).
func widenQ8(dst []float32, src []byte) {
	for b := 0; b < len(dst)/Q8Block; b++ {
		blk := src[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		d := blockScale(blk)
		out := dst[b*Q8Block : (b+1)*Q8Block]
		for i := range out {
			out[i] = float32(int8(blk[2+i])) * d
		}
	}
}

// rowBufs holds the row buffers of the generic kernels: a row is widened
// by its format's function from formatTable, an indirect call that a
// stack buffer would escape through, so buffers are reused instead of
// allocated per call.
var rowBufs = sync.Pool{New: func() any { return new([]float32) }}

// rowBuf returns a float32 buffer of d elements from rowBufs (give it
// back with rowBufs.Put).
func rowBuf(d int) *[]float32 {
	b := rowBufs.Get().(*[]float32)
	if cap(*b) < d {
		*b = make([]float32, d)
	}
	*b = (*b)[:d]
	return b
}

func scoresGeneric(f Format) ScoresFunc {
	name, widen := "Scores "+f.String(), formatTable[f].widen
	return func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) {
		f.checkDim(name, d)
		f.checkLd(name, ldk)
		rb := f.RowBytes(d)
		checkScores(name, s, lds, q, m, len(k), ldk, n, d, rb)
		widenRows(widen, k, ldk, n, d, rb, func(j int, kr []float32) {
			for r := 0; r < m; r++ {
				qr := q[r*d : r*d+d]
				var sum float32
				for p, x := range kr {
					sum += qr[p] * x
				}
				s[r*lds+j] = sum
			}
		})
	}
}

func accumGeneric(f Format) AccumFunc {
	name, widen := "Accum "+f.String(), formatTable[f].widen
	return func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int) {
		f.checkDim(name, d)
		f.checkLd(name, ldv)
		rb := f.RowBytes(d)
		checkAccum(name, o, ldo, p, ldp, m, len(v), ldv, n, d, rb)
		widenRows(widen, v, ldv, n, d, rb, func(j int, vr []float32) {
			for r := 0; r < m; r++ {
				pj := p[r*ldp+j]
				or := o[r*ldo : r*ldo+d]
				for c, x := range vr {
					or[c] += pj * x
				}
			}
		})
	}
}

// widenRows widens the n cache rows of c (rb bytes of d values each, ld
// bytes apart) one at a time into a buffer from rowBufs and calls
// use(j, row) with row j: the row loop of the generic Scores and Accum.
func widenRows(widen func(dst []float32, src []byte), c []byte, ld, n, d, rb int, use func(j int, row []float32)) {
	buf := rowBuf(d)
	defer rowBufs.Put(buf)
	row := *buf
	for j := 0; j < n; j++ {
		widen(row, c[j*ld:j*ld+rb])
		use(j, row)
	}
}

func readSumGeneric(b []byte) uint32 {
	var sum uint32
	for i := 0; i+4 <= len(b); i += 4 {
		sum += binary.LittleEndian.Uint32(b[i:])
	}
	return sum
}
