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
