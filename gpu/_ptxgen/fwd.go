package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// fwdKernel is the state of the forward kernel's generation.
type fwdKernel struct {
	*gen
	c        tile.Fwd
	s        seqInfo
	mask     maskParams
	b, h, m0 string // batch element, head, first query row of the block
	nlo, nhi string // key blocks [nlo, nhi) the block's rows see
	above    string // a key tile at n0 needs the mask iff n0 > above || n0 < below
	below    string
	qBase    string // global address of the sequence's Q row 0 (this head)
	kBase    string
	vBase    string
	qRB, kRB string // row strides in bytes
	kvCopies
	o          [][][4]string // [mt][n-tile] O accumulators
	mrow, lrow [][2]string   // [mt][row half]: running max (log2 units), partial row sum
	S          [][][4]string // [mt][n-tile] scores, then P
	qf         [][][4]string // [mt][k-step] Q fragments when in registers
	qW         string        // shared address of the warp's first Q row
	rowG       string        // m0 + warp rows + g: this thread's first row
	colOff     string        // 2t
}

// forward generates the FlashAttention-2 forward kernel: one block per
// (query block, head, batch element), heaviest first; the block's warps
// split the query rows; K and V tiles are loaded with cp.async,
// single-buffered and staggered or double-buffered (c.KVDouble); S = Q·Kᵀ
// and O += P·V run on the tensor cores; the online softmax stays in
// registers in log2 units with the scale folded into its exp2's FMA; O is
// divided by the row sum once at the end, staged in shared memory and
// written with 16-byte stores; LSE is written in natural-log units.
//
// The split-KV variant (c.Split, tile.FwdSplitConfig) runs the same code
// over its part of the block's key tiles (tile.SplitRange) and ends with
// splitEpilogue instead.
func forward(dt dtype, c tile.Fwd) *Kernel {
	k := newKernel(c.Name(dt.name), c.Threads())
	k.minBlocks = c.BlocksPerSM()
	f := &fwdKernel{gen: newGen(k, dt), c: c}
	if c.Split {
		f.declare(tile.FwdSplitParams)
	} else {
		f.declare(tile.FwdParams)
	}
	done := k.newLabel("done")
	f.setup(done)
	f.state()
	epilogue := f.epilogue
	if c.Split {
		epilogue = f.splitEpilogue
	}
	f.finish(f.nlo, f.nhi, done, func() {
		f.prologue()
		f.loop()
	}, epilogue)
	return k
}

// setup reads the block's coordinates, sequence geometry and parameters,
// and leaves through done when the block has no query row. The split-KV
// variant keeps its part of the key tiles.
func (f *fwdKernel) setup(done string) {
	k, c := f.k, f.c
	var mb, split string
	if c.Split {
		mb, split = f.splitIndex()
	} else {
		mb = f.blockIndex(true)
	}
	f.h, f.b, f.s, f.m0 = f.blockStart(mb, c.Br(), false, done)
	f.h = f.firstHead(f.h) // packed (pack.go): m0 = 0, the key range of rows [0, Br) covers every position

	kh := k.rOp("div.u32", f.h, f.ld(".u32", "group"))
	qRS, kRS := f.ld(".u32", "q_rs"), f.ld(".u32", "k_rs")
	f.qBase = f.rowBase("q", f.b, "q_bs", f.s.qStart, qRS, f.h, c.D, 2)
	f.kBase = f.rowBase("k", f.b, "k_bs", f.s.kStart, kRS, kh, c.D, 2)
	f.vBase = f.rowBase("v", f.b, "k_bs", f.s.kStart, kRS, kh, c.D, 2)
	f.qRB = k.rOp("shl.b32", qRS, "1")
	f.kRB = k.rOp("shl.b32", kRS, "1")
	f.mask = f.loadMask()
	f.nlo, f.nhi = f.keyBlocks(f.mask, f.s, f.m0, c.Br(), c.Bc)
	if c.Split {
		f.nlo, f.nhi = f.splitRange(f.nlo, f.nhi, split)
	}
	f.above, f.below = f.keyTileThresholds(f.mask, f.s, f.m0, c.Br(), c.Bc)
}

// state allocates the per-thread state, initialised: O accumulators, row
// max and partial row sums for rows g and g+8 of each m-tile, and the
// addresses the epilogue needs too (computed before the branch to it).
func (f *fwdKernel) state() {
	k, c := f.k, f.c
	k.comment("accumulators")
	f.o = make([][][4]string, c.MT)
	f.mrow = make([][2]string, c.MT)
	f.lrow = make([][2]string, c.MT)
	f.S = make([][][4]string, c.MT)
	for mt := range c.MT {
		f.o[mt] = f.acc4(c.D / 8)
		f.S[mt] = f.regs4(c.Bc / 8)
		for rh := range 2 {
			f.mrow[mt][rh] = k.fOp("mov.f32", negInf)
			f.lrow[mt][rh] = k.fOp("mov.f32", zeroF)
		}
	}
	wrow := k.rOp("mul.lo.u32", f.warp, imm(c.MT*16))
	f.qW = k.rOp("mad.lo.u32", wrow, imm(c.RowChunks()*tile.ChunkBytes), f.smem)
	f.rowG = k.rOp("add.u32", f.m0, wrow)
	f.rowG = k.rOp("add.u32", f.rowG, f.g)
	f.colOff = k.rOp("shl.b32", f.t, "1")
}

// prologue copies Q (one group; a packed block's rows from their heads,
// copyPackedQ) and K of block nlo (another; with KVDouble, V of block nlo
// too), and loads the Q fragments when they live in registers.
func (f *fwdKernel) prologue() {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	qc := f.newTileCopy(c.Br(), rc, f.qRB, f.s.sq)
	plain, copied := k.newLabel("qplain"), k.newLabel("qcopied")
	k.op("@%s bra.uni %s", k.pOp("setp.lt.u32", f.ld(".u32", "pack"), "2"), plain)
	f.copyPackedQ(qc, f.loadPacking(), f.s.sq, f.qBase, c.D, c.QOff())
	k.op("bra.uni %s", copied)
	k.label(plain)
	f.copyTile(qc, f.newSrc(qc, f.qBase, f.m0), f.m0, qc.soff, c.QOff())
	k.label(copied)
	k.op("cp.async.commit_group")
	n0 := f.startKV(&f.kvCopies, c.Bc, rc, f.kRB, f.s.sk, f.nlo, f.kBase, f.vBase, c.KOff())
	if c.KVDouble {
		f.copyTile(f.kv, f.vSrc, n0, f.kv.soff, c.VOff())
	}
	k.op("cp.async.commit_group")
	if !c.QInRegs() {
		return
	}
	f.waitCopies(1)
	f.qf = make([][][4]string, c.MT)
	for mt := range c.MT {
		for ks := range c.D / 16 {
			f.qf[mt] = append(f.qf[mt], f.ldsm(f.qW, c.QOff(), rc, tile.PatternRowMajor, mt*16, ks*16, false))
		}
	}
}

// loop emits the main loop over key blocks n in [nlo, nhi):
//
//	wait for K(n); barrier; copy V(n)
//	S = Q·K(n)ᵀ, softcap, mask, online softmax
//	wait for V(n); barrier; copy K(n+1) if any
//	O += P·V(n)
//
// The first barrier also tells every warp is done with V(n-1) before V(n)
// overwrites it, the second that every warp is done with K(n). With
// KVDouble it is loopDouble.
func (f *fwdKernel) loop() {
	k, c := f.k, f.c
	if c.KVDouble {
		f.loopDouble()
		return
	}
	n := k.rOp("mov.u32", f.nlo)
	loopL := k.newLabel("loop")
	k.label(loopL)
	f.waitCopies(0)
	n0 := k.rOp("shl.b32", n, imm(log2(c.Bc)))
	f.copyTile(f.kv, f.vSrc, n0, f.kv.soff, c.VOff())
	k.op("cp.async.commit_group")
	f.tile(n0, f.smem)
	f.waitCopies(0)
	next := k.rOp("add.u32", n, "1")
	more := k.pOp("setp.lt.s32", next, f.nhi)
	skip := k.newLabel("nextk")
	k.op("@!%s bra %s", more, skip)
	f.copyTile(f.kv, f.kSrc, k.rOp("add.u32", n0, imm(c.Bc)), f.kv.soff, c.KOff())
	k.op("cp.async.commit_group")
	k.label(skip)
	f.pv(f.smem)
	k.op("mov.u32 %s, %s", n, next)
	k.op("@%s bra %s", more, loopL)
}

// loopDouble is the main loop with K and V double-buffered: block n's tiles
// are in buffer n&1 (at byte offset stage), and block n+1's are copied
// into the other buffer while block n runs:
//
//	wait for K(n), V(n); barrier; copy K(n+1), V(n+1) if any
//	S = Q·K(n)ᵀ, softcap, mask, online softmax
//	O += P·V(n)
//
// The barrier also tells every warp is done with block n-1's buffer before
// block n+1's copies overwrite it.
func (f *fwdKernel) loopDouble() {
	k, c := f.k, f.c
	n := k.rOp("mov.u32", f.nlo)
	stage := k.rOp("mov.u32", "0")
	loopL, n0, next, more := f.keyLoopTop(n, f.nhi, c.Bc)
	skip := k.newLabel("nextk")
	k.op("@!%s bra %s", more, skip)
	n1 := k.rOp("add.u32", n0, imm(c.Bc))
	other := k.rOp("xor.b32", stage, imm(c.KVStageBytes()))
	other = k.rOp("add.u32", f.kv.soff, other)
	f.copyTile(f.kv, f.kSrc, n1, other, c.KOff())
	f.copyTile(f.kv, f.vSrc, n1, other, c.VOff())
	k.op("cp.async.commit_group")
	k.label(skip)
	kvb := k.rOp("add.u32", f.smem, stage)
	f.tile(n0, kvb)
	f.pv(kvb)
	k.op("xor.b32 %s, %s, %d", stage, stage, c.KVStageBytes())
	k.op("mov.u32 %s, %s", n, next)
	k.op("@%s bra %s", more, loopL)
}

// tile computes S = Q·K(n)ᵀ with K at kvb + KOff, then the softcap, the
// mask and the online softmax.
func (f *fwdKernel) tile(n0, kvb string) {
	f.scores(kvb)
	sc := f.loadScore() // parameters read where used: no registers held across the loop
	f.scoreTransform(sc, flat(f.S))
	f.maskScores(n0)
	f.softmax(sc.mul)
}

// scores computes S = Q·Kᵀ for the warp's rows and the tile's Bc keys, K
// at shared address kvb + KOff.
func (f *fwdKernel) scores(kvb string) {
	c, rc := f.c, f.c.RowChunks()
	f.k.comment("S = Q K^T")
	f.product(c.D/16, c.Bc/16, f.S, func(mt, ks int) [4]string {
		if f.qf != nil {
			return f.qf[mt][ks]
		}
		return f.ldsm(f.qW, c.QOff(), rc, tile.PatternRowMajor, mt*16, ks*16, false)
	}, func(ks, j int) [4]string {
		return f.ldsm(kvb, c.KOff(), rc, tile.PatternColMajor, j*16, ks*16, false)
	}, true)
}

// maskScores sets hidden scores to -Inf, in the tiles that may hold one
// (a uniform branch around it otherwise). A packed block's row is masked
// as its position (pack.go).
func (f *fwdKernel) maskScores(n0 string) {
	k, c := f.k, f.c
	nomask := f.skipUnlessMasked(n0, f.above, f.below)
	k.comment("mask")
	colBase := k.rOp("add.u32", n0, f.colOff)
	pk := f.loadPacking()
	for mt := range c.MT {
		for rh := range 2 {
			_, row := f.unpackRow(pk, k.rOp("add.u32", f.rowG, imm(mt*16+8*rh))) // its position
			lo, hi := f.rowBounds(f.mask, f.s, row, colBase)
			for j := range c.Bc / 8 {
				for e := range 2 {
					f.maskElem(f.S[mt][j][2*rh+e], lo, hi, 8*j+e)
				}
			}
		}
	}
	k.label(nomask)
}

// softmax is the online softmax of the tile, per row: the row max of the
// raw scores (a tree, then across the quad), the new running max in log2
// units, P = 2^(s·mul - m) by one FMA and ex2 per score, the row sum (a
// tree), and the rescaling of l and O by α = 2^(m_old - m_new).
//
// The O rescale (D/4 multiplies per row and thread) runs only when some
// row of the warp got a new max: a warp-uniform branch on vote.all of
// "m_new == m_old" skips it otherwise. Skipping is exact: with an unchanged
// finite max α = 2^0 = 1, and a max still -Inf means every score so far
// was -Inf or NaN, so O holds only zeros (α = 0 leaves them) or NaNs.
func (f *fwdKernel) softmax(mul string) {
	k, c := f.k, f.c
	k.comment("online softmax")
	alphas := make([][2]string, c.MT)
	var same string // every row of this thread kept its max
	for mt := range c.MT {
		for rh := range 2 {
			var xs []string
			for j := range c.Bc / 8 {
				xs = append(xs, f.S[mt][j][2*rh], f.S[mt][j][2*rh+1])
			}
			x := f.shflReduce(f.tree("max.f32", xs), "max.f32", 1, 2)
			m := f.mrow[mt][rh]
			mnew := k.fOp("max.f32", m, k.fOp("mul.f32", x, mul))
			isInf := k.pOp("setp.eq.f32", mnew, negInf)
			muse := k.fOp("selp.f32", zeroF, mnew, isInf)
			alpha := k.fOp("ex2.approx.ftz.f32", k.fOp("sub.f32", m, muse))
			kept := k.pOp("setp.eq.f32", mnew, m)
			if same == "" {
				same = kept
			} else {
				k.op("and.pred %s, %s, %s", same, same, kept)
			}
			k.op("mov.f32 %s, %s", m, mnew)
			negm := k.fOp("neg.f32", muse)
			for _, v := range xs {
				k.op("fma.rn.f32 %s, %s, %s, %s", v, v, mul, negm)
				k.op("ex2.approx.ftz.f32 %s, %s", v, v)
			}
			l := f.lrow[mt][rh]
			k.op("fma.rn.f32 %s, %s, %s, %s", l, l, alpha, f.tree("add.f32", xs))
			alphas[mt][rh] = alpha
		}
	}
	k.comment("O *= alpha unless no row of the warp got a new max")
	skip := k.newLabel("rescaled")
	k.op("vote.sync.all.pred %s, %s, -1", same, same)
	k.op("@%s bra.uni %s", same, skip)
	for mt := range c.MT {
		for rh := range 2 {
			for j := range c.D / 8 {
				for e := range 2 {
					v := f.o[mt][j][2*rh+e]
					k.op("mul.f32 %s, %s, %s", v, v, alphas[mt][rh])
				}
			}
		}
	}
	k.label(skip)
}

// pv accumulates O += P·V with P from the S accumulators and V at shared
// address kvb + VOff.
func (f *fwdKernel) pv(kvb string) {
	c, rc := f.c, f.c.RowChunks()
	f.k.comment("O += P V")
	f.product(c.Bc/16, c.D/16, f.o, func(mt, kk int) [4]string {
		return f.aFromC(f.S[mt], kk)
	}, func(kk, j int) [4]string {
		return f.ldsm(kvb, c.VOff(), rc, tile.PatternRowMajor, kk*16, j*16, true)
	}, false)
}

// epilogue normalises O by the row sums, writes LSE = (m + log2 l)·ln 2
// (rows with no visible key: O = 0, LSE = -Inf), then stages each m-tile of
// O in the warp's own rows of the Q tile and writes it with 16-byte stores,
// each row to its own head and position when the block is packed.
func (f *fwdKernel) epilogue() {
	k, c, rc := f.k, f.c, f.c.RowChunks()
	k.comment("epilogue")
	h, b, qStart, sq := f.reloadBlock()
	h = f.firstHead(h)
	pk := f.loadPacking()
	rowG := k.rOp("mul.lo.u32", f.blockIndex(true), imm(c.Br()))
	rowG = k.rOp("mad.lo.u32", f.warp, imm(c.MT*16), rowG)
	rowG = k.rOp("add.u32", rowG, f.g)
	lseRow, _ := f.statRows(b, h, qStart, false)
	lseHS := f.ld(".u32", "lse_hs")
	oRS := f.ld(".u32", "o_rs")
	oBase := f.rowBase("o", b, "o_bs", qStart, oRS, h, c.D, 2)
	oRB := k.rOp("shl.b32", oRS, "1")
	t0 := k.pOp("setp.eq.u32", f.t, "0")
	xg := f.stageOffsets(rc, c.D/8)
	for mt := range c.MT {
		for rh := range 2 {
			row := k.rOp("add.u32", rowG, imm(mt*16+8*rh))
			elem, ok := f.rowElem(pk, row, lseHS, sq)
			f.finishRow(mt, rh, ok, elem, lseRow, t0)
		}
		off := c.QOff() + mt*16*rc*tile.ChunkBytes
		f.stageRows(f.o[mt], 0, xg, f.qW, off, rc)
		first := k.rOp("sub.u32", rowG, f.g)
		first = k.rOp("add.u32", first, imm(mt*16))
		f.storeStaged(f.qW, off, rc, oBase, oRB, "", &packedRows{pk, sq, first, c.D * 2})
	}
}

// finishRow scales row half rh of m-tile mt of O by 1/l and writes the
// row's LSE (thread t = 0 of the quad) to element elem (.u64, rowElem) of
// lseRow when the row exists (ok).
func (f *fwdKernel) finishRow(mt, rh int, ok, elem, lseRow, t0 string) {
	k, c := f.k, f.c
	l := f.shflReduce(f.lrow[mt][rh], "add.f32", 1, 2)
	zero := k.pOp("setp.eq.f32", l, zeroF)
	inv := k.fOp("rcp.rn.f32", l)
	k.op("selp.f32 %s, %s, %s, %s", inv, zeroF, inv, zero)
	isInf := k.pOp("setp.eq.f32", f.mrow[mt][rh], negInf)
	muse := k.fOp("selp.f32", zeroF, f.mrow[mt][rh], isInf)
	lse := k.fOp("add.f32", k.fOp("lg2.approx.ftz.f32", l), muse)
	lse = k.fOp("mul.f32", lse, fimm(tile.Ln2))
	k.op("selp.f32 %s, %s, %s, %s", lse, negInf, lse, zero)
	for j := range c.D / 8 {
		for e := range 2 {
			v := f.o[mt][j][2*rh+e]
			k.op("mul.f32 %s, %s, %s", v, v, inv)
		}
	}
	st := k.pOp("and.pred", ok, t0)
	la := k.rdOp("shl.b64", elem, "2")
	la = k.rdOp("add.s64", la, lseRow)
	k.op("@%s st.global.f32 [%s], %s", st, la, lse)
}

// flat lists the accumulators of all m-tiles.
func flat(a [][][4]string) [][4]string {
	var out [][4]string
	for _, x := range a {
		out = append(out, x...)
	}
	return out
}
