package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// dqKernel generates the deterministic dQ kernel: one block per (query
// block, head, batch element) like the forward pass; each warp keeps its 16
// query rows of Q and dO as mma fragments and walks the K/V tiles the rows
// see (double-buffered), recomputing S = Q·Kᵀ, dP = dO·Vᵀ, P and dS, and
// accumulating dQ = dS·K in registers; dQ is written once, in the input
// type, with no atomics.
func dqKernel(dt dtype, c tile.DQ) *Kernel {
	k := newKernel(c.Name(dt.name), tile.Threads)
	g := newGen(k, dt)
	g.declare(tile.DQParams)
	D, Bc, Br, rc := c.D, c.Bc, c.Br(), c.RowChunks()
	nt := Bc / 8
	dnt := D / 8

	mb := k.rOp("mov.u32", "%ctaid.x")
	h := k.rOp("mov.u32", "%ctaid.y")
	b := k.rOp("mov.u32", "%ctaid.z")
	s := g.seq(b, "p_cu_q", "p_cu_k", "p_used_k", "p_sq", "p_sk")
	m0 := k.rOp("mul.lo.u32", mb, imm(Br))
	done := k.newLabel("done")
	out := k.pOp("setp.ge.u32", m0, s.sq)
	k.op("@%s bra %s", out, done)

	group := g.ld(".u32", "group")
	kh := k.rOp("div.u32", h, group)
	qRS, kRS := g.ld(".u32", "q_rs"), g.ld(".u32", "k_rs")
	qBase := g.rowBase("p_q", b, "p_q_bs", s.qStart, qRS, h, D, 2)
	doBase := g.rowBase("p_do", b, "p_q_bs", s.qStart, qRS, h, D, 2)
	dqBase := g.rowBase("p_dq", b, "p_q_bs", s.qStart, qRS, h, D, 2)
	kBase := g.rowBase("p_k", b, "p_k_bs", s.kStart, kRS, kh, D, 2)
	vBase := g.rowBase("p_v", b, "p_k_bs", s.kStart, kRS, kh, D, 2)
	qRB := k.rOp("shl.b32", qRS, "1")
	kRB := k.rOp("shl.b32", kRS, "1")
	mask := g.loadMask("p_left", "p_right")
	sc := g.loadScore("p_scale_log2", "p_cap_scale", "p_cap_log2")
	scale := g.ld(".f32", "scale")
	nlo, nhi := g.keyBlocks(mask, s, m0, Br, Bc)

	// Rows of this thread: m0 + 16w + g + 8rh; their LSE (log2 units) and dsum.
	wrow := k.rOp("shl.b32", g.warp, "4")
	rowBase := k.rOp("add.u32", m0, wrow)
	rowBase = k.rOp("add.u32", rowBase, g.g)
	lseP, dsumP := g.statRows(b, h, s)
	var lse2, dsum [2]string
	for rh := range 2 {
		r := k.rOp("add.u32", rowBase, imm(8*rh))
		ok := k.pOp("setp.lt.u32", r, s.sq)
		l, d := k.F(), k.F()
		k.op("mov.f32 %s, %s", l, posInf)
		k.op("mov.f32 %s, %s", d, zeroF)
		a := k.rdOp("mul.wide.u32", r, "4")
		la := k.rdOp("add.s64", lseP, a)
		da := k.rdOp("add.s64", dsumP, a)
		k.op("@%s ld.global.f32 %s, [%s]", ok, l, la)
		k.op("@%s ld.global.f32 %s, [%s]", ok, d, da)
		lse2[rh] = g.lse2(l)
		dsum[rh] = d
	}

	dq := g.acc4(dnt)
	epi := k.newLabel("epilogue")
	empty := k.pOp("setp.ge.s32", nlo, nhi)
	k.op("@%s bra %s", empty, epi)

	qCopy := g.newTileCopy(Br, rc)
	kvCopy := g.newTileCopy(Bc, rc)
	loadKV := g.kvLoader(kvCopy, kBase, vBase, kRB, s, c.KOff(0), c.VOff(0))
	g.issue(qCopy, qBase, qRB, m0, s.sq, g.smem, c.QOff())
	g.issue(qCopy, doBase, qRB, m0, s.sq, g.smem, c.DOOff())
	k.op("cp.async.commit_group")
	loadKV(nlo, g.smem)
	k.op("cp.async.commit_group")
	k.op("cp.async.wait_group 1")
	k.op("bar.sync 0")
	qW := k.rOp("mad.lo.u32", wrow, imm(rc*tile.ChunkBytes), g.smem)
	var qf, of [][4]string
	for ks := 0; ks < D/16; ks++ {
		qf = append(qf, g.ldsm(qW, c.QOff(), rc, tile.PatternRowMajor, 0, ks*16, false))
		of = append(of, g.ldsm(qW, c.DOOff(), rc, tile.PatternRowMajor, 0, ks*16, false))
	}
	colOff := k.rOp("shl.b32", g.t, "1")

	loop := g.newLoop(nlo, c.KOff(1)-c.KOff(0))
	S := make([][4]string, nt)
	dP := make([][4]string, nt)
	for j := range nt {
		for i := range 4 {
			S[j][i], dP[j][i] = k.F(), k.F()
		}
	}

	g.top(loop, nhi, loadKV)

	sb := k.rOp("add.u32", g.smem, loop.stage)
	k.comment("S = Q K^T, dP = dO V^T")
	g.zeroAcc(S)
	g.zeroAcc(dP)
	for ks := 0; ks < D/16; ks++ {
		for j := 0; j < Bc/16; j++ {
			kb := g.ldsm(sb, c.KOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			g.mma16(S[2*j:], qf[ks], kb)
			vb := g.ldsm(sb, c.VOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			g.mma16(dP[2*j:], of[ks], vb)
		}
	}
	k.comment("P and dS")
	g.probGrad(sc, scale, S, dP,
		func(j, i int) string { return lse2[i>>1] },
		func(j, i int) string { return dsum[i>>1] })
	nk0 := k.rOp("shl.b32", loop.n, imm(log2(Bc)))
	need := g.needsMask(mask, s, m0, nk0, Br, Bc)
	nomask := k.newLabel("nomask")
	k.op("@!%s bra %s", need, nomask)
	colBase := k.rOp("add.u32", nk0, colOff)
	for rh := range 2 {
		row := k.rOp("add.u32", rowBase, imm(8*rh))
		lo, hi := g.rowBounds(mask, s, row, colBase)
		for j := range nt {
			for e := range 2 {
				p := g.hidden(lo, hi, 8*j+e)
				g.zeroWhere(p, dP[j][2*rh+e])
			}
		}
	}
	k.label(nomask)

	k.comment("dQ += dS K")
	for kk := 0; kk < Bc/16; kk++ {
		sa := g.aFromC(dP, kk)
		for j := 0; j < D/16; j++ {
			kb := g.ldsm(sb, c.KOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
			g.mma16(dq[2*j:], sa, kb)
		}
	}
	g.bottom(loop)

	k.label(epi)
	k.comment("epilogue: dQ in the input type")
	colB := k.rdOp("mul.wide.u32", g.t, "4")
	dqT := k.rdOp("add.s64", dqBase, colB)
	for rh := range 2 {
		r := k.rOp("add.u32", rowBase, imm(8*rh))
		ok := k.pOp("setp.lt.u32", r, s.sq)
		a := k.RD()
		k.op("mad.wide.u32 %s, %s, %s, %s", a, r, qRB, dqT)
		for j := range dnt {
			p := g.pack(dq[j][2*rh], dq[j][2*rh+1])
			k.op("@%s st.global.b32 [%s+%d], %s", ok, a, 16*j, p)
		}
	}
	k.label(done)
	k.op("ret")
	return k
}
