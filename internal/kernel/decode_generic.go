package kernel

import "encoding/binary"

// GenericDecode is the pure-Go implementation of the decode kernels: it
// widens one cache row at a time into a float32 buffer and multiplies it
// into every query row. It runs everywhere and is the reference of the
// assembly kernels' self-check.
var GenericDecode = Decode{
	Name:       "generic",
	ScoresF32:  scoresGeneric("ScoresF32", widenF32, formatElem),
	ScoresBF16: scoresGeneric("ScoresBF16", bf16ToF32Generic, formatElem),
	ScoresF16:  scoresGeneric("ScoresF16", f16ToF32Generic, formatElem),
	ScoresQ8:   scoresGeneric("ScoresQ8", widenQ8, formatQ8),
	ScoresQ4:   scoresGeneric("ScoresQ4", widenQ4, formatQ4),
	AccumF32:   accumGeneric("AccumF32", widenF32, formatElem),
	AccumBF16:  accumGeneric("AccumBF16", bf16ToF32Generic, formatElem),
	AccumF16:   accumGeneric("AccumF16", f16ToF32Generic, formatElem),
	AccumQ8:    accumGeneric("AccumQ8", widenQ8, formatQ8),
	AccumQ4:    accumGeneric("AccumQ4", widenQ4, formatQ4),
	ReadSum:    readSumGeneric,
}

func init() {
	g := &GenericDecode
	g.ScoresF32Heads = headsScores("ScoresF32Heads", formatElem, g.ScoresF32)
	g.ScoresBF16Heads = headsScores("ScoresBF16Heads", formatElem, g.ScoresBF16)
	g.ScoresF16Heads = headsScores("ScoresF16Heads", formatElem, g.ScoresF16)
	g.ScoresQ8Heads = headsScores("ScoresQ8Heads", formatQ8, g.ScoresQ8)
	g.ScoresQ4Heads = headsScores("ScoresQ4Heads", formatQ4, g.ScoresQ4)
	g.AccumF32Heads = headsAccum("AccumF32Heads", formatElem, g.AccumF32)
	g.AccumBF16Heads = headsAccum("AccumBF16Heads", formatElem, g.AccumBF16)
	g.AccumF16Heads = headsAccum("AccumF16Heads", formatElem, g.AccumF16)
	g.AccumQ8Heads = headsAccum("AccumQ8Heads", formatQ8, g.AccumQ8)
	g.AccumQ4Heads = headsAccum("AccumQ4Heads", formatQ4, g.AccumQ4)
}

// headsScores is a multi-head Scores (see Decode.ScoresF32Heads) that
// calls one, the one-head kernel, head by head; the amd64 wrappers use
// it too when the layout does not suit their assembly.
func headsScores[T any](name string, f cacheFormat, one func(s []float32, lds int, q []float32, m int, k []T, ldk, n, d int)) func(s []float32, lds int, q []float32, heads int, k []T, ldk, hs, n, d int) {
	return func(s []float32, lds int, q []float32, heads int, k []T, ldk, hs, n, d int) {
		f.checkDim(name, d)
		checkHeads(name, heads, n, d, s, n, lds, q, d, d, len(k), f.rowLen(d), ldk, hs)
		if n == 0 {
			return
		}
		for h := 0; h < heads; h++ {
			one(s[h*lds:], lds, q[h*d:], 1, k[h*hs:], ldk, n, d)
		}
	}
}

// headsAccum is the multi-head Accum of the same kind.
func headsAccum[T any](name string, f cacheFormat, one func(o []float32, ldo int, p []float32, ldp, m int, v []T, ldv, n, d int)) func(o []float32, ldo int, p []float32, ldp, heads int, v []T, ldv, hs, n, d int) {
	return func(o []float32, ldo int, p []float32, ldp, heads int, v []T, ldv, hs, n, d int) {
		f.checkDim(name, d)
		checkHeads(name, heads, n, d, o, d, ldo, p, n, ldp, len(v), f.rowLen(d), ldv, hs)
		if n == 0 || d == 0 {
			return
		}
		for h := 0; h < heads; h++ {
			one(o[h*ldo:], ldo, p[h*ldp:], ldp, 1, v[h*hs:], ldv, n, d)
		}
	}
}

func widenF32(dst, src []float32) { copy(dst, src) }

// widenQ8 sets dst to the values of the q8_0 row src (len(dst)/32 blocks).
func widenQ8(dst []float32, src []byte) {
	for b := 0; b < len(dst)/Q8Block; b++ {
		blk := src[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		d := q8Scale(blk)
		out := dst[b*Q8Block : (b+1)*Q8Block]
		for i := range out {
			out[i] = float32(int8(blk[2+i])) * d
		}
	}
}

// rowBuf returns a float32 buffer of d elements, in *arr when it fits.
func rowBuf(arr *[256]float32, d int) []float32 {
	if d <= len(arr) {
		return arr[:d]
	}
	return make([]float32, d)
}

func scoresGeneric[T any](name string, widen func(dst []float32, src []T), f cacheFormat) func(s []float32, lds int, q []float32, m int, k []T, ldk, n, d int) {
	rowLen := f.rowLen
	return func(s []float32, lds int, q []float32, m int, k []T, ldk, n, d int) {
		f.checkDim(name, d)
		checkScores(name, s, lds, q, m, len(k), ldk, n, d, rowLen(d))
		var arr [256]float32
		kr := rowBuf(&arr, d)
		for j := 0; j < n; j++ {
			widen(kr, k[j*ldk:j*ldk+rowLen(d)])
			for r := 0; r < m; r++ {
				qr := q[r*d : r*d+d]
				var sum float32
				for p, x := range kr {
					sum += qr[p] * x
				}
				s[r*lds+j] = sum
			}
		}
	}
}

func accumGeneric[T any](name string, widen func(dst []float32, src []T), f cacheFormat) func(o []float32, ldo int, p []float32, ldp, m int, v []T, ldv, n, d int) {
	rowLen := f.rowLen
	return func(o []float32, ldo int, p []float32, ldp, m int, v []T, ldv, n, d int) {
		f.checkDim(name, d)
		checkAccum(name, o, ldo, p, ldp, m, len(v), ldv, n, d, rowLen(d))
		var arr [256]float32
		vr := rowBuf(&arr, d)
		for j := 0; j < n; j++ {
			widen(vr, v[j*ldv:j*ldv+rowLen(d)])
			for r := 0; r < m; r++ {
				pj := p[r*ldp+j]
				or := o[r*ldo : r*ldo+d]
				for c, x := range vr {
					or[c] += pj * x
				}
			}
		}
	}
}

func readSumGeneric(b []byte) uint32 {
	var sum uint32
	for i := 0; i+4 <= len(b); i += 4 {
		sum += binary.LittleEndian.Uint32(b[i:])
	}
	return sum
}
