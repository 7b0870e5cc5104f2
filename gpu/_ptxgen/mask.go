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
	jlo := g.windowBound("sub.s32", k.rOp("add.s32", m0, s.off), m.left, 0, "max.s32", "0", m.leftInf)
	jhi := g.windowBound("add.s32", k.rOp("add.s32", m0, s.off), m.right, rows, "min.s32", s.sk, m.rightInf)
	return g.blockRange(jlo, jhi, bc)
}

// queryBlocks returns the query blocks [mlo, mhi) of br rows that see some
// key of [n0, n0+bc) (tile.Mask.QueryBlocks); mhi <= mlo when none.
func (g *gen) queryBlocks(m maskParams, s seqInfo, n0 string, bc, br int) (mlo, mhi string) {
	k := g.k
	n1 := k.rOp("add.u32", n0, imm(bc))
	n1 = k.rOp("min.u32", n1, s.sk)
	ilo := g.windowBound("sub.s32", k.rOp("sub.s32", n0, s.off), m.right, 0, "max.s32", "0", m.rightInf)
	ihi := g.windowBound("add.s32", k.rOp("sub.s32", n1, s.off), m.left, 0, "min.s32", s.sq, m.leftInf)
	return g.blockRange(ilo, ihi, br)
}

// blockRange returns the blocks [blo, bhi) of b elements that cover the
// elements [lo, hi), 0 <= lo: blo = lo/b, bhi = ceil(max(hi, 0)/b), and
// bhi = blo when hi <= lo (none).
func (g *gen) blockRange(lo, hi string, b int) (blo, bhi string) {
	k := g.k
	blo = k.rOp("shr.u32", lo, imm(log2(b)))
	bhi = k.rOp("max.s32", hi, "0")
	bhi = k.rOp("add.s32", bhi, imm(b-1))
	bhi = k.rOp("shr.u32", bhi, imm(log2(b)))
	empty := k.pOp("setp.le.s32", hi, lo)
	k.op("selp.b32 %s, %s, %s, %s", bhi, blo, bhi, empty)
	return blo, bhi
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
	above = g.windowBound("add.s32", mo, m.right, 1-cols, "", imm(big), m.rightInf)
	above = k.rOp("min.s32", above, k.rOp("sub.s32", s.sk, imm(cols)))
	below = g.windowBound("sub.s32", mo, m.left, rows-1, "", imm(-big), m.leftInf)
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
	above = g.windowBound("add.s32", no, m.left, 1-rows, "", imm(big), m.leftInf)
	e := k.rOp("add.s32", n0, imm(cols-1))
	below = g.windowBound("sub.s32", no, m.right, cols-1, "", imm(-big), m.rightInf)
	past := k.pOp("setp.ge.s32", e, s.sk)
	k.op("selp.b32 %s, %s, %s, %s", below, imm(big), below, past)
	return above, below
}

// windowBound returns the bound x op w + c (op add.s32 or sub.s32, w a
// side of the window; no add when c is 0), clamped by clamp (max.s32,
// min.s32; "" for none) against limit, and limit itself where that side
// of the window is unbounded (inf).
func (g *gen) windowBound(op, x, w string, c int, clamp, limit, inf string) string {
	k := g.k
	v := k.rOp(op, x, w)
	if c != 0 {
		v = k.rOp("add.s32", v, imm(c))
	}
	if clamp != "" {
		v = k.rOp(clamp, v, limit)
	}
	return k.rOp("selp.b32", limit, v, inf)
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
