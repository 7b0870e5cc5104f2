package flashattn

import (
	"math"

	"github.com/flashattn/flashattn/internal/kernel"
)

// softmax.go is FA2's online softmax: each query row keeps a reference
// maximum m and a running sum l of exp(x - m) while key tiles stream past;
// the output accumulator is divided by l once at the end. Only
// LSE = m + log l is kept for the backward pass. The rescale is lazy
// (FlashAttention-4's): m moves, and l and the accumulator with it, only
// when a tile's maximum exceeds m by more than rescaleSlack (update).

// rescaleSlack is τ, how far (in score units, natural log) a row's scores
// may exceed the m its exponentials are taken against before update moves
// m to the row's new maximum, τ = 8·ln 2 (FlashAttention-4's threshold,
// log2(256) in base 2). Between two moves every P = e^{x−m} ≤ e^τ = 256:
//
//   - float32 and bfloat16 (float32's range) hold it, and so does float16
//     (max 65504), with room; P·V is summed in float32 (for float16 V,
//     |P·V| ≤ 256·65504 < 2^24 a key);
//     P is never smaller than the eager softmax's e^{x−max} (m ≤ max), so
//     no more of it falls into float16's subnormals;
//   - l ≤ Sk·e^τ (float32 overflows past Sk ≈ 10^36 keys), and the
//     accumulator |o| ≤ l·max|V|: a factor e^τ less headroom for V than the
//     eager state's Sk·max|V|;
//   - the exponential's argument t = x − m ≤ τ stays far below ExpMax
//     (≈ 88), and AVX-512's relative error |t|·2^-24 on the largest terms
//     within 3.3·10^-7 (Impl.ExpSum).
//
// O = o/l and LSE = m + log l mean what they mean with the running max:
// (m, l, o) is the state o/l with l in units of e^m, whichever m it keeps.
const rescaleSlack = 8 * math.Ln2

// rowState is the online-softmax state of the rows of one query block.
type rowState struct {
	m, l   []float32 // reference max (score units: see rescaleSlack) and sum, per row
	o      []float32 // unnormalised output rows, stride dimPad (V's head dim, padded)
	dimPad int
	fresh  []bool // per row: o not written yet (see claim)
}

// reset starts rows 0..rows-1 afresh: m = −Inf, l = 0, and their output
// rows not written yet (the first product sets them: see claim).
func (st *rowState) reset(rows int) {
	for r := 0; r < rows; r++ {
		st.m[r] = negInf
		st.l[r] = 0
		st.fresh[r] = true
	}
}

// claim marks rows r0..r0+n-1 of o written by the P·V product about to
// run and reports whether it may overwrite them (Impl.MulAB, Half.Mul):
// none was written since reset. o is not cleared at reset; the first product into
// a row stores its sum instead, with the bits adding it to zeros gives.
// Rows still unwritten in a partly written range are cleared, so that
// a product that adds (false) adds to zeros there. update rescales a row
// only after a tile's product wrote it.
func (st *rowState) claim(r0, n int) bool {
	rows := st.fresh[r0 : r0+n]
	all := true
	for _, f := range rows {
		all = all && f
	}
	for i, f := range rows {
		if f && !all {
			clear(st.o[(r0+i)*st.dimPad : (r0+i+1)*st.dimPad])
		}
		rows[i] = false
	}
	return all
}

// claimAdd is claim for a product that can only add to o (the decode
// kernels, Accum and AccumHeads): rows not written yet are cleared first.
func (st *rowState) claimAdd(r0, n int) {
	if st.claim(r0, n) {
		clear(st.o[r0*st.dimPad : (r0+n)*st.dimPad])
	}
}

// settle clears the rows of o that no product wrote (no visible key), so
// that every row of the first rows is defined: a key split's slot is
// merged as it is.
func (st *rowState) settle(rows int) {
	for r := 0; r < rows; r++ {
		if st.fresh[r] {
			st.claimAdd(r, 1)
		}
	}
}

var nan32 = float32(math.NaN())

// update folds one tile row of scores x = f·row into row r's state; on
// return row holds exp(x - m_new), ready for the P·V product, or, if ph is
// not nil, ph[:len(row)] holds it rounded to bfloat16 by the exponential
// itself (Impl.ExpSumBF16: the same sum, row's contents unspecified). A NaN
// score makes the row's state NaN for good (NaN in, NaN out), including
// when every other score of the row is hidden. The rescale is lazy: m_new
// is m_old unless the tile's maximum exceeds it by more than rescaleSlack,
// then the new running max (the row's l and output row scaled by
// e^{m_old−m_new} once); with random scores the max a row's first tile
// sets is seldom passed by that much.
func (st *rowState) update(k *kernel.Impl, r int, row []float32, f float32, ph []uint16) {
	mOld := st.m[r]
	mNew, tileMax := mOld, f*k.Max(row)
	// The excess tileMax − mOld, not mOld + rescaleSlack, which rounds to
	// mOld's grid: at 2^26 ≤ |m| < 2^27 (a grid of 8) to m + 8, letting P
	// reach e^8.
	if !(tileMax-mOld <= rescaleSlack) { // also a NaN on either side, and mOld = −Inf
		mNew = max(mOld, tileMax) // NaN if either is NaN (f > 0)
	}
	if mNew == negInf { // nothing visible to this row yet, or only NaN
		for _, x := range row {
			if x != x {
				mNew = nan32
				break
			}
		}
		if mNew == negInf {
			clear(row)
			if ph != nil {
				clear(ph[:len(row)])
			}
			return
		}
	}
	if mNew != mOld {
		// The row's first visible tile (mOld = −Inf: l = 0 and o not
		// written yet) needs no rescale: e^{−Inf} = 0 times l = 0 is the
		// l it has.
		if mOld != negInf {
			alpha := kernel.Exp(mOld - mNew)
			st.l[r] *= alpha
			k.Scale(st.o[r*st.dimPad:(r+1)*st.dimPad], alpha)
		}
		st.m[r] = mNew
	}
	if ph != nil {
		st.l[r] += k.ExpSumBF16(ph, row, f, mNew)
		return
	}
	st.l[r] += k.ExpSum(row, f, mNew)
}

// finishSink is finish for a row whose softmax also sums exp(sink) (a
// learnable sink logit, a key whose value is zero): with m' = max(m, sink),
//
//	l' = l·e^{m−m'} + e^{sink−m'},  O = o·e^{m−m'}/l',  LSE = m' + log l'
//
// in float64. A row that saw no key gets O = 0 and LSE = sink.
func (st *rowState) finishSink(k *kernel.Impl, r, d int, sink float32, h []uint16) ([]float32, float32) {
	m, l := float64(st.m[r]), float64(st.l[r])
	if l == 0 {
		return st.zeroRow(r, d, h), sink
	}
	mf := max(m, float64(sink)) // NaN wins
	a := math.Exp(m - mf)
	lf := l*a + math.Exp(float64(sink)-mf)
	return st.scaledRow(k, r, d, float32(a/lf), h), float32(mf + math.Log(lf))
}

// finish normalises row r of the accumulator and returns its log-sum-exp
// and its row of O: the accumulator's first d elements, normalised in
// place, or, if h is not nil, nil, the row rounded to bfloat16 into h[:d]
// in the same pass (Impl.ScaleBF16). A row that saw no key gets O = 0,
// LSE = -Inf. The caller stores a float32 row where it belongs (converted,
// for another type, straight from the accumulator: no copy).
func (st *rowState) finish(k *kernel.Impl, r, d int, h []uint16) ([]float32, float32) {
	l := st.l[r]
	if l == 0 {
		return st.zeroRow(r, d, h), negInf
	}
	return st.scaledRow(k, r, d, 1/l, h), st.m[r] + float32(math.Log(float64(l)))
}

// zeroRow is scaledRow for a row of zeros: it clears the first d elements
// of row r of the accumulator and returns them, or clears h[:d] and
// returns nil.
func (st *rowState) zeroRow(r, d int, h []uint16) []float32 {
	if h != nil {
		clear(h[:d])
		return nil
	}
	o := st.o[r*st.dimPad : r*st.dimPad+d]
	clear(o)
	return o
}

// scaledRow multiplies row r of the accumulator by f, o[c] = o[c]·f, with
// the vector kernel (its whole padded width, a multiple of W: the same
// products as an element loop, at a fraction of its cost): in place,
// returning its first d elements, or, if h is not nil, rounded to bfloat16
// into h[:d] (Impl.ScaleBF16: the same bits as the products converted),
// returning nil. The accumulator row is spent afterwards.
func (st *rowState) scaledRow(k *kernel.Impl, r, d int, f float32, h []uint16) []float32 {
	o := st.o[r*st.dimPad : (r+1)*st.dimPad]
	if h != nil {
		k.ScaleBF16(h[:d], o, f)
		return nil
	}
	k.Scale(o, f)
	return o[:d]
}
