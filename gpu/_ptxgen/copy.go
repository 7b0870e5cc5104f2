package main

import (
	"fmt"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// tileCopy is a thread's share of the cp.async copies of tiles of rows × rc
// 16-byte chunks from a tensor whose rows are rowBytes apart: chunk `chunk`
// of rows row0 + i·step, i < n, with step = threads/rc a multiple of 8, so
// that the chunk's swizzled position is the same in each of those rows and
// the shared addresses are one register plus constants. Everything that
// does not change from block to block is computed once.
type tileCopy struct {
	rows, rc, step, n int
	row0, col         string // .u32: first row; chunk·16 bytes
	soff              string // .u32: smem + swizzled offset of (row0, chunk)
	rowBytes          string // .u32
	stepB             string // .u64: step rows in bytes
	valid             string // .s32: rows of the tensor that exist (the rest are zero-filled)
}

func (g *gen) newTileCopy(rows, rc int, rowBytes, valid string) *tileCopy {
	k := g.k
	n := rows * rc / g.threads
	step := g.threads / rc
	if n*g.threads != rows*rc || g.threads%rc != 0 || step%8 != 0 {
		panic(fmt.Sprintf("tile %dx%d does not split over %d threads in steps of 8 rows", rows, rc, g.threads))
	}
	c := &tileCopy{rows: rows, rc: rc, step: step, n: n, rowBytes: rowBytes, valid: valid}
	chunk := k.rOp("and.b32", g.tid, imm(rc-1))
	c.row0 = k.rOp("shr.u32", g.tid, imm(log2(rc)))
	c.col = k.rOp("shl.b32", chunk, "4")
	x := k.rOp("and.b32", c.row0, "7")
	x = k.rOp("xor.b32", x, chunk)
	x = k.rOp("shl.b32", x, "4")
	c.soff = k.rOp("mad.lo.u32", c.row0, imm(rc*tile.ChunkBytes), x)
	c.soff = k.rOp("add.u32", c.soff, g.smem)
	c.stepB = k.rdOp("mul.wide.u32", rowBytes, imm(step))
	return c
}

// copySrc is a tensor read through a tileCopy: p (.u64) is the global
// address of the thread's first chunk in the next block to copy.
type copySrc struct{ p string }

// newSrc returns the source state for blocks starting at row first of the
// tensor whose row 0 is at rowBase.
func (g *gen) newSrc(c *tileCopy, rowBase, first string) copySrc {
	k := g.k
	base := k.rdOp("add.s64", rowBase, k.rdOp("cvt.u64.u32", c.col))
	r := k.rOp("add.u32", first, c.row0)
	p := k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", p, r, c.rowBytes, base)
	return copySrc{p: p}
}

// copyTile issues the thread's copies of the block of rows starting at row
// start from s into the tile at shared address sbase + soffConst (sbase
// from c.soff, plus a stage offset where there is one), and advances s to
// the next block. A block whose rows are all valid (a uniform test) takes
// two instructions per copy, a 64-bit add and the cp.async; the last,
// partial block zero-fills the rows at or past the valid count, pointing
// their copies (which read nothing) at the block's first row.
func (g *gen) copyTile(c *tileCopy, s copySrc, start, sbase string, soffConst int) {
	k := g.k
	end := k.rOp("add.u32", start, imm(c.rows))
	full := k.pOp("setp.le.s32", end, c.valid)
	partial, done := k.newLabel("partial"), k.newLabel("copied")
	k.op("@!%s bra.uni %s", full, partial)
	a := s.p
	for i := range c.n {
		if i > 0 {
			a = k.rdOp("add.s64", a, c.stepB)
		}
		k.op("cp.async.cg.shared.global [%s+%d], [%s], 16", sbase, soffConst+i*c.step*c.rc*tile.ChunkBytes, a)
	}
	k.op("bra.uni %s", done)
	k.label(partial)
	rem := k.rOp("sub.s32", c.valid, start) // row0 + i·step is valid iff < rem
	rem = k.rOp("sub.s32", rem, c.row0)
	first := k.RD()
	k.op("mul.wide.u32 %s, %s, %s", first, c.row0, c.rowBytes)
	first = k.rdOp("sub.s64", s.p, first)
	a = s.p
	for i := range c.n {
		if i > 0 {
			a = k.rdOp("add.s64", a, c.stepB)
		}
		ok := k.pOp("setp.gt.s32", rem, imm(i*c.step))
		sz := k.rOp("selp.u32", "16", "0", ok)
		src := k.rdOp("selp.b64", a, first, ok)
		k.op("cp.async.cg.shared.global [%s+%d], [%s], 16, %s", sbase, soffConst+i*c.step*c.rc*tile.ChunkBytes, src, sz)
	}
	k.label(done)
	if c.n&(c.n-1) == 0 { // the block is n·step rows
		k.op("add.s64 %s, %s, %s", s.p, s.p, k.rdOp("shl.b64", c.stepB, imm(log2(c.n))))
	} else {
		k.op("mad.wide.u32 %s, %s, %d, %s", s.p, c.rowBytes, c.rows, s.p)
	}
}

// stagedLoop is the main loop of a kernel over blocks [n, end),
// double-buffered in shared memory: while block n is read from the stage at
// byte offset stage (0 or bytes), block n+1 is copied into the other.
type stagedLoop struct {
	n, stage string // .u32, advanced in place by bottom
	bytes    int    // size of a stage
	label    string // set by top
	next     string // n+1 (set by top)
	more     string // pred: next < end (set by top)
}

// newLoop emits the loop's initial state: block first, stage 0.
func (g *gen) newLoop(first string, stageBytes int) *stagedLoop {
	k := g.k
	l := &stagedLoop{n: k.R(), stage: k.R(), bytes: stageBytes}
	k.op("mov.u32 %s, %s", l.n, first)
	k.op("mov.u32 %s, 0", l.stage)
	return l
}

// top opens an iteration: if block n+1 < end exists, load(n+1, offset of
// the other stage) issues its copies; then it waits for block n's copies
// (the group committed one iteration earlier, or by the prologue).
func (g *gen) top(l *stagedLoop, end string, load func(n, stage string)) {
	k := g.k
	l.label = k.newLabel("loop")
	k.label(l.label)
	l.next = k.rOp("add.u32", l.n, "1")
	l.more = k.pOp("setp.lt.s32", l.next, end)
	skip := k.newLabel("noprefetch")
	k.op("@!%s bra %s", l.more, skip)
	load(l.next, k.rOp("xor.b32", l.stage, imm(l.bytes)))
	k.label(skip)
	k.op("cp.async.commit_group")
	g.waitCopies(1)
}

// bottom closes an iteration: once every warp is done with the stage, it
// moves to block n+1 and the other stage, and loops while there is one.
func (g *gen) bottom(l *stagedLoop) {
	k := g.k
	k.op("bar.sync 0")
	k.op("mov.u32 %s, %s", l.n, l.next)
	k.op("xor.b32 %s, %s, %d", l.stage, l.stage, l.bytes)
	k.op("@%s bra %s", l.more, l.label)
}

// stageRows writes a warp's 16-row m-tile of f32 accumulators acc (n-tiles
// of 8 columns, the first at column 8·j0), packed to the input type, into rows [0, 16) of the
// swizzled tile (rc chunks per row) at shared address base + off: element
// (g + 8·rh, 8j + 2t) at tile.ElemOffset, two elements per 4-byte store.
// xg[j&7] holds (j&7 ^ g)·16 + g·rc·16 + 4t (stageOffsets), shared by
// every call; with xg nil they are computed here.
func (g *gen) stageRows(acc [][4]string, j0 int, xg []string, base string, off, rc int) {
	k := g.k
	var row string
	if xg == nil { // computed here, saving registers in a loop
		row = g.stageRowOffset(rc)
		row = k.rOp("add.u32", row, base)
	}
	for jj, nt := range acc {
		j := j0 + jj
		var a string
		if xg == nil {
			c := k.rOp("xor.b32", g.g, imm(j&7))
			a = k.rOp("mad.lo.u32", c, imm(tile.ChunkBytes), row)
		} else {
			a = k.rOp("add.u32", base, xg[j&7])
		}
		for rh := range 2 {
			v := g.pack(nt[2*rh], nt[2*rh+1])
			k.op("st.shared.b32 [%s+%d], %s", a, off+(j&^7)*tile.ChunkBytes+8*rh*rc*tile.ChunkBytes, v)
		}
	}
}

// stageOffsets returns the per-thread offsets stageRows takes: for each
// chunk phase x < min(8, n-tiles), ((x ^ g)·16 + g·rc·16 + 4t).
func (g *gen) stageOffsets(rc, ntiles int) []string {
	k := g.k
	row := g.stageRowOffset(rc)
	xg := make([]string, min(8, ntiles))
	for x := range xg {
		c := k.rOp("xor.b32", g.g, imm(x))
		xg[x] = k.rOp("mad.lo.u32", c, imm(tile.ChunkBytes), row)
	}
	return xg
}

// stageRowOffset returns g·rc·16 + 4t: the thread's row and column bytes.
func (g *gen) stageRowOffset(rc int) string {
	k := g.k
	t4 := k.rOp("shl.b32", g.t, "2")
	return k.rOp("mad.lo.u32", g.g, imm(rc*tile.ChunkBytes), t4)
}

// packedRows places the staged rows of a forward block that may be packed
// (pack.go): tile row r is block row first + r, at rowAddr (row 0 of the
// block's first head) + (its head offset)·headBytes + (its
// position)·rowBytes, stored when it exists (validRow).
type packedRows struct {
	p         packing
	seqSq     string // .u32: the sequence's query rows
	first     string // .u32
	headBytes int
}

// storeStaged copies 16 staged rows (rc chunks each) of a warp from the
// swizzled tile at base + off to global memory with 16-byte stores: lane l
// takes chunk l % rc of rows l / rc + i·(32/rc); row r goes to
// rowAddr + r·rowBytes (+ chunk·16) when r < rows (a .s32 count of the
// valid rows from the tile's first), or where pr places it when pr is not
// nil (rows unused). The warp's lanes wrote the tile, so bar.warp.sync
// orders those writes before these reads.
func (g *gen) storeStaged(base string, off, rc int, rowAddr, rowBytes, rows string, pr *packedRows) {
	k := g.k
	k.op("bar.warp.sync -1")
	per := tile.WarpThreads / rc
	chunk := k.rOp("and.b32", g.lane, imm(rc-1))
	r0 := k.rOp("shr.u32", g.lane, imm(log2(rc)))
	col := k.rdOp("mul.wide.u32", chunk, imm(tile.ChunkBytes))
	ga := k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", ga, r0, rowBytes, rowAddr)
	ga = k.rdOp("add.s64", ga, col)
	stepB := k.rdOp("mul.wide.u32", rowBytes, imm(per))
	for i := range 16 / per {
		r := k.rOp("add.u32", r0, imm(i*per))
		x := k.rOp("and.b32", r, "7")
		x = k.rOp("xor.b32", x, chunk)
		x = k.rOp("shl.b32", x, "4")
		sa := k.rOp("mad.lo.u32", r, imm(rc*tile.ChunkBytes), x)
		sa = k.rOp("add.u32", sa, base)
		var v [4]string
		for e := range v {
			v[e] = k.R()
		}
		k.op("ld.shared.v4.b32 {%s, %s, %s, %s}, [%s+%d]", v[0], v[1], v[2], v[3], sa, off)
		var ok string
		switch {
		case pr != nil:
			br := k.rOp("add.u32", pr.first, r)
			hoff, pos := g.unpackRow(pr.p, br)
			ok = g.validRow(pr.p, br, pos, pr.seqSq)
			ga = k.rdOp("mul.wide.u32", hoff, imm(pr.headBytes))
			ga = k.rdOp("add.s64", ga, rowAddr)
			k.op("mad.wide.u32 %s, %s, %s, %s", ga, pos, rowBytes, ga)
			ga = k.rdOp("add.s64", ga, col)
		case i > 0:
			ga = k.rdOp("add.s64", ga, stepB)
			fallthrough
		default:
			ok = k.pOp("setp.lt.s32", r, rows)
		}
		k.op("@%s st.global.v4.b32 [%s], {%s, %s, %s, %s}", ok, ga, v[0], v[1], v[2], v[3])
	}
}

// kvCopies are the copies of the K and V tiles of the key blocks that a
// kernel walks (fwd, dq): one tileCopy and a source for each tensor.
type kvCopies struct {
	kv         *tileCopy
	kSrc, vSrc copySrc
}

// startKV sets up kc for tiles of bc keys of rc chunks, rows rowBytes
// apart, valid of them existing, K and V rows at kBase and vBase; then it
// issues the copy of the K tile of block nlo to shared offset kOff (not
// committed) and returns that block's first key n0 = nlo·bc.
func (g *gen) startKV(kc *kvCopies, bc, rc int, rowBytes, valid, nlo, kBase, vBase string, kOff int) (n0 string) {
	kc.kv = g.newTileCopy(bc, rc, rowBytes, valid)
	n0 = g.k.rOp("shl.b32", nlo, imm(log2(bc)))
	kc.kSrc, kc.vSrc = g.newSrc(kc.kv, kBase, n0), g.newSrc(kc.kv, vBase, n0)
	g.copyTile(kc.kv, kc.kSrc, n0, kc.kv.soff, kOff)
	return n0
}

// waitCopies emits the wait until at most pending cp.async groups (the
// youngest) are in flight, then a barrier: the data of the older groups is
// in shared memory for every warp.
func (g *gen) waitCopies(pending int) {
	g.k.op("cp.async.wait_group %d", pending)
	g.k.op("bar.sync 0")
}

// keyLoopTop emits the head of a loop over key blocks n < nhi of bc keys,
// their copies committed one iteration earlier (or by the prologue): its
// label, then the wait for those copies (waitCopies(0)). It returns the
// label, block n's first key n0 = n·bc, next = n+1 and more = next < nhi.
func (g *gen) keyLoopTop(n, nhi string, bc int) (label, n0, next, more string) {
	k := g.k
	label = k.newLabel("loop")
	k.label(label)
	g.waitCopies(0)
	n0 = k.rOp("shl.b32", n, imm(log2(bc)))
	next = k.rOp("add.u32", n, "1")
	more = k.pOp("setp.lt.s32", next, nhi)
	return label, n0, next, more
}
