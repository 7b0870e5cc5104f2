package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// unpack returns the two f32 values of a packed pair (low, high).
func (g *gen) unpack(r string) (lo, hi string) {
	k := g.k
	if g.dt.name == "bf16" {
		l := k.rOp("shl.b32", r, "16")
		hb := k.rOp("and.b32", r, "-65536")
		return k.fOp("mov.b32", l), k.fOp("mov.b32", hb)
	}
	h0, h1 := k.H(), k.H()
	k.op("mov.b32 {%s, %s}, %s", h0, h1, r)
	return k.fOp("cvt.f32.f16", h0), k.fOp("cvt.f32.f16", h1)
}

// preprocess generates the backward preprocessing kernel: dsum[b,h,row] =
// Σ_d dO[b,row,h,d]·O[b,row,h,d] in float32, one warp per (row, head),
// tile.PreRows rows per block; grid (ceil(maxSq/PreRows), H, B).
func preprocess(dt dtype) *Kernel {
	g := newKernelGen(tile.PreName(dt.name), tile.ElemThreads, dt, tile.PreParams)
	k := g.k
	h := k.rOp("mov.u32", "%ctaid.y")
	b := k.rOp("mov.u32", "%ctaid.z")
	row := k.rOp("mov.u32", "%ctaid.x")
	row = k.rOp("mad.lo.u32", row, imm(tile.PreRows), g.warp)
	qStart, sq := g.seqQ(b)
	done := k.newLabel("done")
	g.exitPast(row, sq, done)

	d := g.ld(".u32", "d")
	qRS := g.ld(".u32", "q_rs")
	// Element offset of (b, qStart+row, h, 0).
	e := k.rdOp("mul.lo.u64", k.rdOp("cvt.u64.u32", b), g.ld(".u64", "q_bs"))
	r := k.rOp("add.u32", qStart, row)
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", r, qRS))
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", h, d))
	e = k.rdOp("shl.b64", e, "1")
	lane4 := k.rdOp("mul.wide.u32", g.lane, "4")
	e = k.rdOp("add.s64", e, lane4)
	oA := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "o")), e)
	dA := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "do")), e)
	sum := k.F()
	k.op("mov.f32 %s, %s", sum, zeroF)
	i := k.R()
	k.op("mov.u32 %s, 0", i)
	loop := k.newLabel("loop")
	k.label(loop)
	off := k.rdOp("mul.wide.u32", i, "2")
	ov, dv := k.R(), k.R()
	k.op("ld.global.b32 %s, [%s]", ov, k.rdOp("add.s64", oA, off))
	k.op("ld.global.b32 %s, [%s]", dv, k.rdOp("add.s64", dA, off))
	o0, o1 := g.unpack(ov)
	d0, d1 := g.unpack(dv)
	k.op("fma.rn.f32 %s, %s, %s, %s", sum, o0, d0, sum)
	k.op("fma.rn.f32 %s, %s, %s, %s", sum, o1, d1, sum)
	k.op("add.u32 %s, %s, 64", i, i)
	more := k.pOp("setp.lt.u32", i, d)
	k.op("@%s bra %s", more, loop)
	sum = g.shflReduce(sum, "add.f32", 16, 8, 4, 2, 1)
	// dsum[b*lse_bs + h*lse_hs + qStart + row]
	li := k.rdOp("mul.lo.u64", k.rdOp("cvt.u64.u32", b), g.ld(".u64", "lse_bs"))
	li = k.rdOp("add.s64", li, k.rdOp("mul.wide.u32", h, g.ld(".u32", "lse_hs")))
	li = k.rdOp("add.s64", li, k.rdOp("cvt.u64.u32", r))
	li = k.rdOp("shl.b64", li, "2")
	sa := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "dsum")), li)
	l0 := k.pOp("setp.eq.u32", g.lane, "0")
	k.op("@%s st.global.f32 [%s], %s", l0, sa, sum)
	return g.end(done)
}

// convert generates the conversion kernel: out[row, j, :] = Σ_{g<group}
// in[row, j·group+g, :] from float32 to the input type, two elements per
// thread; grid (ceil(heads·d/2/ElemThreads), min(rows, 65535)), rows walked
// with a stride of the grid's y size.
func convert(dt dtype) *Kernel {
	g := newKernelGen(tile.ConvertName(dt.name), tile.ElemThreads, dt, tile.ConvertParams)
	k := g.k
	heads, group, d := g.ld(".u32", "heads"), g.ld(".u32", "group"), g.ld(".u32", "d")
	rows := g.ld(".u32", "rows")
	e := g.elemIndex()
	width := k.rOp("mul.lo.u32", heads, d)
	done := k.newLabel("done")
	g.exitPast(e, width, done)
	j := k.rOp("div.u32", e, d)
	col := k.rOp("rem.u32", e, d)
	gd := k.rOp("mul.lo.u32", group, d)      // elements per group of input heads
	inW := k.rOp("mul.lo.u32", width, group) // input row width
	inOff := k.rOp("mad.lo.u32", j, gd, col) // within a row
	inP := k.rdOp("cvta.to.global.u64", g.ld(".u64", "in"))
	outP := k.rdOp("cvta.to.global.u64", g.ld(".u64", "out"))
	dB := k.rdOp("mul.wide.u32", d, "4")
	g.rowLoop(k.rOp("mov.u32", "%ctaid.y"), rows, func(row string) {
		a := k.rdOp("mul.wide.u32", row, inW)
		a = k.rdOp("add.s64", a, k.rdOp("cvt.u64.u32", inOff))
		a = k.rdOp("shl.b64", a, "2")
		a = k.rdOp("add.s64", inP, a)
		s0, s1 := k.fOp("mov.f32", zeroF), k.fOp("mov.f32", zeroF)
		gi := k.rOp("mov.u32", "0")
		gl := k.newLabel("group")
		k.label(gl)
		x0, x1 := k.F(), k.F()
		k.op("ld.global.v2.f32 {%s, %s}, [%s]", x0, x1, a)
		k.op("add.f32 %s, %s, %s", s0, s0, x0)
		k.op("add.f32 %s, %s, %s", s1, s1, x1)
		k.op("add.s64 %s, %s, %s", a, a, dB)
		k.op("add.u32 %s, %s, 1", gi, gi)
		gm := k.pOp("setp.lt.u32", gi, group)
		k.op("@%s bra %s", gm, gl)
		o := k.rdOp("mul.wide.u32", row, width)
		o = k.rdOp("add.s64", o, k.rdOp("cvt.u64.u32", e))
		o = k.rdOp("shl.b64", o, "1")
		k.op("st.global.b32 [%s], %s", k.rdOp("add.s64", outP, o), g.pack(s0, s1))
	})
	return g.end(done)
}

// convertDQ generates the kernel that converts the padded float32 dQ
// accumulator (tile.ConvertDQParams) to the input type, two elements per
// thread; grid (ceil(width/2/ElemThreads), min(maxSq, 65535), batch).
func convertDQ(dt dtype) *Kernel {
	g := newKernelGen(tile.ConvertDQName(dt.name), tile.ElemThreads, dt, tile.ConvertDQParams)
	k := g.k
	width := g.ld(".u32", "width")
	e := g.elemIndex()
	done := k.newLabel("done")
	g.exitPast(e, width, done)
	b := k.rOp("mov.u32", "%ctaid.z")
	qStart, sq := g.seqQ(b)
	// Rows b·bs + qStart + i of in and out, elements e, e+1 of each.
	inRow := k.rOp("mad.lo.u32", b, g.ld(".u32", "in_bs"), qStart)
	outRow := k.rOp("mad.lo.u32", b, g.ld(".u32", "out_bs"), qStart)
	inP := k.rdOp("cvta.to.global.u64", g.ld(".u64", "in"))
	outP := k.rdOp("cvta.to.global.u64", g.ld(".u64", "out"))
	e64 := k.rdOp("cvt.u64.u32", e)
	g.rowLoop(k.rOp("mov.u32", "%ctaid.y"), sq, func(i string) {
		a := k.rdOp("mul.wide.u32", k.rOp("add.u32", inRow, i), width)
		a = k.rdOp("shl.b64", k.rdOp("add.s64", a, e64), "2")
		x0, x1 := k.F(), k.F()
		k.op("ld.global.v2.f32 {%s, %s}, [%s]", x0, x1, k.rdOp("add.s64", inP, a))
		o := k.rdOp("mul.wide.u32", k.rOp("add.u32", outRow, i), width)
		o = k.rdOp("shl.b64", k.rdOp("add.s64", o, e64), "1")
		k.op("st.global.b32 [%s], %s", k.rdOp("add.s64", outP, o), g.pack(x0, x1))
	})
	return g.end(done)
}

// elemIndex returns the first of the two elements of a row this thread
// converts: 2·(ctaid.x·ElemThreads + tid).
func (g *gen) elemIndex() string {
	k := g.k
	e := k.rOp("mov.u32", "%ctaid.x")
	e = k.rOp("mad.lo.u32", e, imm(tile.ElemThreads), g.tid)
	return k.rOp("shl.b32", e, "1")
}

// rowLoop runs body(row) for row = first, first + nctaid.y, ... < rows.
func (g *gen) rowLoop(first, rows string, body func(row string)) {
	k := g.k
	row := k.rOp("mov.u32", first)
	step := k.rOp("mov.u32", "%nctaid.y")
	loop := k.newLabel("row")
	end := k.newLabel("rowsdone")
	k.label(loop)
	fin := k.pOp("setp.ge.u32", row, rows)
	k.op("@%s bra %s", fin, end)
	body(row)
	k.op("add.u32 %s, %s, %s", row, row, step)
	k.op("bra.uni %s", loop)
	k.label(end)
}

// seqQ returns the first packed row and the length of query sequence b:
// (0, sq) for a dense batch (cu_q 0), (cu_q[b], cu_q[b+1] - cu_q[b]) for a
// varlen one.
func (g *gen) seqQ(b string) (qStart, sq string) {
	k := g.k
	qStart = k.rOp("mov.u32", "0")
	sq = g.ld(".u32", "sq")
	cq := g.ld(".u64", "cu_q")
	isVar := k.pOp("setp.ne.u64", cq, "0")
	a := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cq), k.rdOp("mul.wide.u32", b, "4"))
	q1 := k.R()
	k.op("@%s ld.global.u32 %s, [%s]", isVar, qStart, a)
	k.op("@%s ld.global.u32 %s, [%s+4]", isVar, q1, a)
	k.op("@%s sub.u32 %s, %s, %s", isVar, sq, q1, qStart)
	return qStart, sq
}
