package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// backward generates the FlashAttention-2 dK/dV kernel: one block per (key
// block of Bc keys, query head, batch element); warp w owns keys
// [16w, 16w+16) and keeps their dK and dV rows in registers while the block
// walks the query blocks that see the key block (Q, dO, LSE and dsum
// double-buffered in shared memory). Per query block:
//
//	Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, P = 2^(y - LSE·log2 e), dS = P∘(dP - dsum)·scale
//	dV += Pᵀ·dO, dK += dSᵀ·Q
//
// and with atomicDQ, dSᵀ goes through shared memory and the warps add
// dQ = dS·K (16 query rows each) to the float32 accumulator with
// red.global.add.f32. dK and dV are written in float32 per query head.
func backward(dt dtype, c tile.Bwd, atomicDQ bool) *Kernel {
	k := newKernel(c.Name(dt.name, atomicDQ), tile.Threads)
	g := newGen(k, dt)
	g.declare(tile.BwdParams)
	D, Br, Bc, rc := c.D, c.Br, c.Bc(), c.RowChunks()
	dnt := D / 8
	qnt := Br / 8 // query n-tiles of Sᵀ

	nb := k.rOp("mov.u32", "%ctaid.x")
	h := k.rOp("mov.u32", "%ctaid.y")
	b := k.rOp("mov.u32", "%ctaid.z")
	s := g.seq(b, "p_cu_q", "p_cu_k", "p_used_k", "p_sq", "p_sk")
	n0 := k.rOp("mul.lo.u32", nb, imm(Bc))
	done := k.newLabel("done")
	out := k.pOp("setp.ge.u32", n0, s.sk)
	k.op("@%s bra %s", out, done)

	group := g.ld(".u32", "group")
	kh := k.rOp("div.u32", h, group)
	qRS, kRS := g.ld(".u32", "q_rs"), g.ld(".u32", "k_rs")
	qBase := g.rowBase("p_q", b, "p_q_bs", s.qStart, qRS, h, D, 2)
	doBase := g.rowBase("p_do", b, "p_q_bs", s.qStart, qRS, h, D, 2)
	kBase := g.rowBase("p_k", b, "p_k_bs", s.kStart, kRS, kh, D, 2)
	vBase := g.rowBase("p_v", b, "p_k_bs", s.kStart, kRS, kh, D, 2)
	qRB := k.rOp("shl.b32", qRS, "1")
	kRB := k.rOp("shl.b32", kRS, "1")
	mask := g.loadMask("p_left", "p_right")
	sc := g.loadScore("p_scale_log2", "p_cap_scale", "p_cap_log2")
	scale := g.ld(".f32", "scale")

	lseP, dsumP := g.statRows(b, h, s)
	// Threads 0..Br-1 copy LSE rows, Br..2Br-1 dsum rows (DsumOff = LSEOff + 4·Br).
	isDsum := k.pOp("setp.ge.u32", g.tid, imm(Br))
	statRow := k.rOp("and.b32", g.tid, imm(Br-1))
	statBase := k.rdOp("selp.b64", dsumP, lseP, isDsum)
	statS := k.rOp("shl.b32", g.tid, "2")

	// Query blocks that see this key block (tile.Mask.QueryBlocks).
	n1 := k.rOp("add.u32", n0, imm(Bc))
	n1 = k.rOp("min.u32", n1, s.sk)
	ilo := k.rOp("sub.s32", n0, s.off)
	ilo = k.rOp("sub.s32", ilo, mask.right)
	ilo = k.rOp("max.s32", ilo, "0")
	ilo = k.rOp("selp.b32", "0", ilo, mask.rightInf)
	ihi := k.rOp("sub.s32", n1, s.off)
	ihi = k.rOp("add.s32", ihi, mask.left)
	ihi = k.rOp("min.s32", ihi, s.sq)
	ihi = k.rOp("selp.b32", s.sq, ihi, mask.leftInf)
	mlo := k.rOp("shr.u32", ilo, imm(log2(Br)))
	mhi := k.rOp("max.s32", ihi, "0")
	mhi = k.rOp("add.s32", mhi, imm(Br-1))
	mhi = k.rOp("shr.u32", mhi, imm(log2(Br)))
	empty := k.pOp("setp.le.s32", ihi, ilo)
	k.op("selp.b32 %s, %s, %s, %s", mhi, mlo, mhi, empty)

	k.comment("dK, dV accumulators")
	dK := g.acc4(dnt)
	dV := g.acc4(dnt)
	// This warp's 16 keys: rows of K and V tiles and of the dS tile; the
	// epilogue needs them, so they come before the branch to it.
	wrow := k.rOp("shl.b32", g.warp, "4")
	kW := k.rOp("mad.lo.u32", wrow, imm(rc*tile.ChunkBytes), g.smem)
	keyRow := k.rOp("add.u32", n0, wrow)
	keyRow = k.rOp("add.u32", keyRow, g.g) // key of accumulator rows g (+8)
	colOff := k.rOp("shl.b32", g.t, "1")

	epi := k.newLabel("epilogue")
	none := k.pOp("setp.ge.s32", mlo, mhi)
	k.op("@%s bra %s", none, epi)

	kvCopy := g.newTileCopy(Bc, rc)
	qCopy := g.newTileCopy(Br, rc)
	issueQ := func(m, sbase string) {
		m0 := k.rOp("shl.b32", m, imm(log2(Br)))
		g.issue(qCopy, qBase, qRB, m0, s.sq, sbase, c.QOff(0))
		g.issue(qCopy, doBase, qRB, m0, s.sq, sbase, c.DOOff(0))
		// LSE and dsum: 4-byte copies, rows past sq zero-filled.
		r := k.rOp("add.u32", m0, statRow)
		ok := k.pOp("setp.lt.u32", r, s.sq)
		sz := k.rOp("selp.u32", "4", "0", ok)
		r = k.rOp("selp.u32", r, "0", ok)
		a := k.RD()
		k.op("mad.wide.u32 %s, %s, 4, %s", a, r, statBase)
		d := k.rOp("add.u32", sbase, statS)
		k.op("cp.async.ca.shared.global [%s+%d], [%s], 4, %s", d, c.LSEOff(0), a, sz)
	}
	g.issue(kvCopy, kBase, kRB, n0, s.sk, g.smem, c.KOff())
	g.issue(kvCopy, vBase, kRB, n0, s.sk, g.smem, c.VOff())
	issueQ(mlo, g.smem)
	k.op("cp.async.commit_group")

	loop := g.newLoop(mlo, c.StageBytes())
	ST := make([][4]string, qnt)
	dPT := make([][4]string, qnt)
	for j := range qnt {
		for i := range 4 {
			ST[j][i], dPT[j][i] = k.F(), k.F()
		}
	}
	var dq [][4]string
	var dsLane, dqBase string
	var dqRB string
	if atomicDQ {
		dq = make([][4]string, dnt)
		for j := range dnt {
			for i := range 4 {
				dq[j][i] = k.F()
			}
		}
		// dQ = dS·K: the warp's query rows [16w, 16w+16) are columns of the
		// stored dSᵀ tile: block column 16w, i.e. BlockJ = w.
		dsLane = g.laneOffDyn(tile.PatternColMajor, Br/8, g.warp)
		dqRS := g.ld(".u32", "dq_rs")
		dqBase = g.rowBase("p_dq_acc", b, "p_dq_bs", s.qStart, dqRS, h, D, 4)
		dqRB = k.rOp("shl.b32", dqRS, "2")
	}

	g.top(loop, mhi, issueQ)

	sb := k.rOp("add.u32", g.smem, loop.stage)
	k.comment("S^T = K Q^T, dP^T = V dO^T")
	g.zeroAcc(ST)
	g.zeroAcc(dPT)
	for ks := 0; ks < D/16; ks++ {
		ka := g.ldsm(kW, c.KOff(), rc, tile.PatternRowMajor, 0, ks*16, false)
		va := g.ldsm(kW, c.VOff(), rc, tile.PatternRowMajor, 0, ks*16, false)
		for j := 0; j < Br/16; j++ {
			qb := g.ldsm(sb, c.QOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			g.mma16(ST[2*j:], ka, qb)
			ob := g.ldsm(sb, c.DOOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			g.mma16(dPT[2*j:], va, ob)
		}
	}

	// Per-column (query) LSE·log2 e and dsum from shared memory.
	k.comment("P and dS")
	lseC := make([][2]string, qnt)
	dsC := make([][2]string, qnt)
	colS := k.rOp("shl.b32", g.t, "3") // (2t)·4 bytes
	colS = k.rOp("add.u32", colS, sb)
	for j := range qnt {
		a, bb := k.F(), k.F()
		k.op("ld.shared.v2.f32 {%s, %s}, [%s+%d]", a, bb, colS, c.LSEOff(0)+32*j)
		lseC[j] = [2]string{g.lse2(a), g.lse2(bb)}
		d0, d1 := k.F(), k.F()
		k.op("ld.shared.v2.f32 {%s, %s}, [%s+%d]", d0, d1, colS, c.DsumOff(0)+32*j)
		dsC[j] = [2]string{d0, d1}
	}
	g.probGrad(sc, scale, ST, dPT,
		func(j, i int) string { return lseC[j][i&1] },
		func(j, i int) string { return dsC[j][i&1] })

	m0 := k.rOp("shl.b32", loop.n, imm(log2(Br)))
	need := g.needsMask(mask, s, m0, n0, Br, Bc)
	nomask := k.newLabel("nomask")
	k.op("@!%s bra %s", need, nomask)
	colBase := k.rOp("add.u32", m0, colOff)
	for rh := range 2 {
		key := k.rOp("add.u32", keyRow, imm(8*rh))
		lo, hi := g.keyBounds(mask, s, key, colBase)
		for j := range qnt {
			for e := range 2 {
				p := g.hidden(lo, hi, 8*j+e)
				g.zeroWhere(p, ST[j][2*rh+e], dPT[j][2*rh+e])
			}
		}
	}
	k.label(nomask)

	k.comment("dV += P^T dO, dK += dS^T Q")
	for kk := 0; kk < Br/16; kk++ {
		pa := g.aFromC(ST, kk)
		sa := g.aFromC(dPT, kk)
		for j := 0; j < D/16; j++ {
			ob := g.ldsm(sb, c.DOOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
			g.mma16(dV[2*j:], pa, ob)
			qb := g.ldsm(sb, c.QOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
			g.mma16(dK[2*j:], sa, qb)
		}
	}

	if atomicDQ {
		k.comment("dS^T to shared memory, then dQ += dS K with atomics")
		// Element (key row r, query col 8j+2t) of the dSᵀ tile (rc = Br/8 = 8
		// chunks per row): DSOff + r·128 + ((j ^ (r&7))·16) + 4t, r&7 = g.
		rowB := k.rOp("add.u32", wrow, g.g)
		rowB = k.rOp("mad.lo.u32", rowB, imm(Br*2), g.smem)
		t4 := k.rOp("shl.b32", g.t, "2")
		rowB = k.rOp("add.u32", rowB, t4)
		for j := range qnt {
			x := k.rOp("xor.b32", g.g, imm(j))
			x = k.rOp("shl.b32", x, "4")
			a := k.rOp("add.u32", rowB, x)
			for rh := range 2 {
				v := g.pack(dPT[j][2*rh], dPT[j][2*rh+1])
				k.op("st.shared.b32 [%s+%d], %s", a, c.DSOff()+8*rh*Br*2, v)
			}
		}
		k.op("bar.sync 0")
		g.zeroAcc(dq)
		for kk := 0; kk < Bc/16; kk++ {
			// A = dS (queries × keys kk*16..): stored rows kk*16.., column block 16w.
			sa := g.ldsmAt(g.smem, dsLane, c.DSOff()+kk*16*(Br/8)*tile.ChunkBytes, true)
			for j := 0; j < D/16; j++ {
				kb := g.ldsm(g.smem, c.KOff(), rc, tile.PatternRowMajor, kk*16, j*16, true)
				g.mma16(dq[2*j:], sa, kb)
			}
		}
		qrow := k.rOp("add.u32", m0, wrow)
		qrow = k.rOp("add.u32", qrow, g.g)
		colB := k.rdOp("mul.wide.u32", g.t, "8") // 2t floats
		dqT := k.rdOp("add.s64", dqBase, colB)
		for rh := range 2 {
			r := k.rOp("add.u32", qrow, imm(8*rh))
			ok := k.pOp("setp.lt.u32", r, s.sq)
			a := k.RD()
			k.op("mad.wide.u32 %s, %s, %s, %s", a, r, dqRB, dqT)
			for j := range dnt {
				for e := range 2 {
					k.op("@%s red.global.add.f32 [%s+%d], %s", ok, a, 32*j+4*e, dq[j][2*rh+e])
				}
			}
		}
	}
	g.bottom(loop)

	// Epilogue: dK and dV rows of this warp's keys, float32, per query head.
	k.label(epi)
	k.comment("epilogue")
	dkvRS := g.ld(".u32", "dkv_rs")
	dkBase := g.rowBase("p_dk", b, "p_dkv_bs", s.kStart, dkvRS, h, D, 4)
	dvBase := g.rowBase("p_dv", b, "p_dkv_bs", s.kStart, dkvRS, h, D, 4)
	dkvRB := k.rOp("shl.b32", dkvRS, "2")
	colB := k.rdOp("mul.wide.u32", g.t, "8")
	dkT := k.rdOp("add.s64", dkBase, colB)
	dvT := k.rdOp("add.s64", dvBase, colB)
	for rh := range 2 {
		key := k.rOp("add.u32", keyRow, imm(8*rh))
		ok := k.pOp("setp.lt.u32", key, s.sk)
		ak, av := k.RD(), k.RD()
		k.op("mad.wide.u32 %s, %s, %s, %s", ak, key, dkvRB, dkT)
		k.op("mad.wide.u32 %s, %s, %s, %s", av, key, dkvRB, dvT)
		for j := range dnt {
			k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, ak, 32*j, dK[j][2*rh], dK[j][2*rh+1])
			k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, av, 32*j, dV[j][2*rh], dV[j][2*rh+1])
		}
	}
	k.label(done)
	k.op("ret")
	return k
}
