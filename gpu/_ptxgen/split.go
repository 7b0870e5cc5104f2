package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// splitIndex returns the split-KV block's query block (heaviest first)
// and split, from its x index (tile.SplitGrid): x = q·splits + split with
// q counting query blocks from the last.
func (g *gen) splitIndex() (mb, split string) {
	k := g.k
	x := k.rOp("mov.u32", "%ctaid.x")
	n := g.ld(".u32", "splits")
	q := k.rOp("div.u32", x, n)
	split = k.rOp("sub.u32", x, k.rOp("mul.lo.u32", q, n))
	last := k.rOp("div.u32", k.rOp("mov.u32", "%nctaid.x"), n)
	last = k.rOp("sub.u32", last, "1")
	return k.rOp("sub.u32", last, q), split
}

// splitRange returns the key tiles [lo, hi) that split takes of [nlo, nhi)
// (tile.SplitRange): parts of ceil((nhi-nlo)/splits) tiles; lo >= hi when
// the part is empty.
func (g *gen) splitRange(nlo, nhi, split string) (lo, hi string) {
	k := g.k
	n := g.ld(".u32", "splits")
	cnt := k.rOp("sub.s32", nhi, nlo)
	cnt = k.rOp("max.s32", cnt, "0")
	per := k.rOp("add.u32", cnt, n)
	per = k.rOp("sub.u32", per, "1")
	per = k.rOp("div.u32", per, n)
	lo = k.rOp("mad.lo.u32", split, per, nlo)
	hi = k.rOp("add.u32", lo, per)
	hi = k.rOp("min.s32", hi, nhi)
	return lo, hi
}

// splitEpilogue ends the split-KV forward kernel: per row, O normalised by
// this split's row sum and the split's LSE (finishRow: O = 0 and LSE = -Inf
// for a row that sees no key of the split), written as float32 to the
// split's copy of the partial results (tile.FwdSplitParams), straight from
// the accumulators: a quad writes 32 contiguous bytes of a row per n-tile.
// A packed block's rows go to their own heads and positions (rowElem), the
// layout the combine kernel reads.
func (f *fwdKernel) splitEpilogue() {
	k, c := f.k, f.c
	k.comment("epilogue: this split's float32 O and LSE")
	h, b, qStart, sq := f.reloadBlock()
	h = f.firstHead(h)
	pk := f.loadPacking()
	lseHS := f.ld(".u32", "lse_hs")
	mb, split := f.splitIndex()
	rowG := k.rOp("mul.lo.u32", mb, imm(c.Br()))
	rowG = k.rOp("mad.lo.u32", f.warp, imm(c.MT*16), rowG)
	rowG = k.rOp("add.u32", rowG, f.g)
	// Element index of row 0 of this (split, batch, head): split·split_rows
	// + b·lse_bs + h·lse_hs + qStart.
	li := k.rdOp("mul.wide.u32", split, f.ld(".u32", "split_rows"))
	li = k.rdOp("add.s64", li, k.rdOp("mul.lo.u64", k.rdOp("cvt.u64.u32", b), f.ld(".u64", "lse_bs")))
	li = k.rdOp("add.s64", li, k.rdOp("mul.wide.u32", h, lseHS))
	li = k.rdOp("add.s64", li, k.rdOp("cvt.u64.u32", qStart))
	lseRow := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", f.ld(".u64", "lse_acc")), k.rdOp("shl.b64", li, "2"))
	oRow := k.rdOp("shl.b64", li, imm(log2(c.D*4)))
	oRow = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", f.ld(".u64", "o_acc")), oRow)
	oRow = k.rdOp("add.s64", oRow, k.rdOp("mul.wide.u32", f.t, "8")) // columns 2t, 2t+1
	t0 := k.pOp("setp.eq.u32", f.t, "0")
	for mt := range c.MT {
		for rh := range 2 {
			row := k.rOp("add.u32", rowG, imm(mt*16+8*rh))
			elem, ok := f.rowElem(pk, row, lseHS, sq)
			f.finishRow(mt, rh, ok, elem, lseRow, t0)
			a := k.rdOp("shl.b64", elem, imm(log2(c.D*4)))
			a = k.rdOp("add.s64", a, oRow)
			for j := range c.D / 8 {
				k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, a, 32*j, f.o[mt][j][2*rh], f.o[mt][j][2*rh+1])
			}
		}
	}
}

// combineKernel is the state of the combine kernel's generation: one warp
// per (row, head), lane l owning columns [l·per, (l+1)·per) of the row.
type combineKernel struct {
	*gen
	d, per       int
	n            string // splits
	lseA, oA     string // .u64: split 0's LSE and the lane's first O column
	stepL, stepO string // .u64: bytes from one split to the next
	li           string // .u64: the row's LSE element index
	b, h, row    string
	qStart       string
	m            string // max_s LSE_s, 0 if all are -Inf
	l            string // Σ_s e^(LSE_s - m)
	acc          []string
}

// combine generates the kernel that merges the split-KV forward's partial
// results into O (input type) and LSE, tile.CombineParams: per row,
// m = max_s LSE_s, w_s = e^(LSE_s - m), O = Σ w_s·O_s / Σ w_s, LSE =
// m + log Σ w_s (O = 0 and LSE = -Inf when every LSE_s is -Inf), the splits
// taken in order. A NaN LSE_s (a NaN in the row's scores) makes O and LSE
// NaN.
func combine(dt dtype, d int) *Kernel {
	cb := &combineKernel{gen: newKernelGen(tile.CombineName(dt.name, d), tile.ElemThreads, dt, tile.CombineParams),
		d: d, per: d / tile.WarpThreads}
	k := cb.k
	done := k.newLabel("done")
	cb.setup(done)
	cb.maxLSE()
	cb.merge()
	cb.store()
	return cb.end(done)
}

// setup finds the warp's row and leaves through done past the sequence's
// end; it computes the addresses of the row's partial results.
func (cb *combineKernel) setup(done string) {
	k := cb.k
	cb.h = k.rOp("mov.u32", "%ctaid.y")
	cb.b = k.rOp("mov.u32", "%ctaid.z")
	cb.row = k.rOp("mov.u32", "%ctaid.x")
	cb.row = k.rOp("mad.lo.u32", cb.row, imm(tile.CombineRows), cb.warp)
	var sq string
	cb.qStart, sq = cb.seqQ(cb.b)
	cb.exitPast(cb.row, sq, done)
	cb.n = cb.ld(".u32", "splits")
	li := k.rdOp("mul.lo.u64", k.rdOp("cvt.u64.u32", cb.b), cb.ld(".u64", "lse_bs"))
	li = k.rdOp("add.s64", li, k.rdOp("mul.wide.u32", cb.h, cb.ld(".u32", "lse_hs")))
	cb.li = k.rdOp("add.s64", li, k.rdOp("cvt.u64.u32", k.rOp("add.u32", cb.qStart, cb.row)))
	cb.lseA = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cb.ld(".u64", "lse_acc")), k.rdOp("shl.b64", cb.li, "2"))
	oe := k.rdOp("shl.b64", cb.li, imm(log2(cb.d*4)))
	oe = k.rdOp("add.s64", oe, k.rdOp("mul.wide.u32", cb.lane, imm(cb.per*4)))
	cb.oA = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cb.ld(".u64", "o_acc")), oe)
	rows := cb.ld(".u32", "split_rows")
	cb.stepL = k.rdOp("mul.wide.u32", rows, "4")
	cb.stepO = k.rdOp("mul.wide.u32", rows, imm(cb.d*4))
}

// splitLoop emits a loop over the splits s = 0 .. splits-1 with a pointer
// per (start, step) pair advanced by its step: body(pointers).
func (cb *combineKernel) splitLoop(hint string, ptrs [][2]string, body func(p []string)) {
	k := cb.k
	i := k.rOp("mov.u32", "0")
	p := make([]string, len(ptrs))
	for j, x := range ptrs {
		p[j] = k.rdOp("mov.u64", x[0])
	}
	l := k.newLabel(hint)
	k.label(l)
	body(p)
	for j, x := range ptrs {
		k.op("add.s64 %s, %s, %s", p[j], p[j], x[1])
	}
	k.op("add.u32 %s, %s, 1", i, i)
	more := k.pOp("setp.lt.u32", i, cb.n)
	k.op("@%s bra %s", more, l)
}

// maxLSE computes m = max_s LSE_s (max.f32 skips NaNs), then 0 instead of
// -Inf, so that e^(LSE_s - m) is 0 for every -Inf LSE_s.
func (cb *combineKernel) maxLSE() {
	k := cb.k
	k.comment("m = max over the splits of their LSE")
	cb.m = k.fOp("mov.f32", negInf)
	cb.splitLoop("lsemax", [][2]string{{cb.lseA, cb.stepL}}, func(p []string) {
		x := k.F()
		k.op("ld.global.f32 %s, [%s]", x, p[0])
		k.op("max.f32 %s, %s, %s", cb.m, cb.m, x)
	})
	isInf := k.pOp("setp.eq.f32", cb.m, negInf)
	k.op("selp.f32 %s, %s, %s, %s", cb.m, zeroF, cb.m, isInf)
}

// merge accumulates l = Σ_s w_s and the lane's Σ_s w_s·O_s, w_s =
// 2^((LSE_s - m)·log2 e).
func (cb *combineKernel) merge() {
	k := cb.k
	k.comment("O = sum over the splits of e^(LSE - m) O, l = sum of e^(LSE - m)")
	cb.l = k.fOp("mov.f32", zeroF)
	cb.acc = make([]string, cb.per)
	for c := range cb.acc {
		cb.acc[c] = k.fOp("mov.f32", zeroF)
	}
	cb.splitLoop("merge", [][2]string{{cb.lseA, cb.stepL}, {cb.oA, cb.stepO}}, func(p []string) {
		x := k.F()
		k.op("ld.global.f32 %s, [%s]", x, p[0])
		w := k.fOp("sub.f32", x, cb.m)
		w = k.fOp("mul.f32", w, fimm(tile.Log2E))
		w = k.fOp("ex2.approx.ftz.f32", w)
		k.op("add.f32 %s, %s, %s", cb.l, cb.l, w)
		o := cb.loadCols(p[1])
		for c, v := range o {
			k.op("fma.rn.f32 %s, %s, %s, %s", cb.acc[c], w, v, cb.acc[c])
		}
	})
}

// loadCols loads the lane's per float32 columns at address a (16-byte
// vectors, or one 8-byte vector at d64).
func (cb *combineKernel) loadCols(a string) []string {
	k := cb.k
	out := make([]string, cb.per)
	for i := range out {
		out[i] = k.F()
	}
	if cb.per == 2 {
		k.op("ld.global.v2.f32 {%s, %s}, [%s]", out[0], out[1], a)
		return out
	}
	for i := 0; i < cb.per; i += 4 {
		k.op("ld.global.v4.f32 {%s, %s, %s, %s}, [%s+%d]", out[i], out[i+1], out[i+2], out[i+3], a, 4*i)
	}
	return out
}

// store writes O = acc / l in the input type (the lane's columns, one
// 4-, 8- or 16-byte store) and, from lane 0, LSE = m + log l; l = 0 (no
// split saw a key) gives O = 0 and LSE = -Inf.
func (cb *combineKernel) store() {
	k := cb.k
	zero := k.pOp("setp.eq.f32", cb.l, zeroF)
	inv := k.fOp("rcp.rn.f32", cb.l)
	k.op("selp.f32 %s, %s, %s, %s", inv, zeroF, inv, zero)
	lse := k.fOp("lg2.approx.ftz.f32", cb.l)
	lse = k.fOp("fma.rn.f32", lse, fimm(tile.Ln2), cb.m)
	k.op("selp.f32 %s, %s, %s, %s", lse, negInf, lse, zero)
	words := make([]string, cb.per/2)
	for i := range words {
		words[i] = cb.pack(k.fOp("mul.f32", cb.acc[2*i], inv), k.fOp("mul.f32", cb.acc[2*i+1], inv))
	}
	oRS := cb.ld(".u32", "o_rs")
	e := k.rdOp("mul.lo.u64", k.rdOp("cvt.u64.u32", cb.b), cb.ld(".u64", "o_bs"))
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", k.rOp("add.u32", cb.qStart, cb.row), oRS))
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", cb.h, imm(cb.d)))
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", cb.lane, imm(cb.per)))
	oa := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cb.ld(".u64", "o")), k.rdOp("shl.b64", e, "1"))
	switch len(words) {
	case 1:
		k.op("st.global.b32 [%s], %s", oa, words[0])
	case 2:
		k.op("st.global.v2.b32 [%s], {%s, %s}", oa, words[0], words[1])
	default:
		k.op("st.global.v4.b32 [%s], {%s, %s, %s, %s}", oa, words[0], words[1], words[2], words[3])
	}
	la := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cb.ld(".u64", "lse")), k.rdOp("shl.b64", cb.li, "2"))
	l0 := k.pOp("setp.eq.u32", cb.lane, "0")
	k.op("@%s st.global.f32 [%s], %s", l0, la, lse)
}
