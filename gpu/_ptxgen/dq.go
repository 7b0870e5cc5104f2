package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// dqKernel is the state of the deterministic dQ kernel's generation.
type dqKernel struct {
	*gen
	c        tile.DQ
	s        seqInfo
	mask     maskParams
	b, h, m0 string
	nlo, nhi string
	above    string // a key tile at n0 needs the mask iff n0 > above || n0 < below
	below    string
	dqBase   string
	qRB      string
	nl, dsum [2]string // -LSE·log2 e and dsum of rows g, g+8
	dq       [][4]string
	S, dP    [][4]string
	qf, of   [][4]string // Q and dO fragments, when in registers
	qW       string      // shared address of the warp's first Q row
	rowG     string      // m0 + 16w + g
	colOff   string
	kvCopies
}

// dqKernelGen generates the deterministic dQ kernel: one block per (query
// block, head, batch element), heaviest first, like the forward pass; each
// warp owns 16 query rows and walks the key blocks they see, recomputing
// S = Q·Kᵀ, dP = dO·Vᵀ, P and dS, and accumulating dQ = dS·K in registers;
// dQ is written once, in the input type, staged in shared memory and
// written with 16-byte stores, with no atomics. Per key block n:
//
//	wait for K(n), V(n); barrier; copy K(n+1) into the other K buffer
//	S = Q·K(n)ᵀ, dP = dO·V(n)ᵀ; barrier; copy V(n+1)
//	P, dS; dQ += dS·K(n)
func dqKernelGen(dt dtype, c tile.DQ) *Kernel {
	f := &dqKernel{gen: newKernelGen(c.Name(dt.name), c.Threads(), dt, tile.DQParams), c: c}
	k := f.k
	done := k.newLabel("done")
	f.setup(done)
	f.rowStats()
	f.dq = f.acc4(c.D / 8)
	f.S, f.dP = f.regs4(c.Bc/8), f.regs4(c.Bc/8)
	f.finish(f.nlo, f.nhi, done, func() {
		f.prologue()
		f.loop()
	}, f.epilogue)
	return k
}

// setup reads the block's coordinates, geometry and parameters, and leaves
// through done when the block has no query row.
func (f *dqKernel) setup(done string) {
	k, c := f.k, f.c
	mb := f.blockIndex(true)
	f.h, f.b, f.s, f.m0 = f.blockStart(mb, c.Br(), false, done)
	qRS := f.ld(".u32", "q_rs")
	f.qRB = k.rOp("shl.b32", qRS, "1")
	f.dqBase = f.rowBase("dq", f.b, "q_bs", f.s.qStart, qRS, f.h, c.D, 2)
	f.mask = f.loadMask()
	f.nlo, f.nhi = f.keyBlocks(f.mask, f.s, f.m0, c.Br(), c.Bc)
	f.above, f.below = f.keyTileThresholds(f.mask, f.s, f.m0, c.Br(), c.Bc)
	wrow := k.rOp("shl.b32", f.warp, "4")
	f.qW = k.rOp("mad.lo.u32", wrow, imm(c.RowChunks()*tile.ChunkBytes), f.smem)
	f.rowG = k.rOp("add.u32", f.m0, wrow)
	f.rowG = k.rOp("add.u32", f.rowG, f.g)
	f.colOff = k.rOp("shl.b32", f.t, "1")
}

// rowStats loads the LSE (as -LSE·log2 e) and dsum of the thread's rows.
func (f *dqKernel) rowStats() {
	k := f.k
	lseRow, dsumRow := f.statRows(f.b, f.h, f.s.qStart, true)
	for rh := range 2 {
		r := k.rOp("add.u32", f.rowG, imm(8*rh))
		ok := k.pOp("setp.lt.u32", r, f.s.sq)
		l := k.fOp("mov.f32", zeroF)
		d := k.fOp("mov.f32", zeroF)
		a := k.rdOp("mul.wide.u32", r, "4")
		k.op("@%s ld.global.f32 %s, [%s]", ok, l, k.rdOp("add.s64", lseRow, a))
		k.op("@%s ld.global.f32 %s, [%s]", ok, d, k.rdOp("add.s64", dsumRow, a))
		f.nl[rh], f.dsum[rh] = f.negLse2(l), d
	}
}

// prologue copies Q and dO (one group), K(nlo) into K buffer 0 (another)
// and V(nlo) (a third), and loads the Q and dO fragments when they live in
// registers.
func (f *dqKernel) prologue() {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	kh := k.rOp("div.u32", f.h, f.ld(".u32", "group"))
	kRS := f.ld(".u32", "k_rs")
	qRS := f.ld(".u32", "q_rs")
	qBase := f.rowBase("q", f.b, "q_bs", f.s.qStart, qRS, f.h, c.D, 2)
	doBase := f.rowBase("do", f.b, "q_bs", f.s.qStart, qRS, f.h, c.D, 2)
	kBase := f.rowBase("k", f.b, "k_bs", f.s.kStart, kRS, kh, c.D, 2)
	vBase := f.rowBase("v", f.b, "k_bs", f.s.kStart, kRS, kh, c.D, 2)
	qc := f.newTileCopy(c.Br(), rc, f.qRB, f.s.sq)
	f.copyTile(qc, f.newSrc(qc, qBase, f.m0), f.m0, qc.soff, c.QOff())
	f.copyTile(qc, f.newSrc(qc, doBase, f.m0), f.m0, qc.soff, c.DOOff())
	k.op("cp.async.commit_group")
	n0 := f.startKV(&f.kvCopies, c.Bc, rc, k.rOp("shl.b32", kRS, "1"), f.s.sk, f.nlo, kBase, vBase, c.KOff(0))
	k.op("cp.async.commit_group")
	f.copyTile(f.kv, f.vSrc, n0, f.kv.soff, c.VOff())
	k.op("cp.async.commit_group")
	if !c.QInRegs() {
		return
	}
	f.waitCopies(2)
	for ks := range c.D / 16 {
		f.qf = append(f.qf, f.ldsm(f.qW, c.QOff(), rc, tile.PatternRowMajor, 0, ks*16, false))
		f.of = append(f.of, f.ldsm(f.qW, c.DOOff(), rc, tile.PatternRowMajor, 0, ks*16, false))
	}
}

// loop emits the main loop over key blocks [nlo, nhi); kb is the byte
// offset of block n's K buffer (0 or Bc·D·2).
func (f *dqKernel) loop() {
	k, c := f.k, f.c
	n := k.rOp("mov.u32", f.nlo)
	kb := k.rOp("mov.u32", "0")
	kBytes := c.KOff(1) - c.KOff(0)
	loopL, n0, next, more := f.keyLoopTop(n, f.nhi, c.Bc)
	n1 := k.rOp("add.u32", n0, imm(c.Bc))
	f.prefetch(more, func() {
		other := k.rOp("add.u32", f.kv.soff, k.rOp("xor.b32", kb, imm(kBytes)))
		f.copyTile(f.kv, f.kSrc, n1, other, c.KOff(0))
	})
	ks := k.rOp("add.u32", f.smem, kb)
	f.scores(ks)
	k.op("bar.sync 0")
	f.prefetch(more, func() { f.copyTile(f.kv, f.vSrc, n1, f.kv.soff, c.VOff()) })
	k.comment("P and dS")
	f.probGrad(f.loadScore(), f.ld(".f32", "scale"), f.S, f.dP,
		func(j, i int) string { return f.nl[i>>1] },
		func(j, i int) string { return f.dsum[i>>1] })
	f.maskDS(n0)
	f.gradQ(ks)
	k.op("mov.u32 %s, %s", n, next)
	k.op("xor.b32 %s, %s, %d", kb, kb, kBytes)
	k.op("@%s bra %s", more, loopL)
}

// prefetch emits issue() under predicate more, then commits a group (empty
// without it, so that group counts stay the same).
func (f *dqKernel) prefetch(more string, issue func()) {
	k := f.k
	skip := k.newLabel("noprefetch")
	k.op("@!%s bra %s", more, skip)
	issue()
	k.label(skip)
	k.op("cp.async.commit_group")
}

// scores computes S = Q·Kᵀ and dP = dO·Vᵀ for the warp's 16 rows; ks is
// the shared address of K's buffer.
func (f *dqKernel) scores(ks string) {
	c, rc := f.c, f.c.RowChunks()
	f.k.comment("S = Q K^T, dP = dO V^T")
	f.scorePair(c.D, c.Bc, [2][][4]string{f.S, f.dP}, func(s int) (qa, oa [4]string) {
		if f.qf != nil {
			return f.qf[s], f.of[s]
		}
		return f.ldsm(f.qW, c.QOff(), rc, tile.PatternRowMajor, 0, s*16, false),
			f.ldsm(f.qW, c.DOOff(), rc, tile.PatternRowMajor, 0, s*16, false)
	}, func(v bool, s, j int) [4]string {
		if v {
			return f.ldsm(f.smem, c.VOff(), rc, tile.PatternColMajor, j*16, s*16, false)
		}
		return f.ldsm(ks, c.KOff(0), rc, tile.PatternColMajor, j*16, s*16, false)
	})
}

// maskDS zeroes dS of hidden pairs, in the tiles that may hold one.
func (f *dqKernel) maskDS(n0 string) {
	k, c := f.k, f.c
	nomask := f.skipUnlessMasked(n0, f.above, f.below)
	colBase := k.rOp("add.u32", n0, f.colOff)
	for rh := range 2 {
		row := k.rOp("add.u32", f.rowG, imm(8*rh))
		lo, hi := f.rowBounds(f.mask, f.s, row, colBase)
		for j := range c.Bc / 8 {
			for e := range 2 {
				f.zeroWhere(f.hidden(lo, hi, 8*j+e), f.dP[j][2*rh+e])
			}
		}
	}
	k.label(nomask)
}

// gradQ accumulates dQ += dS·K with dS from the dP accumulators.
func (f *dqKernel) gradQ(ks string) {
	c, rc := f.c, f.c.RowChunks()
	f.k.comment("dQ += dS K")
	for kk := range c.Bc / 16 {
		sa := f.aFromC(f.dP, kk)
		for j := range c.D / 16 {
			kb := f.ldsm(ks, c.KOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
			f.mma16(f.dq[2*j:], sa, kb, false)
		}
	}
}

// epilogue stages the warp's dQ rows in its own rows of the Q tile and
// writes them in the input type with 16-byte stores.
func (f *dqKernel) epilogue() {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	k.comment("epilogue: dQ in the input type")
	f.stageRows(f.dq, 0, f.stageOffsets(rc, c.D/8), f.qW, c.QOff(), rc)
	first := k.rOp("sub.u32", f.rowG, f.g)
	valid := k.rOp("sub.s32", f.s.sq, first)
	rowAddr := k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", rowAddr, first, f.qRB, f.dqBase)
	f.storeStaged(f.qW, c.QOff(), rc, rowAddr, f.qRB, valid, nil)
}
