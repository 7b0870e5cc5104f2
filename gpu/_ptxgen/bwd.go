package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// bwdKernel is the state of the dK/dV kernel's generation.
type bwdKernel struct {
	*gen
	c        tile.Bwd
	atomic   bool // also dQ += dS·K with atomics
	s        seqInfo
	mask     maskParams
	b, h, n0 string // batch element, query head, first key of the block
	mlo, mhi string // query blocks [mlo, mhi) that see the key block
	above    string // a query tile at m0 needs the mask iff m0 > above || m0 < below
	below    string
	kbounds  [2][2]string // [lo, hi) of the query rows that see keys keyRow, keyRow+8
	qc       *tileCopy
	qSrc     copySrc
	doSrc    copySrc
	stat     statCopy
	dK, dV   [][4]string
	ST, dPT  [][4]string // Sᵀ (then P) and dPᵀ (then dS) of the warp's keys
	kf, vf   [][4]string // K and V fragments, when in registers
	kW       string      // shared address of the warp's first K row
	keyRow   string      // key of accumulator rows g (+8)
	colOff   string      // 2t
	dq       dqAtomic
	loop     *stagedLoop
}

// statCopy is the 4-byte cp.async copy of a stage's LSE and dsum values:
// threads [0, Br) copy LSE rows, [Br, 2Br) dsum rows (DsumOff = LSEOff + 4·Br).
type statCopy struct {
	on   string // pred: this thread copies
	row  string // .u32: its row within the block
	src  string // .u64: row 0 of its LSE or dsum row
	soff string // .u32: smem + 4·tid
}

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
// dQ = dS·K (each a 16-row × DQCols part) to the padded float32
// accumulator with red.global.add.f32, no bounds predicate. dK and dV are
// written in float32 per query head.
func backward(dt dtype, c tile.Bwd, atomicDQ bool) *Kernel {
	k := newKernel(c.Name(dt.name, atomicDQ), c.Threads())
	f := &bwdKernel{gen: newGen(k, dt), c: c, atomic: atomicDQ}
	f.declare(tile.BwdParams)
	done := k.newLabel("done")
	f.setup(done)
	f.state()
	f.finish(f.mlo, f.mhi, done, func() {
		f.prologue()
		f.top(f.loop, f.mhi, f.issueQ)
		sb := k.rOp("add.u32", f.smem, f.loop.stage)
		m0 := k.rOp("shl.b32", f.loop.n, imm(log2(c.Br)))
		for q0 := 0; q0 < c.Br; q0 += c.QSub {
			f.scores(sb, q0)
			f.probGrad(sb, q0)
			f.maskGrads(m0, q0)
			f.gradKV(sb, q0)
			if atomicDQ {
				f.stageDS(q0)
			}
		}
		if atomicDQ {
			f.accumulateDQ(m0)
		}
		f.bottom(f.loop)
	}, f.epilogue)
	return k
}

// setup reads the block's coordinates, geometry and parameters, and leaves
// through done when the block has no key.
func (f *bwdKernel) setup(done string) {
	c := f.c
	nb := f.blockIndex(false)
	f.h, f.b, f.s, f.n0 = f.blockStart(nb, c.Bc(), true, done)
	f.mask = f.loadMask()
	f.mlo, f.mhi = f.queryBlocks(f.mask, f.s, f.n0, c.Bc(), c.Br)
	f.above, f.below = f.queryTileThresholds(f.mask, f.s, f.n0, c.Br, c.Bc())
}

// state allocates the dK and dV accumulators and the warp's addresses the
// epilogue needs too (computed before the branch to it).
func (f *bwdKernel) state() {
	k, c := f.k, f.c
	k.comment("dK, dV accumulators")
	f.dK = f.acc4(c.D / 8)
	f.dV = f.acc4(c.D / 8)
	f.ST = f.regs4(c.QSub / 8)
	f.dPT = f.regs4(c.QSub / 8)
	wrow := k.rOp("shl.b32", f.warp, "4")
	f.kW = k.rOp("mad.lo.u32", wrow, imm(c.RowChunks()*tile.ChunkBytes), f.smem)
	f.keyRow = k.rOp("add.u32", f.n0, wrow)
	f.keyRow = k.rOp("add.u32", f.keyRow, f.g)
	f.colOff = k.rOp("shl.b32", f.t, "1")
	for rh := range 2 {
		key := k.rOp("add.u32", f.keyRow, imm(8*rh))
		f.kbounds[rh][0], f.kbounds[rh][1] = f.keyBounds(f.mask, f.s, key)
	}
}

// prologue copies the block's K and V and the first query block's stage
// (one group), sets up the loop and, when they live in registers, loads the
// warp's K and V fragments.
func (f *bwdKernel) prologue() {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	kh := k.rOp("div.u32", f.h, f.ld(".u32", "group"))
	qRS, kRS := f.ld(".u32", "q_rs"), f.ld(".u32", "k_rs")
	qBase := f.rowBase("q", f.b, "q_bs", f.s.qStart, qRS, f.h, c.D, 2)
	doBase := f.rowBase("do", f.b, "q_bs", f.s.qStart, qRS, f.h, c.D, 2)
	kBase := f.rowBase("k", f.b, "k_bs", f.s.kStart, kRS, kh, c.D, 2)
	vBase := f.rowBase("v", f.b, "k_bs", f.s.kStart, kRS, kh, c.D, 2)
	kvc := f.newTileCopy(c.Bc(), rc, k.rOp("shl.b32", kRS, "1"), f.s.sk)
	f.copyTile(kvc, f.newSrc(kvc, kBase, f.n0), f.n0, kvc.soff, c.KOff())
	f.copyTile(kvc, f.newSrc(kvc, vBase, f.n0), f.n0, kvc.soff, c.VOff())
	f.qc = f.newTileCopy(c.Br, rc, k.rOp("shl.b32", qRS, "1"), f.s.sq)
	m0 := k.rOp("shl.b32", f.mlo, imm(log2(c.Br)))
	f.qSrc = f.newSrc(f.qc, qBase, m0)
	f.doSrc = f.newSrc(f.qc, doBase, m0)
	f.stat = f.newStatCopy()
	f.issueQ(f.mlo, "0")
	k.op("cp.async.commit_group")
	f.loop = f.newLoop(f.mlo, c.StageBytes())
	if f.atomic {
		f.dq = f.newDQAtomic()
	}
	if !c.KVInRegs() {
		return
	}
	k.op("cp.async.wait_group 0")
	k.op("bar.sync 0")
	for ks := range c.D / 16 {
		f.kf = append(f.kf, f.ldsm(f.kW, c.KOff(), rc, tile.PatternRowMajor, 0, ks*16, false))
		f.vf = append(f.vf, f.ldsm(f.kW, c.VOff(), rc, tile.PatternRowMajor, 0, ks*16, false))
	}
}

func (f *bwdKernel) newStatCopy() statCopy {
	k, c := f.k, f.c
	lseRow, dsumRow := f.statRows(f.b, f.h, f.s.qStart, true)
	var sc statCopy
	sc.on = k.pOp("setp.lt.u32", f.tid, imm(2*c.Br))
	isDsum := k.pOp("setp.ge.u32", f.tid, imm(c.Br))
	sc.row = k.rOp("and.b32", f.tid, imm(c.Br-1))
	sc.src = k.rdOp("selp.b64", dsumRow, lseRow, isDsum)
	sc.soff = k.rOp("shl.b32", f.tid, "2")
	sc.soff = k.rOp("add.u32", sc.soff, f.smem)
	return sc
}

// issueQ copies query block m's Q, dO, LSE and dsum rows into the stage at
// byte offset stage (rows past sq zero-filled).
func (f *bwdKernel) issueQ(m, stage string) {
	k, c := f.k, f.c
	m0 := k.rOp("shl.b32", m, imm(log2(c.Br)))
	sb := k.rOp("add.u32", f.qc.soff, stage)
	f.copyTile(f.qc, f.qSrc, m0, sb, c.QOff(0))
	f.copyTile(f.qc, f.doSrc, m0, sb, c.DOOff(0))
	r := k.rOp("add.u32", m0, f.stat.row)
	ok := k.pOp("setp.lt.u32", r, f.s.sq)
	sz := k.rOp("selp.u32", "4", "0", ok)
	r = k.rOp("selp.u32", r, "0", ok)
	a := k.RD()
	k.op("mad.wide.u32 %s, %s, 4, %s", a, r, f.stat.src)
	d := k.rOp("add.u32", f.stat.soff, stage)
	k.op("@%s cp.async.ca.shared.global [%s+%d], [%s], 4, %s", f.stat.on, d, c.LSEOff(0), a, sz)
}

// scores computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for the warp's 16 keys and the
// stage's queries [q0, q0+QSub).
func (f *bwdKernel) scores(sb string, q0 int) {
	c, rc := f.c, f.c.RowChunks()
	f.k.comment("S^T = K Q^T, dP^T = V dO^T")
	f.scorePair(c.D, c.QSub, [2][][4]string{f.ST, f.dPT}, func(ks int) (ka, va [4]string) {
		if f.kf != nil {
			return f.kf[ks], f.vf[ks]
		}
		return f.ldsm(f.kW, c.KOff(), rc, tile.PatternRowMajor, 0, ks*16, false),
			f.ldsm(f.kW, c.VOff(), rc, tile.PatternRowMajor, 0, ks*16, false)
	}, func(dO bool, ks, j int) [4]string {
		off := c.QOff(0)
		if dO {
			off = c.DOOff(0)
		}
		return f.ldsm(sb, off, rc, tile.PatternColMajor, q0+j*16, ks*16, false)
	})
}

// probGrad turns Sᵀ and dPᵀ into P and dS with the per-query (column) LSE
// and dsum of the stage's queries [q0, q0+QSub).
func (f *bwdKernel) probGrad(sb string, q0 int) {
	k, c := f.k, f.c
	k.comment("P and dS")
	qnt := c.QSub / 8
	nl := make([][2]string, qnt)
	ds := make([][2]string, qnt)
	colS := k.rOp("shl.b32", f.t, "3") // (2t)·4 bytes
	colS = k.rOp("add.u32", colS, sb)
	for j := range qnt {
		a, b := k.F(), k.F()
		k.op("ld.shared.v2.f32 {%s, %s}, [%s+%d]", a, b, colS, c.LSEOff(0)+4*q0+32*j)
		nl[j] = [2]string{f.negLse2(a), f.negLse2(b)}
		d0, d1 := k.F(), k.F()
		k.op("ld.shared.v2.f32 {%s, %s}, [%s+%d]", d0, d1, colS, c.DsumOff(0)+4*q0+32*j)
		ds[j] = [2]string{d0, d1}
	}
	f.gen.probGrad(f.loadScore(), f.ld(".f32", "scale"), f.ST, f.dPT,
		func(j, i int) string { return nl[j][i&1] },
		func(j, i int) string { return ds[j][i&1] })
}

// maskGrads zeroes P and dS of hidden pairs, in the tiles that may hold one.
func (f *bwdKernel) maskGrads(m0 string, q0 int) {
	k, c := f.k, f.c
	need := f.needsMask(m0, f.above, f.below)
	nomask := k.newLabel("nomask")
	k.op("@!%s bra.uni %s", need, nomask)
	colBase := k.rOp("add.u32", m0, f.colOff)
	for rh := range 2 {
		lo := k.rOp("sub.s32", f.kbounds[rh][0], colBase)
		hi := k.rOp("sub.s32", f.kbounds[rh][1], colBase)
		for j := range c.QSub / 8 {
			for e := range 2 {
				p := f.hidden(lo, hi, q0+8*j+e)
				f.zeroWhere(p, f.ST[j][2*rh+e], f.dPT[j][2*rh+e])
			}
		}
	}
	k.label(nomask)
}

// gradKV accumulates dV += Pᵀ·dO and dK += dSᵀ·Q over the queries
// [q0, q0+QSub).
func (f *bwdKernel) gradKV(sb string, q0 int) {
	c, rc := f.c, f.c.RowChunks()
	f.k.comment("dV += P^T dO, dK += dS^T Q")
	for kk := range c.QSub / 16 {
		pa := f.aFromC(f.ST, kk)
		sa := f.aFromC(f.dPT, kk)
		for j := range c.D / 16 {
			ob := f.ldsm(sb, c.DOOff(0), rc, tile.PatternRowMajor, q0+kk*16, j*16, true)
			f.mma16(f.dV[2*j:], pa, ob, false)
			qb := f.ldsm(sb, c.QOff(0), rc, tile.PatternRowMajor, q0+kk*16, j*16, true)
			f.mma16(f.dK[2*j:], sa, qb, false)
		}
	}
}

// epilogue writes the warp's dK and dV rows, float32, per query head.
func (f *bwdKernel) epilogue() {
	k, c := f.k, f.c
	k.comment("epilogue")
	h := k.rOp("mov.u32", "%ctaid.y")
	s := f.seq(k.rOp("mov.u32", "%ctaid.z")) // re-read rather than held across the loop
	keyRow := k.rOp("mul.lo.u32", k.rOp("mov.u32", "%ctaid.x"), imm(c.Bc()))
	keyRow = k.rOp("mad.lo.u32", f.warp, "16", keyRow)
	keyRow = k.rOp("add.u32", keyRow, f.g)
	dkvRS := f.ld(".u32", "dkv_rs")
	b := k.rOp("mov.u32", "%ctaid.z")
	dkBase := f.rowBase("dk", b, "dkv_bs", s.kStart, dkvRS, h, c.D, 4)
	dvBase := f.rowBase("dv", b, "dkv_bs", s.kStart, dkvRS, h, c.D, 4)
	dkvRB := k.rOp("shl.b32", dkvRS, "2")
	colB := k.rdOp("mul.wide.u32", f.t, "8")
	dkT := k.rdOp("add.s64", dkBase, colB)
	dvT := k.rdOp("add.s64", dvBase, colB)
	for rh := range 2 {
		key := k.rOp("add.u32", keyRow, imm(8*rh))
		ok := k.pOp("setp.lt.u32", key, s.sk)
		ak, av := k.RD(), k.RD()
		k.op("mad.wide.u32 %s, %s, %s, %s", ak, key, dkvRB, dkT)
		k.op("mad.wide.u32 %s, %s, %s, %s", av, key, dkvRB, dvT)
		for j := range c.D / 8 {
			k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, ak, 32*j, f.dK[j][2*rh], f.dK[j][2*rh+1])
			k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, av, 32*j, f.dV[j][2*rh], f.dV[j][2*rh+1])
		}
	}
}
