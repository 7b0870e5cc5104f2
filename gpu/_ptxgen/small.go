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
	k := newKernel(tile.PreName(dt.name), tile.ElemThreads)
	g := newGen(k, dt)
	g.declare(tile.PreParams)
	h := k.rOp("mov.u32", "%ctaid.y")
	b := k.rOp("mov.u32", "%ctaid.z")
	row := k.rOp("mov.u32", "%ctaid.x")
	row = k.rOp("mad.lo.u32", row, imm(tile.PreRows), g.warp)
	qStart := k.R()
	k.op("mov.u32 %s, 0", qStart)
	sq := g.ld(".u32", "sq")
	cu := k.rdOp("cvta.to.global.u64", g.ld(".u64", "cu_q"))
	isVar := k.pOp("setp.ne.u64", g.ld(".u64", "cu_q"), "0")
	ca := k.rdOp("add.s64", cu, k.rdOp("mul.wide.u32", b, "4"))
	q1 := k.R()
	k.op("@%s ld.global.u32 %s, [%s]", isVar, qStart, ca)
	k.op("@%s ld.global.u32 %s, [%s+4]", isVar, q1, ca)
	k.op("@%s sub.u32 %s, %s, %s", isVar, sq, q1, qStart)
	done := k.newLabel("done")
	out := k.pOp("setp.ge.u32", row, sq)
	k.op("@%s bra %s", out, done)

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
	k.label(done)
	k.op("ret")
	return k
}

// convert generates the conversion kernel: out[row, j, :] = Σ_{g<group}
// in[row, j·group+g, :] from float32 to the input type, two elements per
// thread; grid (ceil(heads·d/2/ElemThreads), min(rows, 65535)), rows walked
// with a stride of the grid's y size.
func convert(dt dtype) *Kernel {
	k := newKernel(tile.ConvertName(dt.name), tile.ElemThreads)
	g := newGen(k, dt)
	g.declare(tile.ConvertParams)
	heads, group, d := g.ld(".u32", "heads"), g.ld(".u32", "group"), g.ld(".u32", "d")
	rows := g.ld(".u32", "rows")
	e := k.rOp("mov.u32", "%ctaid.x")
	e = k.rOp("mad.lo.u32", e, imm(tile.ElemThreads), g.tid)
	e = k.rOp("shl.b32", e, "1")
	width := k.rOp("mul.lo.u32", heads, d)
	done := k.newLabel("done")
	out := k.pOp("setp.ge.u32", e, width)
	k.op("@%s bra %s", out, done)
	j := k.rOp("div.u32", e, d)
	col := k.rOp("rem.u32", e, d)
	gd := k.rOp("mul.lo.u32", group, d)      // elements per group of input heads
	inW := k.rOp("mul.lo.u32", width, group) // input row width
	inOff := k.rOp("mad.lo.u32", j, gd, col) // within a row
	inP := k.rdOp("cvta.to.global.u64", g.ld(".u64", "in"))
	outP := k.rdOp("cvta.to.global.u64", g.ld(".u64", "out"))
	dB := k.rOp("shl.b32", d, "2")
	row := k.rOp("mov.u32", "%ctaid.y")
	step := k.rOp("mov.u32", "%nctaid.y")
	loop := k.newLabel("row")
	end := k.newLabel("rowsdone")
	k.label(loop)
	fin := k.pOp("setp.ge.u32", row, rows)
	k.op("@%s bra %s", fin, end)
	a := k.rdOp("mul.wide.u32", row, inW)
	a = k.rdOp("add.s64", a, k.rdOp("cvt.u64.u32", inOff))
	a = k.rdOp("shl.b64", a, "2")
	a = k.rdOp("add.s64", inP, a)
	s0, s1 := k.F(), k.F()
	k.op("mov.f32 %s, %s", s0, zeroF)
	k.op("mov.f32 %s, %s", s1, zeroF)
	gi := k.R()
	k.op("mov.u32 %s, 0", gi)
	gl := k.newLabel("group")
	k.label(gl)
	x0, x1 := k.F(), k.F()
	k.op("ld.global.v2.f32 {%s, %s}, [%s]", x0, x1, a)
	k.op("add.f32 %s, %s, %s", s0, s0, x0)
	k.op("add.f32 %s, %s, %s", s1, s1, x1)
	k.op("add.s64 %s, %s, %s", a, a, k.rdOp("cvt.u64.u32", dB))
	k.op("add.u32 %s, %s, 1", gi, gi)
	gm := k.pOp("setp.lt.u32", gi, group)
	k.op("@%s bra %s", gm, gl)
	o := k.rdOp("mul.wide.u32", row, width)
	o = k.rdOp("add.s64", o, k.rdOp("cvt.u64.u32", e))
	o = k.rdOp("shl.b64", o, "1")
	o = k.rdOp("add.s64", outP, o)
	k.op("st.global.b32 [%s], %s", o, g.pack(s0, s1))
	k.op("add.u32 %s, %s, %s", row, row, step)
	k.op("bra.uni %s", loop)
	k.label(end)
	k.label(done)
	k.op("ret")
	return k
}
