package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// maskParams holds the bounds of the causal/window mask.
type maskParams struct {
	left, right string // .s32, negative = unbounded
	leftInf     string // pred: left < 0
	rightInf    string // pred: right < 0
}

func (g *gen) loadMask() maskParams {
	k := g.k
	var m maskParams
	m.left, m.right = g.ld(".s32", "left"), g.ld(".s32", "right")
	m.leftInf = k.pOp("setp.lt.s32", m.left, "0")
	m.rightInf = k.pOp("setp.lt.s32", m.right, "0")
	return m
}

// rowBounds returns [lo, hi) of the keys visible from query row `row`
// (tile.Mask.Visible), both minus colBase, as .s32 registers.
func (g *gen) rowBounds(m maskParams, s seqInfo, row, colBase string) (lo, hi string) {
	k := g.k
	pos := k.rOp("add.s32", row, s.off)
	lo = k.rOp("sub.s32", pos, m.left)
	lo = k.rOp("max.s32", lo, "0")
	lo = k.rOp("selp.b32", "0", lo, m.leftInf)
	hi = k.rOp("add.s32", pos, m.right)
	hi = k.rOp("add.s32", hi, "1")
	hi = k.rOp("min.s32", hi, s.sk)
	hi = k.rOp("selp.b32", s.sk, hi, m.rightInf)
	lo = k.rOp("sub.s32", lo, colBase)
	hi = k.rOp("sub.s32", hi, colBase)
	return lo, hi
}

// big is the "unbounded" sentinel of key bounds (sequence lengths are < 2^30).
const big = 1 << 30

// keyBounds returns [lo, hi) of the query rows that see key `key` (the
// transpose of rowBounds: key j is visible from i iff
// j-off-right <= i <= j-off+left, and j < sk).
func (g *gen) keyBounds(m maskParams, s seqInfo, key string) (lo, hi string) {
	k := g.k
	base := k.rOp("sub.s32", key, s.off)
	lo = k.rOp("sub.s32", base, m.right)
	lo = k.rOp("selp.b32", imm(-big), lo, m.rightInf)
	hi = k.rOp("add.s32", base, m.left)
	hi = k.rOp("add.s32", hi, "1")
	hi = k.rOp("selp.b32", imm(big), hi, m.leftInf)
	past := k.pOp("setp.ge.s32", key, s.sk)
	k.op("selp.b32 %s, %s, %s, %s", hi, imm(-big), hi, past)
	return lo, hi
}

// hidden returns a predicate: constant offset c lies outside [lo, hi).
func (g *gen) hidden(lo, hi string, c int) string {
	k := g.k
	p := k.pOp("setp.gt.s32", lo, imm(c))
	k.op("setp.le.or.s32 %s, %s, %d, %s", p, hi, c, p)
	return p
}

// maskElem sets x to -Inf unless lo <= c < hi (c a constant column offset).
func (g *gen) maskElem(x, lo, hi string, c int) {
	p := g.hidden(lo, hi, c)
	g.k.op("selp.f32 %s, %s, %s, %s", x, negInf, x, p)
}

// zeroWhere sets the .f32 registers to 0 where predicate p holds.
func (g *gen) zeroWhere(p string, regs ...string) {
	for _, r := range regs {
		g.k.op("selp.f32 %s, %s, %s, %s", r, zeroF, r, p)
	}
}

// keyBlocks returns the key blocks [nlo, nhi) rows [m0, m0+rows) see
// (tile.Mask.KeyBlocks); nhi <= nlo when none.
func (g *gen) keyBlocks(m maskParams, s seqInfo, m0 string, rows, bc int) (nlo, nhi string) {
	k := g.k
	lg := log2(bc)
	jlo := k.rOp("add.s32", m0, s.off)
	jlo = k.rOp("sub.s32", jlo, m.left)
	jlo = k.rOp("max.s32", jlo, "0")
	jlo = k.rOp("selp.b32", "0", jlo, m.leftInf)
	jhi := k.rOp("add.s32", m0, s.off)
	jhi = k.rOp("add.s32", jhi, m.right)
	jhi = k.rOp("add.s32", jhi, imm(rows))
	jhi = k.rOp("min.s32", jhi, s.sk)
	jhi = k.rOp("selp.b32", s.sk, jhi, m.rightInf)
	nlo = k.rOp("shr.u32", jlo, imm(lg))
	nhi = k.rOp("max.s32", jhi, "0")
	nhi = k.rOp("add.s32", nhi, imm(bc-1))
	nhi = k.rOp("shr.u32", nhi, imm(lg))
	empty := k.pOp("setp.le.s32", jhi, jlo)
	k.op("selp.b32 %s, %s, %s, %s", nhi, nlo, nhi, empty)
	return nlo, nhi
}

// queryBlocks returns the query blocks [mlo, mhi) of br rows that see some
// key of [n0, n0+bc) (tile.Mask.QueryBlocks); mhi <= mlo when none.
func (g *gen) queryBlocks(m maskParams, s seqInfo, n0 string, bc, br int) (mlo, mhi string) {
	k := g.k
	n1 := k.rOp("add.u32", n0, imm(bc))
	n1 = k.rOp("min.u32", n1, s.sk)
	ilo := k.rOp("sub.s32", n0, s.off)
	ilo = k.rOp("sub.s32", ilo, m.right)
	ilo = k.rOp("max.s32", ilo, "0")
	ilo = k.rOp("selp.b32", "0", ilo, m.rightInf)
	ihi := k.rOp("sub.s32", n1, s.off)
	ihi = k.rOp("add.s32", ihi, m.left)
	ihi = k.rOp("min.s32", ihi, s.sq)
	ihi = k.rOp("selp.b32", s.sq, ihi, m.leftInf)
	mlo = k.rOp("shr.u32", ilo, imm(log2(br)))
	mhi = k.rOp("max.s32", ihi, "0")
	mhi = k.rOp("add.s32", mhi, imm(br-1))
	mhi = k.rOp("shr.u32", mhi, imm(log2(br)))
	empty := k.pOp("setp.le.s32", ihi, ilo)
	k.op("selp.b32 %s, %s, %s, %s", mhi, mlo, mhi, empty)
	return mlo, mhi
}

// A tile of rows [m0, m0+rows) × keys [n0, n0+cols) may hold a hidden
// pair (tile.Mask.NeedsMask) iff
//
//	n0+cols-1 >= sk  ||  (right >= 0 && n0+cols-1 > m0+off+right)
//	                 ||  (left >= 0 && n0 < m0+rows-1+off-left).
//
// With one of m0, n0 fixed for the whole block, this is x > above || x <
// below for the other, x, and two thresholds computed once: the loops test
// it with two compares (skipUnlessMasked).

// keyTileThresholds returns the thresholds for key tiles (x = n0) of the
// rows [m0, m0+rows):
//
//	above = min(sk-cols, right < 0 ? big : m0+off+right-cols+1)
//	below = left < 0 ? -big : m0+rows-1+off-left
func (g *gen) keyTileThresholds(m maskParams, s seqInfo, m0 string, rows, cols int) (above, below string) {
	k := g.k
	mo := k.rOp("add.s32", m0, s.off)
	above = k.rOp("add.s32", mo, m.right)
	above = k.rOp("add.s32", above, imm(1-cols))
	above = k.rOp("selp.b32", imm(big), above, m.rightInf)
	above = k.rOp("min.s32", above, k.rOp("sub.s32", s.sk, imm(cols)))
	below = k.rOp("sub.s32", mo, m.left)
	below = k.rOp("add.s32", below, imm(rows-1))
	below = k.rOp("selp.b32", imm(-big), below, m.leftInf)
	return above, below
}

// queryTileThresholds returns the thresholds for query tiles (x = m0) of
// the keys [n0, n0+cols):
//
//	above = left < 0 ? big : n0-rows+1-off+left
//	below = n0+cols-1 >= sk ? big : right < 0 ? -big : n0+cols-1-off-right
func (g *gen) queryTileThresholds(m maskParams, s seqInfo, n0 string, rows, cols int) (above, below string) {
	k := g.k
	no := k.rOp("sub.s32", n0, s.off)
	above = k.rOp("add.s32", no, m.left)
	above = k.rOp("add.s32", above, imm(1-rows))
	above = k.rOp("selp.b32", imm(big), above, m.leftInf)
	e := k.rOp("add.s32", n0, imm(cols-1))
	below = k.rOp("sub.s32", no, m.right)
	below = k.rOp("add.s32", below, imm(cols-1))
	below = k.rOp("selp.b32", imm(-big), below, m.rightInf)
	past := k.pOp("setp.ge.s32", e, s.sk)
	k.op("selp.b32 %s, %s, %s, %s", below, imm(big), below, past)
	return above, below
}

// skipUnlessMasked emits the test of the tile at x, x > above || x < below
// (it may hold a hidden pair), and a jump past the masking code unless it
// holds; it returns the label the caller places after that code.
func (g *gen) skipUnlessMasked(x, above, below string) (nomask string) {
	k := g.k
	p := k.pOp("setp.gt.s32", x, above)
	k.op("setp.lt.or.s32 %s, %s, %s, %s", p, x, below, p)
	nomask = k.newLabel("nomask")
	k.op("@!%s bra.uni %s", p, nomask)
	return nomask
}

// scoreParams are the constants of the score transform, in log2 units:
// without softcap y = s·scaleLog2; with softcap > 0
// y = capLog2·tanh(s·capScale) where capScale = scale/softcap and
// capLog2 = softcap·log2(e). mul is the factor that takes what
// scoreTransform leaves (s, or tanh(s·capScale)) to log2 units: the
// softmax folds it into its exp2's FMA.
type scoreParams struct {
	scaleLog2, capScale, capLog2 string
	softcap                      string // pred: softcap > 0
	mul                          string // capLog2 with the softcap, else scaleLog2
}

func (g *gen) loadScore() scoreParams {
	k := g.k
	var s scoreParams
	s.scaleLog2, s.capScale, s.capLog2 = g.ld(".f32", "scale_log2"), g.ld(".f32", "cap_scale"), g.ld(".f32", "cap_log2")
	s.softcap = k.pOp("setp.gt.f32", s.capLog2, zeroF)
	s.mul = k.fOp("selp.f32", s.capLog2, s.scaleLog2, s.softcap)
	return s
}

// tanh returns tanh(a) = 1 - 2/(2^(2·log2(e)·a) + 1): exact to a few ulps of
// 1 in absolute terms, and ±1 for large |a|.
func (g *gen) tanh(a string) string {
	k := g.k
	e := k.fOp("mul.f32", a, fimm(2*tile.Log2E))
	e = k.fOp("ex2.approx.ftz.f32", e)
	e = k.fOp("add.f32", e, fimm(1))
	r := k.fOp("rcp.approx.ftz.f32", e)
	return k.fOp("fma.rn.f32", r, fimm(-2), fimm(1))
}

// scoreTransform applies the softcap in place when it is on (a uniform
// branch): x = tanh(x·cap_scale); without it the raw scores stay, and the
// softmax's FMA multiplies by sc.mul.
func (g *gen) scoreTransform(sc scoreParams, regs [][4]string) {
	k := g.k
	doneL := k.newLabel("scored")
	k.op("@!%s bra.uni %s", sc.softcap, doneL)
	for _, r := range regs {
		for _, v := range r {
			k.op("mov.f32 %s, %s", v, g.tanh(k.fOp("mul.f32", v, sc.capScale)))
		}
	}
	k.label(doneL)
}

// negLse2 converts a natural-log LSE into minus its log2-unit value, the
// addend of P = 2^(y - LSE·log2 e): a row with no visible key (LSE -Inf)
// gets -Inf, so that P = 0.
func (g *gen) negLse2(lse string) string {
	k := g.k
	r := k.fOp("mul.f32", lse, fimm(-tile.Log2E))
	inf := k.pOp("setp.eq.f32", lse, negInf)
	k.op("selp.f32 %s, %s, %s, %s", r, negInf, r, inf)
	return r
}

// probGrad turns raw scores s and dP into P (in s) and dS (in dp) in place:
//
//	y  = s·scale_log2            or  t = tanh(s·cap_scale), y = cap_log2·t
//	P  = 2^(y - lse2)
//	dS = P·(dP - dsum)·scale     (·(1 - t²) with the softcap)
//
// nlse(j, i) and dsum(j, i) return -lse2 and dsum for element i of
// accumulator j. The softcap choice is a uniform branch.
func (g *gen) probGrad(sc scoreParams, scale string, s, dp [][4]string, nlse, dsum func(j, i int) string) {
	k := g.k
	capL := k.newLabel("softcap")
	doneL := k.newLabel("pgdone")
	k.op("@%s bra.uni %s", sc.softcap, capL)
	for j := range s {
		for i := range 4 {
			v, d := s[j][i], dp[j][i]
			k.op("fma.rn.f32 %s, %s, %s, %s", v, v, sc.scaleLog2, nlse(j, i))
			k.op("ex2.approx.ftz.f32 %s, %s", v, v)
			k.op("sub.f32 %s, %s, %s", d, d, dsum(j, i))
			k.op("mul.f32 %s, %s, %s", d, d, v)
			k.op("mul.f32 %s, %s, %s", d, d, scale)
		}
	}
	k.op("bra.uni %s", doneL)
	k.label(capL)
	for j := range s {
		for i := range 4 {
			v, d := s[j][i], dp[j][i]
			t := g.tanh(k.fOp("mul.f32", v, sc.capScale))
			f := k.fOp("fma.rn.f32", t, k.fOp("neg.f32", t), fimm(1)) // 1 - t²
			k.op("fma.rn.f32 %s, %s, %s, %s", v, t, sc.capLog2, nlse(j, i))
			k.op("ex2.approx.ftz.f32 %s, %s", v, v)
			k.op("sub.f32 %s, %s, %s", d, d, dsum(j, i))
			k.op("mul.f32 %s, %s, %s", d, d, v)
			k.op("mul.f32 %s, %s, %s", d, d, scale)
			k.op("mul.f32 %s, %s, %s", d, d, f)
		}
	}
	k.label(doneL)
}
