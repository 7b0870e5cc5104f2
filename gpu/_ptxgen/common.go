package main

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// dtype is a 16-bit input type of the tensor cores.
type dtype struct {
	name string // in kernel names and mma: bf16 or f16
	cvt  string // packs two f32 into one .b32: cvt.rn.<t>x2.f32 d, hi, lo
}

var dtypes = []dtype{
	{name: "bf16", cvt: "cvt.rn.bf16x2.f32"},
	{name: "f16", cvt: "cvt.rn.f16x2.f32"},
}

const (
	log2e  = math.Log2E
	ln2    = math.Ln2
	negInf = "0fFF800000"
	posInf = "0f7F800000"
	zeroF  = "0f00000000"
)

// gen is the state shared by the pieces of one attention kernel.
type gen struct {
	k    *Kernel
	dt   dtype
	tid  string // %tid.x
	lane string
	warp string
	g, t string // lane>>2 and lane&3: the mma fragment coordinates
	smem string // shared-memory base address (.u32)

	laneOffs map[[3]int]string // (pattern, rowChunks, j) → per-lane offset register
}

func newGen(k *Kernel, dt dtype) *gen {
	g := &gen{k: k, dt: dt, laneOffs: map[[3]int]string{}}
	g.tid = k.rOp("mov.u32", "%tid.x")
	g.lane = k.rOp("and.b32", g.tid, "31")
	g.warp = k.rOp("shr.u32", g.tid, "5")
	g.g = k.rOp("shr.u32", g.lane, "2")
	g.t = k.rOp("and.b32", g.lane, "3")
	g.smem = k.rOp("mov.u32", "smem")
	return g
}

// laneOff returns the register holding tile.LaneOffset(pattern, lane, rc, j),
// computing it on first use.
func (g *gen) laneOff(pattern, rc, j int) string {
	key := [3]int{pattern, rc, j}
	if r, ok := g.laneOffs[key]; ok {
		return r
	}
	r := g.laneOffset(pattern, rc, func(lc string) string {
		return g.k.rOp("add.u32", lc, imm(2*j))
	})
	g.laneOffs[key] = r
	return r
}

// laneOffDyn is laneOff with the block selector j in a register (for a block
// column that depends on the warp).
func (g *gen) laneOffDyn(pattern, rc int, j string) string {
	return g.laneOffset(pattern, rc, func(lc string) string {
		j2 := g.k.rOp("shl.b32", j, "1")
		return g.k.rOp("add.u32", lc, j2)
	})
}

// laneOffset emits tile.LaneOffset for this lane, with the chunk 2j+lc
// computed by col from lc:
//
//	row-major: lr = lane&15,                  lc = lane>>4
//	col-major: lr = (lane&7) | (lane>>4)<<3,  lc = (lane>>3)&1
//	offset = lr*rc*16 + ((2j+lc) ^ (lane&7))*16
func (g *gen) laneOffset(pattern, rc int, col func(lc string) string) string {
	k := g.k
	var lr, lc string
	if pattern == tile.PatternRowMajor {
		lr = k.rOp("and.b32", g.lane, "15")
		lc = k.rOp("shr.u32", g.lane, "4")
	} else {
		lo := k.rOp("and.b32", g.lane, "7")
		hi := k.rOp("shr.u32", g.lane, "4")
		hi = k.rOp("shl.b32", hi, "3")
		lr = k.rOp("or.b32", lo, hi)
		lc = k.rOp("shr.u32", g.lane, "3")
		lc = k.rOp("and.b32", lc, "1")
	}
	x := k.rOp("and.b32", g.lane, "7")
	c := col(lc)
	c = k.rOp("xor.b32", c, x)
	c = k.rOp("shl.b32", c, "4")
	return k.rOp("mad.lo.u32", lr, imm(rc*tile.ChunkBytes), c)
}

// ldsm emits one ldmatrix.x4 of the 16×16 block (r0, c0) of a swizzled tile
// at shared address base (a register) + constant offset baseOff, with the
// lane pattern of the operand. It returns the four destination registers.
func (g *gen) ldsm(base string, baseOff, rc, pattern, r0, c0 int, trans bool) [4]string {
	return g.ldsmAt(base, g.laneOff(pattern, rc, tile.BlockJ(c0)), baseOff+tile.BlockBase(r0, c0, rc), trans)
}

// ldsmAt is ldsm with the lane offset in a register (from laneOff or
// laneOffDyn) and the constant byte offset off (the lane-independent block
// base included).
func (g *gen) ldsmAt(base, laneOff string, off int, trans bool) [4]string {
	k := g.k
	a := k.rOp("add.u32", base, laneOff)
	var d [4]string
	for i := range d {
		d[i] = k.R()
	}
	tr := ""
	if trans {
		tr = ".trans"
	}
	k.op("ldmatrix.sync.aligned.m8n8.x4%s.shared.b16 {%s, %s, %s, %s}, [%s+%d]", tr, d[0], d[1], d[2], d[3], a, off)
	return d
}

// mma emits c += a·b (m16n8k16, f32 accumulators in place).
func (g *gen) mma(c [4]string, a [4]string, b0, b1 string) {
	g.k.op("mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%s, %s, %s, %s}, {%s, %s, %s, %s}, {%s, %s}, {%s, %s, %s, %s}",
		g.dt.name, g.dt.name, c[0], c[1], c[2], c[3], a[0], a[1], a[2], a[3], b0, b1, c[0], c[1], c[2], c[3])
}

// mma16 emits c += a·b for a 16-column B block loaded by one ldmatrix.x4
// (registers 0, 1: n-tile 0; 2, 3: n-tile 1) into the accumulator n-tiles
// c[0] and c[1].
func (g *gen) mma16(c [][4]string, a, b [4]string) {
	g.mma(c[0], a, b[0], b[1])
	g.mma(c[1], a, b[2], b[3])
}

// pack returns a .b32 with lo in the low and hi in the high 16 bits.
func (g *gen) pack(lo, hi string) string {
	return g.k.rOp(g.dt.cvt, hi, lo)
}

// zeros allocates n f32 registers set to 0.
func (g *gen) zeros(n int) []string {
	r := make([]string, n)
	for i := range r {
		r[i] = g.k.F()
		g.k.op("mov.f32 %s, %s", r[i], zeroF)
	}
	return r
}

// acc4 allocates accumulators [n][4] set to 0.
func (g *gen) acc4(n int) [][4]string {
	z := g.zeros(4 * n)
	a := make([][4]string, n)
	for i := range a {
		copy(a[i][:], z[4*i:])
	}
	return a
}

// zeroAcc sets accumulators to 0.
func (g *gen) zeroAcc(a [][4]string) {
	for i := range a {
		for _, r := range a[i] {
			g.k.op("mov.f32 %s, %s", r, zeroF)
		}
	}
}

// aFromC packs accumulator n-tiles 2kk, 2kk+1 (f32) into the A fragment of
// k-step kk (tile.CToA).
func (g *gen) aFromC(acc [][4]string, kk int) [4]string {
	var a [4]string
	for r := range a {
		nt, i := tile.CToA(r, 0)
		_, i1 := tile.CToA(r, 1)
		a[r] = g.pack(acc[2*kk+nt][i], acc[2*kk+nt][i1])
	}
	return a
}

// seqInfo holds the per-block sequence geometry.
type seqInfo struct {
	qStart, kStart string // first row of the sequence in the packed tensors (.u32)
	sq, sk         string // rows of this sequence (.u32)
	off            string // sk - sq (.s32)
}

// seq loads the sequence geometry of batch element b: dense (cu pointers 0)
// or varlen (cu_seqlens_q/k), with an optional seqused_k.
func (g *gen) seq(b, cuQ, cuK, usedK, sqParam, skParam string) seqInfo {
	k := g.k
	var s seqInfo
	s.qStart, s.kStart = k.R(), k.R()
	s.sq, s.sk = k.R(), k.R()
	k.op("mov.u32 %s, 0", s.qStart)
	k.op("mov.u32 %s, 0", s.kStart)
	k.op("ld.param.u32 %s, [%s]", s.sq, sqParam)
	k.op("ld.param.u32 %s, [%s]", s.sk, skParam)
	cq := k.RD()
	k.op("ld.param.u64 %s, [%s]", cq, cuQ)
	var_ := k.pOp("setp.ne.u64", cq, "0")
	ck := k.RD()
	k.op("ld.param.u64 %s, [%s]", ck, cuK)
	cq = k.rdOp("cvta.to.global.u64", cq)
	ck = k.rdOp("cvta.to.global.u64", ck)
	bo := k.rdOp("mul.wide.u32", b, "4")
	aq := k.rdOp("add.s64", cq, bo)
	ak := k.rdOp("add.s64", ck, bo)
	q1, k1 := k.R(), k.R()
	k.op("@%s ld.global.u32 %s, [%s]", var_, s.qStart, aq)
	k.op("@%s ld.global.u32 %s, [%s+4]", var_, q1, aq)
	k.op("@%s ld.global.u32 %s, [%s]", var_, s.kStart, ak)
	k.op("@%s ld.global.u32 %s, [%s+4]", var_, k1, ak)
	k.op("@%s sub.u32 %s, %s, %s", var_, s.sq, q1, s.qStart)
	k.op("@%s sub.u32 %s, %s, %s", var_, s.sk, k1, s.kStart)
	cu := k.RD()
	k.op("ld.param.u64 %s, [%s]", cu, usedK)
	used := k.pOp("setp.ne.u64", cu, "0")
	cu = k.rdOp("cvta.to.global.u64", cu)
	au := k.rdOp("add.s64", cu, bo)
	k.op("@%s ld.global.u32 %s, [%s]", used, s.sk, au)
	s.off = k.rOp("sub.s32", s.sk, s.sq)
	return s
}

// rowBase returns the global byte address of row 0 of a sequence's head in
// a [batch, seq, heads, D] (or packed [total, heads, D]) tensor:
// ptr + ((b*batchStride + start*rowStride + head*D) * elemBytes).
func (g *gen) rowBase(ptrParam, b, batchStrideParam, start, rowStride, head string, d, elemBytes int) string {
	k := g.k
	p := k.RD()
	k.op("ld.param.u64 %s, [%s]", p, ptrParam)
	p = k.rdOp("cvta.to.global.u64", p)
	bs := k.RD()
	k.op("ld.param.u64 %s, [%s]", bs, batchStrideParam)
	b64 := k.rdOp("cvt.u64.u32", b)
	e := k.rdOp("mul.lo.u64", b64, bs)
	e2 := k.rdOp("mul.wide.u32", start, rowStride)
	e = k.rdOp("add.s64", e, e2)
	e3 := k.rdOp("mul.wide.u32", head, imm(d))
	e = k.rdOp("add.s64", e, e3)
	e = k.rdOp("shl.b64", e, imm(bits.TrailingZeros(uint(elemBytes))))
	return k.rdOp("add.s64", p, e)
}

// tileCopy describes the cp.async copy of a tile of rows × rc chunks by the
// block's threads: thread tid copies chunk tid&(rc-1) of rows
// tid>>log2(rc) + i*Threads/rc (tile.CopyChunk), with smem offsets computed
// once.
type tileCopy struct {
	rows, rc int
	row0     string   // first row of this thread (.u32)
	colBytes string   // chunk*16 (.u32)
	soff     []string // swizzled smem offsets of the thread's chunks
}

func (g *gen) newTileCopy(rows, rc int) *tileCopy {
	k := g.k
	n := rows * rc / tile.Threads
	if n*tile.Threads != rows*rc || tile.Threads%rc != 0 {
		panic(fmt.Sprintf("tile %dx%d does not split over %d threads", rows, rc, tile.Threads))
	}
	c := &tileCopy{rows: rows, rc: rc}
	lg := bits.TrailingZeros(uint(rc))
	chunk := k.rOp("and.b32", g.tid, imm(rc-1))
	c.row0 = k.rOp("shr.u32", g.tid, imm(lg))
	c.colBytes = k.rOp("shl.b32", chunk, "4")
	step := tile.Threads / rc
	for i := 0; i < n; i++ {
		r := k.rOp("add.u32", c.row0, imm(i*step))
		x := k.rOp("and.b32", r, "7")
		x = k.rOp("xor.b32", x, chunk)
		x = k.rOp("shl.b32", x, "4")
		c.soff = append(c.soff, k.rOp("mad.lo.u32", r, imm(rc*tile.ChunkBytes), x))
	}
	return c
}

// issue emits the cp.async copies of rows [start, start+rows) of a tensor
// whose row 0 is at rowBase (global, .u64) with rowBytes between rows, into
// the tile at shared address sbase (+ constant soffConst); rows at or past
// valid are zero-filled (their source address is clamped to row 0).
func (g *gen) issue(c *tileCopy, rowBase, rowBytes, start, valid, sbase string, soffConst int) {
	k := g.k
	step := tile.Threads / c.rc
	base := k.rdOp("cvt.u64.u32", c.colBytes)
	base = k.rdOp("add.s64", rowBase, base)
	for i, so := range c.soff {
		r := k.rOp("add.u32", start, c.row0)
		r = k.rOp("add.u32", r, imm(i*step))
		ok := k.pOp("setp.lt.u32", r, valid)
		sz := k.rOp("selp.u32", "16", "0", ok)
		r = k.rOp("selp.u32", r, "0", ok)
		a := k.RD()
		k.op("mad.wide.u32 %s, %s, %s, %s", a, r, rowBytes, base)
		d := k.rOp("add.u32", sbase, so)
		k.op("cp.async.cg.shared.global [%s+%d], [%s], 16, %s", d, soffConst, a, sz)
	}
}

// stagedLoop is the main loop of an attention kernel over blocks [n, end),
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

// top opens an iteration: if block n+1 < end exists, load(n+1, address of
// the other stage) issues its copies; then it waits for block n's copies
// (the group committed one iteration earlier, or by the prologue).
func (g *gen) top(l *stagedLoop, end string, load func(n, sbase string)) {
	k := g.k
	l.label = k.newLabel("loop")
	k.label(l.label)
	l.next = k.rOp("add.u32", l.n, "1")
	l.more = k.pOp("setp.lt.s32", l.next, end)
	skip := k.newLabel("noprefetch")
	k.op("@!%s bra %s", l.more, skip)
	other := k.rOp("xor.b32", l.stage, imm(l.bytes))
	load(l.next, k.rOp("add.u32", g.smem, other))
	k.label(skip)
	k.op("cp.async.commit_group")
	k.op("cp.async.wait_group 1")
	k.op("bar.sync 0")
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

// kvLoader returns the load function of a loop over key blocks: it copies
// block n's rows of K and V (c.rows each, rows past s.sk zero-filled) into
// the tiles at kOff and vOff of the stage at sbase.
func (g *gen) kvLoader(c *tileCopy, kBase, vBase, rowBytes string, s seqInfo, kOff, vOff int) func(n, sbase string) {
	return func(n, sbase string) {
		n0 := g.k.rOp("shl.b32", n, imm(log2(c.rows)))
		g.issue(c, kBase, rowBytes, n0, s.sk, sbase, kOff)
		g.issue(c, vBase, rowBytes, n0, s.sk, sbase, vOff)
	}
}

// statRows returns the global addresses of row 0 of this (batch, head)'s
// LSE and dsum rows, float32 laid out as lse_bs and lse_hs say (element row
// at +4·row).
func (g *gen) statRows(b, h string, s seqInfo) (lse, dsum string) {
	k := g.k
	lseBS, lseHS := g.ld(".u64", "lse_bs"), g.ld(".u32", "lse_hs")
	b64 := k.rdOp("cvt.u64.u32", b)
	li := k.rdOp("mul.lo.u64", b64, lseBS)
	li = k.rdOp("add.s64", li, k.rdOp("mul.wide.u32", h, lseHS))
	li = k.rdOp("add.s64", li, k.rdOp("cvt.u64.u32", s.qStart))
	li = k.rdOp("shl.b64", li, "2")
	lse = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "lse")), li)
	dsum = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "dsum")), li)
	return lse, dsum
}

// mask holds the per-row bounds of the causal/window mask.
type maskParams struct {
	left, right string // .s32, negative = unbounded
	leftInf     string // pred: left < 0
	rightInf    string // pred: right < 0
}

func (g *gen) loadMask(leftParam, rightParam string) maskParams {
	k := g.k
	var m maskParams
	m.left, m.right = k.R(), k.R()
	k.op("ld.param.s32 %s, [%s]", m.left, leftParam)
	k.op("ld.param.s32 %s, [%s]", m.right, rightParam)
	m.leftInf = k.pOp("setp.lt.s32", m.left, "0")
	m.rightInf = k.pOp("setp.lt.s32", m.right, "0")
	return m
}

// rowBounds returns [lo, hi) of the keys visible from query row `row`
// (tile.Mask.Visible), both minus colBase, as .s32 registers.
func (g *gen) rowBounds(m maskParams, s seqInfo, row, colBase string) (lo, hi string) {
	k := g.k
	pos := k.rOp("add.s32", row, s.off)
	lo = k.rOp("sub.s32", pos, m.left)
	lo = k.rOp("max.s32", lo, "0")
	lo = k.rOp("selp.b32", "0", lo, m.leftInf)
	hi = k.rOp("add.s32", pos, m.right)
	hi = k.rOp("add.s32", hi, "1")
	hi = k.rOp("min.s32", hi, s.sk)
	hi = k.rOp("selp.b32", s.sk, hi, m.rightInf)
	lo = k.rOp("sub.s32", lo, colBase)
	hi = k.rOp("sub.s32", hi, colBase)
	return lo, hi
}

// maskElem sets x to -Inf unless lo <= c < hi (c a constant column offset).
func (g *gen) maskElem(x, lo, hi string, c int) {
	p := g.hidden(lo, hi, c)
	g.k.op("selp.f32 %s, %s, %s, %s", x, negInf, x, p)
}

// scoreParams are the constants of the score transform, in log2 units:
// without softcap y = s*scaleLog2; with softcap > 0
// y = capLog2 * tanh(s*capScale) where capScale = scale/softcap and
// capLog2 = softcap*log2(e).
type scoreParams struct {
	scaleLog2, capScale, capLog2 string
	softcap                      string // pred: softcap > 0
}

func (g *gen) loadScore(scaleLog2, capScale, capLog2 string) scoreParams {
	k := g.k
	var s scoreParams
	s.scaleLog2, s.capScale, s.capLog2 = k.F(), k.F(), k.F()
	k.op("ld.param.f32 %s, [%s]", s.scaleLog2, scaleLog2)
	k.op("ld.param.f32 %s, [%s]", s.capScale, capScale)
	k.op("ld.param.f32 %s, [%s]", s.capLog2, capLog2)
	s.softcap = k.pOp("setp.gt.f32", s.capLog2, zeroF)
	return s
}

// tanh returns tanh(a) = 1 - 2/(2^(2·log2(e)·a) + 1): exact to a few ulps of
// 1 in absolute terms, and ±1 for large |a|.
func (g *gen) tanh(a string) string {
	k := g.k
	e := k.fOp("mul.f32", a, fimm(float32(2*log2e)))
	e = k.fOp("ex2.approx.ftz.f32", e)
	e = k.fOp("add.f32", e, fimm(1))
	r := k.fOp("rcp.approx.ftz.f32", e)
	return k.fOp("fma.rn.f32", r, fimm(-2), fimm(1))
}

// declare declares the kernel's parameters (named p_<name>).
func (g *gen) declare(ps []tile.Param) {
	for _, p := range ps {
		g.k.param(p.Type, "p_"+p.Name)
	}
}

// ld loads parameter name of PTX type typ into a new register.
func (g *gen) ld(typ, name string) string {
	k := g.k
	var d string
	switch typ {
	case ".u64":
		d = k.RD()
	case ".f32":
		d = k.F()
	default:
		d = k.R()
	}
	k.op("ld.param%s %s, [p_%s]", typ, d, name)
	return d
}

// shfl returns x combined with its butterfly partner at distance lanes
// (op: max.f32 or add.f32).
func (g *gen) shflReduce(x, op string, dist ...int) string {
	k := g.k
	for _, d := range dist {
		y := k.F()
		k.op("shfl.sync.bfly.b32 %s, %s, %d, 31, -1", y, x, d)
		x = k.fOp(op, x, y)
	}
	return x
}

// keyBlocks returns the key blocks [nlo, nhi) rows [m0, m0+rows) see
// (tile.Mask.KeyBlocks); nhi <= nlo when none.
func (g *gen) keyBlocks(m maskParams, s seqInfo, m0 string, rows, bc int) (nlo, nhi string) {
	k := g.k
	lg := bits.TrailingZeros(uint(bc))
	jlo := k.rOp("add.s32", m0, s.off)
	jlo = k.rOp("sub.s32", jlo, m.left)
	jlo = k.rOp("max.s32", jlo, "0")
	jlo = k.rOp("selp.b32", "0", jlo, m.leftInf)
	jhi := k.rOp("add.s32", m0, s.off)
	jhi = k.rOp("add.s32", jhi, m.right)
	jhi = k.rOp("add.s32", jhi, imm(rows))
	jhi = k.rOp("min.s32", jhi, s.sk)
	jhi = k.rOp("selp.b32", s.sk, jhi, m.rightInf)
	nlo = k.rOp("shr.u32", jlo, imm(lg))
	nhi = k.rOp("max.s32", jhi, "0")
	nhi = k.rOp("add.s32", nhi, imm(bc-1))
	nhi = k.rOp("shr.u32", nhi, imm(lg))
	empty := k.pOp("setp.le.s32", jhi, jlo)
	k.op("selp.b32 %s, %s, %s, %s", nhi, nlo, nhi, empty)
	return nlo, nhi
}

// needsMask returns a predicate: the tile rows [m0, m0+rows) × keys
// [n0, n0+cols) may hold a hidden pair (tile.Mask.NeedsMask):
//
//	n0+cols-1 >= sk  ||  (right >= 0 && n0+cols-1 > m0+off+right)
//	                 ||  (left >= 0 && n0 < m0+rows-1+off-left)
func (g *gen) needsMask(m maskParams, s seqInfo, m0, n0 string, rows, cols int) string {
	k := g.k
	e := k.rOp("add.s32", n0, imm(cols-1))
	p := k.pOp("setp.ge.s32", e, s.sk)
	hiR := k.rOp("add.s32", m0, s.off)
	hiR = k.rOp("add.s32", hiR, m.right)
	q := k.P()
	k.op("setp.gt.and.s32 %s, %s, %s, !%s", q, e, hiR, m.rightInf)
	loR := k.rOp("add.s32", m0, s.off)
	loR = k.rOp("sub.s32", loR, m.left)
	loR = k.rOp("add.s32", loR, imm(rows-1))
	r := k.P()
	k.op("setp.lt.and.s32 %s, %s, %s, !%s", r, n0, loR, m.leftInf)
	k.op("or.pred %s, %s, %s", p, p, q)
	k.op("or.pred %s, %s, %s", p, p, r)
	return p
}

// lse2 converts a natural-log LSE into log2 units for P = 2^(y - lse2),
// mapping -Inf (a row with no visible key) to +Inf so that P = 0.
func (g *gen) lse2(lse string) string {
	k := g.k
	r := k.fOp("mul.f32", lse, fimm(float32(log2e)))
	inf := k.pOp("setp.eq.f32", lse, negInf)
	k.op("selp.f32 %s, %s, %s, %s", r, posInf, r, inf)
	return r
}

// probGrad turns raw scores s and dP into P (in s) and dS (in dp) in place:
//
//	y  = s·scale_log2            or  t = tanh(s·cap_scale), y = cap_log2·t
//	P  = 2^(y - lse2)
//	dS = P·(dP - dsum)·scale     (·(1 - t²) with the softcap)
//
// lse2(i) and dsum(i) return the values for element i of accumulator j.
// The softcap choice is a uniform branch.
func (g *gen) probGrad(sc scoreParams, scale string, s, dp [][4]string, lse2, dsum func(j, i int) string) {
	k := g.k
	capL := k.newLabel("softcap")
	doneL := k.newLabel("pgdone")
	k.op("@%s bra %s", sc.softcap, capL)
	for j := range s {
		for i := range 4 {
			v, d := s[j][i], dp[j][i]
			k.op("fma.rn.f32 %s, %s, %s, %s", v, v, sc.scaleLog2, k.fOp("neg.f32", lse2(j, i)))
			k.op("ex2.approx.ftz.f32 %s, %s", v, v)
			k.op("sub.f32 %s, %s, %s", d, d, dsum(j, i))
			k.op("mul.f32 %s, %s, %s", d, d, v)
			k.op("mul.f32 %s, %s, %s", d, d, scale)
		}
	}
	k.op("bra.uni %s", doneL)
	k.label(capL)
	for j := range s {
		for i := range 4 {
			v, d := s[j][i], dp[j][i]
			a := k.fOp("mul.f32", v, sc.capScale)
			t := g.tanh(a)
			f := k.fOp("fma.rn.f32", t, k.fOp("neg.f32", t), fimm(1)) // 1 - t²
			y := k.fOp("mul.f32", t, sc.capLog2)
			k.op("sub.f32 %s, %s, %s", v, y, lse2(j, i))
			k.op("ex2.approx.ftz.f32 %s, %s", v, v)
			k.op("sub.f32 %s, %s, %s", d, d, dsum(j, i))
			k.op("mul.f32 %s, %s, %s", d, d, v)
			k.op("mul.f32 %s, %s, %s", d, d, scale)
			k.op("mul.f32 %s, %s, %s", d, d, f)
		}
	}
	k.label(doneL)
}

// zeroWhere sets the .f32 registers to 0 where predicate p holds.
func (g *gen) zeroWhere(p string, regs ...string) {
	for _, r := range regs {
		g.k.op("selp.f32 %s, %s, %s, %s", r, zeroF, r, p)
	}
}

// hidden returns a predicate: constant offset c lies outside [lo, hi).
func (g *gen) hidden(lo, hi string, c int) string {
	k := g.k
	p := k.pOp("setp.gt.s32", lo, imm(c))
	k.op("setp.le.or.s32 %s, %s, %d, %s", p, hi, c, p)
	return p
}

// big is the "unbounded" sentinel of key bounds (sequence lengths are < 2^30).
const big = 1 << 30

// keyBounds returns [lo, hi) of the query rows that see key `key` (the
// transpose of rowBounds: key j is visible from i iff
// j-off-right <= i <= j-off+left, and j < sk), both minus colBase.
func (g *gen) keyBounds(m maskParams, s seqInfo, key, colBase string) (lo, hi string) {
	k := g.k
	base := k.rOp("sub.s32", key, s.off)
	lo = k.rOp("sub.s32", base, m.right)
	lo = k.rOp("selp.b32", imm(-big), lo, m.rightInf)
	hi = k.rOp("add.s32", base, m.left)
	hi = k.rOp("add.s32", hi, "1")
	hi = k.rOp("selp.b32", imm(big), hi, m.leftInf)
	past := k.pOp("setp.ge.s32", key, s.sk)
	k.op("selp.b32 %s, %s, %s, %s", hi, imm(-big), hi, past)
	lo = k.rOp("sub.s32", lo, colBase)
	hi = k.rOp("sub.s32", hi, colBase)
	return lo, hi
}
