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
	qc       *tileCopy
	qSrc     copySrc
	doSrc    copySrc
	stat     statCopy
	dK, dV   [2][][4]string // [mt]: the warp's 32 keys × D/2 columns
	ST, dPT  [2][][4]string // [mt]: Sᵀ (then P) and dPᵀ (then dS), 32 keys × Br/2 queries
	half     string         // w / KeyGroups: the warp's query half (Sᵀ) and column half (dK, dV)
	kW       string         // shared address of the warp's first K row
	pW       string         // shared address of the warp's first Pᵀ (and dSᵀ) row
	stRow    string         // pW + g·Br/8·16 + 4t: where the thread stores Pᵀ and dSᵀ
	gq       string         // g ^ (half·Br/16): the swizzled chunk of the thread's first stored column
	qW       string         // half·Br/2 rows of Q and dO in bytes
	dW       string         // half·D/2 columns in bytes (when D/2 is a whole swizzle group)
	dLanes   []string       // else: lane offsets of the warp's 16-column blocks of dO and Q
	keyRow   string         // key of accumulator rows g (+8) of m-tile 0
	colOff   string         // 2t
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
// block of Bc keys, query head, batch element), walking the query blocks
// that see the key block (Q, dO, LSE and dsum double-buffered in shared
// memory), with flash-attn 2's warp layouts (tile.Bwd). Per query block:
//
//	Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, P = 2^(y - LSE·log2 e), dS = P∘(dP - dsum)·scale
//	    (warp: 32 keys × Br/2 queries), Pᵀ and dSᵀ to shared memory
//	dV += Pᵀ·dO, dK += dSᵀ·Q (warp: 32 keys × D/2 columns, in registers)
//
// and with atomicDQ the warps add dQ = dS·K (each a 32-row × DQCols part)
// to the padded float32 accumulator with red.global.add.f32, no bounds
// predicate. dK and dV are written in float32 per query head.
func backward(dt dtype, c tile.Bwd, atomicDQ bool) *Kernel {
	f := &bwdKernel{gen: newKernelGen(c.Name(dt.name, atomicDQ), c.Threads(), dt, tile.BwdParams), c: c, atomic: atomicDQ}
	k := f.k
	done := k.newLabel("done")
	f.setup(done)
	f.state()
	f.finish(f.mlo, f.mhi, done, func() {
		f.prologue()
		f.top(f.loop, f.mhi, f.issueQ)
		sb := k.rOp("add.u32", f.smem, f.loop.stage)
		m0 := k.rOp("shl.b32", f.loop.n, imm(log2(c.Br)))
		f.scores(sb)
		f.probGrad(sb)
		f.maskGrads(m0)
		f.stagePDS()
		k.op("bar.sync 0")
		f.gradKV(sb)
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
	for mt := range 2 {
		f.dK[mt] = f.acc4(c.D / 16)
		f.dV[mt] = f.acc4(c.D / 16)
		f.ST[mt] = f.regs4(c.Br / 16)
		f.dPT[mt] = f.regs4(c.Br / 16)
	}
	kg := k.rOp("and.b32", f.warp, imm(c.KeyGroups()-1))
	f.half = k.rOp("shr.u32", f.warp, imm(log2(c.KeyGroups())))
	krow := k.rOp("shl.b32", kg, "5")
	f.kW = k.rOp("mad.lo.u32", krow, imm(c.RowChunks()*tile.ChunkBytes), f.smem)
	f.pW = k.rOp("mad.lo.u32", krow, imm(c.Br/8*tile.ChunkBytes), f.smem)
	f.stRow = k.rOp("add.u32", f.pW, f.stageRowOffset(c.Br/8))
	f.gq = k.rOp("xor.b32", f.g, k.rOp("mul.lo.u32", f.half, imm(c.Br/16)))
	f.qW = k.rOp("mul.lo.u32", f.half, imm(c.Br/2*c.RowChunks()*tile.ChunkBytes))
	if c.D/2%64 == 0 {
		f.dW = k.rOp("mul.lo.u32", f.half, imm(c.D))
	} else {
		for j := range c.D / 32 {
			c8 := k.rOp("mad.lo.u32", f.half, imm(c.D/16), imm(2*j))
			f.dLanes = append(f.dLanes, f.laneOffCol(tile.PatternRowMajor, c.RowChunks(), c8))
		}
	}
	f.keyRow = k.rOp("add.u32", f.n0, krow)
	f.keyRow = k.rOp("add.u32", f.keyRow, f.g)
	f.colOff = k.rOp("shl.b32", f.t, "1")
}

// prologue copies the block's K and V and the first query block's stage
// (one group) and sets up the loop.
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

// scores computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for the warp's 32 keys and
// the Br/2 queries of its half of the stage's query block.
func (f *bwdKernel) scores(sb string) {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	k.comment("S^T = K Q^T, dP^T = V dO^T")
	qb := k.rOp("add.u32", sb, f.qW)
	for ks := range c.D / 16 {
		var ka, va [2][4]string
		for mt := range 2 {
			ka[mt] = f.ldsm(f.kW, c.KOff(), rc, tile.PatternRowMajor, 16*mt, ks*16, false)
			va[mt] = f.ldsm(f.kW, c.VOff(), rc, tile.PatternRowMajor, 16*mt, ks*16, false)
		}
		for j := range c.Br / 32 {
			qf := f.ldsm(qb, c.QOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			of := f.ldsm(qb, c.DOOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			for mt := range 2 {
				f.mma16(f.ST[mt][2*j:], ka[mt], qf, ks == 0)
				f.mma16(f.dPT[mt][2*j:], va[mt], of, ks == 0)
			}
		}
	}
}

// probGrad turns Sᵀ and dPᵀ into P and dS with the per-query (column) LSE
// and dsum of the warp's queries.
func (f *bwdKernel) probGrad(sb string) {
	k, c := f.k, f.c
	k.comment("P and dS")
	qnt := c.Br / 16
	nl := make([][2]string, qnt)
	ds := make([][2]string, qnt)
	colS := k.rOp("shl.b32", f.t, "3") // (2t)·4 bytes
	colS = k.rOp("add.u32", colS, sb)
	colS = k.rOp("mad.lo.u32", f.half, imm(c.Br/2*4), colS)
	for j := range qnt {
		a, b := k.F(), k.F()
		k.op("ld.shared.v2.f32 {%s, %s}, [%s+%d]", a, b, colS, c.LSEOff(0)+32*j)
		nl[j] = [2]string{f.negLse2(a), f.negLse2(b)}
		d0, d1 := k.F(), k.F()
		k.op("ld.shared.v2.f32 {%s, %s}, [%s+%d]", d0, d1, colS, c.DsumOff(0)+32*j)
		ds[j] = [2]string{d0, d1}
	}
	f.gen.probGrad(f.loadScore(), f.ld(".f32", "scale"), flat(f.ST[:]), flat(f.dPT[:]),
		func(j, i int) string { return nl[j%qnt][i&1] },
		func(j, i int) string { return ds[j%qnt][i&1] })
}

// maskGrads zeroes P and dS of hidden pairs, in the tiles that may hold one.
func (f *bwdKernel) maskGrads(m0 string) {
	k, c := f.k, f.c
	nomask := f.skipUnlessMasked(m0, f.above, f.below)
	colBase := k.rOp("add.u32", m0, f.colOff)
	colBase = k.rOp("mad.lo.u32", f.half, imm(c.Br/2), colBase)
	for mt := range 2 {
		for rh := range 2 {
			key := k.rOp("add.u32", f.keyRow, imm(16*mt+8*rh))
			klo, khi := f.keyBounds(f.mask, f.s, key)
			lo := k.rOp("sub.s32", klo, colBase)
			hi := k.rOp("sub.s32", khi, colBase)
			for j := range c.Br / 16 {
				for e := range 2 {
					p := f.hidden(lo, hi, 8*j+e)
					f.zeroWhere(p, f.ST[mt][j][2*rh+e], f.dPT[mt][j][2*rh+e])
				}
			}
		}
	}
	k.label(nomask)
}

// stagePDS stores the warp's P and dS, as rows of the Pᵀ and dSᵀ tiles
// (tile.ElemOffset: the thread's element pair (key g + 8·rh, query 8j + 2t)
// of the warp's block at chunk (half·Br/16 + j) ^ g).
func (f *bwdKernel) stagePDS() {
	k, c := f.k, f.c
	k.comment("P^T, dS^T to shared memory")
	rowB := c.Br / 8 * tile.ChunkBytes
	for j := range c.Br / 16 {
		a := k.rOp("xor.b32", f.gq, imm(j))
		a = k.rOp("mad.lo.u32", a, imm(tile.ChunkBytes), f.stRow)
		for mt := range 2 {
			for rh := range 2 {
				off := (16*mt + 8*rh) * rowB
				p := f.pack(f.ST[mt][j][2*rh], f.ST[mt][j][2*rh+1])
				k.op("st.shared.b32 [%s+%d], %s", a, c.PTOff()+off, p)
				d := f.pack(f.dPT[mt][j][2*rh], f.dPT[mt][j][2*rh+1])
				k.op("st.shared.b32 [%s+%d], %s", a, c.DSOff()+off, d)
			}
		}
	}
}

// gradKV accumulates dV += Pᵀ·dO and dK += dSᵀ·Q for the warp's 32 keys
// and D/2 columns over the query block, Pᵀ and dSᵀ from shared memory.
func (f *bwdKernel) gradKV(sb string) {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	k.comment("dV += P^T dO, dK += dS^T Q")
	var db string
	if f.dW != "" {
		db = k.rOp("add.u32", sb, f.dW)
	}
	for kk := range c.Br / 16 {
		var pa, sa [2][4]string
		for mt := range 2 {
			pa[mt] = f.ldsm(f.pW, c.PTOff(), c.Br/8, tile.PatternRowMajor, 16*mt, kk*16, false)
			sa[mt] = f.ldsm(f.pW, c.DSOff(), c.Br/8, tile.PatternRowMajor, 16*mt, kk*16, false)
		}
		for j := range c.D / 32 {
			var ob, qb [4]string
			if db != "" {
				ob = f.ldsm(db, c.DOOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
				qb = f.ldsm(db, c.QOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
			} else {
				row := tile.BlockBase(kk*16, 0, rc)
				ob = f.ldsmAt(sb, f.dLanes[j], c.DOOff(0)+row, true)
				qb = f.ldsmAt(sb, f.dLanes[j], c.QOff(0)+row, true)
			}
			for mt := range 2 {
				f.mma16(f.dV[mt][2*j:], pa[mt], ob, false)
				f.mma16(f.dK[mt][2*j:], sa[mt], qb, false)
			}
		}
	}
}

// epilogue writes the warp's dK and dV rows (its 32 keys, D/2 columns),
// float32, per query head.
func (f *bwdKernel) epilogue() {
	k, c := f.k, f.c
	k.comment("epilogue")
	h := k.rOp("mov.u32", "%ctaid.y")
	s := f.seq(k.rOp("mov.u32", "%ctaid.z")) // re-read rather than held across the loop
	kg := k.rOp("and.b32", f.warp, imm(c.KeyGroups()-1))
	half := k.rOp("shr.u32", f.warp, imm(log2(c.KeyGroups())))
	keyRow := k.rOp("mul.lo.u32", k.rOp("mov.u32", "%ctaid.x"), imm(c.Bc()))
	keyRow = k.rOp("mad.lo.u32", kg, "32", keyRow)
	keyRow = k.rOp("add.u32", keyRow, f.g)
	dkvRS := f.ld(".u32", "dkv_rs")
	b := k.rOp("mov.u32", "%ctaid.z")
	dkBase := f.rowBase("dk", b, "dkv_bs", s.kStart, dkvRS, h, c.D, 4)
	dvBase := f.rowBase("dv", b, "dkv_bs", s.kStart, dkvRS, h, c.D, 4)
	dkvRB := k.rOp("shl.b32", dkvRS, "2")
	col := k.rOp("mad.lo.u32", half, imm(c.D/2), k.rOp("shl.b32", f.t, "1"))
	colB := k.rdOp("mul.wide.u32", col, "4")
	dkT := k.rdOp("add.s64", dkBase, colB)
	dvT := k.rdOp("add.s64", dvBase, colB)
	for mt := range 2 {
		for rh := range 2 {
			key := k.rOp("add.u32", keyRow, imm(16*mt+8*rh))
			ok := k.pOp("setp.lt.u32", key, s.sk)
			ak, av := k.RD(), k.RD()
			k.op("mad.wide.u32 %s, %s, %s, %s", ak, key, dkvRB, dkT)
			k.op("mad.wide.u32 %s, %s, %s, %s", av, key, dkvRB, dvT)
			for j := range c.D / 16 {
				k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, ak, 32*j, f.dK[mt][j][2*rh], f.dK[mt][j][2*rh+1])
				k.op("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, av, 32*j, f.dV[mt][j][2*rh], f.dV[mt][j][2*rh+1])
			}
		}
	}
}
