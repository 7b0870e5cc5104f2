package main

import (
	"fmt"
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
	negInf = "0fFF800000"
	posInf = "0f7F800000"
	zeroF  = "0f00000000"
)

// gen is the state shared by the pieces of one kernel.
type gen struct {
	k       *Kernel
	dt      dtype
	threads int    // block size
	tid     string // %tid.x
	lane    string
	warp    string
	g, t    string // lane>>2 and lane&3: the mma fragment coordinates
	smem    string // shared-memory base address (.u32)
	zero    string // an .f32 0: the C operand of a product's first k-step

	laneOffs map[[3]int]string // (pattern, rowChunks, j) → per-lane offset register
	ldBases  map[ldBase]string // → base + LaneOffset(pattern, lane, rc, 0)
}

// ldBase names a shared base address register and the lane pattern and
// row chunks of the ldmatrix loads made from it.
type ldBase struct {
	base        string
	pattern, rc int
}

// newKernelGen starts kernel name of threads threads: its generator
// (newGen) for dt, with the parameters ps declared.
func newKernelGen(name string, threads int, dt dtype, ps []tile.Param) *gen {
	g := newGen(newKernel(name, threads), dt)
	g.declare(ps)
	return g
}

// exitPast emits the branch to done (the kernel's end) of the threads
// whose x is at or past n (unsigned).
func (g *gen) exitPast(x, n, done string) {
	out := g.k.pOp("setp.ge.u32", x, n)
	g.k.op("@%s bra %s", out, done)
}

func newGen(k *Kernel, dt dtype) *gen {
	g := &gen{k: k, dt: dt, threads: k.threads, laneOffs: map[[3]int]string{}, ldBases: map[ldBase]string{}}
	g.tid = k.rOp("mov.u32", "%tid.x")
	g.lane = k.rOp("and.b32", g.tid, "31")
	g.warp = k.rOp("shr.u32", g.tid, "5")
	g.g = k.rOp("shr.u32", g.lane, "2")
	g.t = k.rOp("and.b32", g.lane, "3")
	g.smem = k.rOp("mov.u32", "smem")
	g.zero = k.fOp("mov.f32", zeroF)
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

// laneOffCol returns the lane's ldmatrix offset for a 16×16 block whose
// first column chunk c8 = c0/8 is in a register (a block column that depends
// on the warp), the lane-independent column part included:
// tile.LaneOffset(pattern, lane, rc, BlockJ(c0)) + (c8 &^ 7)·16; the
// block's row part, BlockBase(r0, 0, rc), stays a constant.
func (g *gen) laneOffCol(pattern, rc int, c8 string) string {
	k := g.k
	j := k.rOp("and.b32", c8, "7")
	off := g.laneOffset(pattern, rc, func(lc string) string {
		return k.rOp("add.u32", lc, j) // 2·BlockJ = c8&7 (c8 even)
	})
	hi := k.rOp("and.b32", c8, "-8")
	hi = k.rOp("shl.b32", hi, "4")
	return k.rOp("add.u32", off, hi)
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
// at shared address base (a register, a multiple of 128) + constant offset
// baseOff (a multiple of 128), with the lane pattern of the operand. It
// returns the four destination registers.
//
// The lane offsets of the four block columns j = BlockJ(c0) differ only in
// bits 5 and 6, the chunk bits that j flips: LaneOffset(j) =
// LaneOffset(0) ^ 32j (the row part is a multiple of 128). The address is
// therefore (base + LaneOffset(0)) ^ 32j plus a constant: one register per
// (base, pattern) instead of one per j, and an xor per load.
func (g *gen) ldsm(base string, baseOff, rc, pattern, r0, c0 int, trans bool) [4]string {
	if baseOff%128 != 0 || rc < 8 {
		panic(fmt.Sprintf("ldsm: tile offset %d is not a multiple of 128 or rows of %d chunks are under 8", baseOff, rc))
	}
	key := ldBase{base, pattern, rc}
	b, ok := g.ldBases[key]
	if !ok {
		b = g.k.rOp("add.u32", base, g.laneOff(pattern, rc, 0))
		g.ldBases[key] = b
	}
	if j := tile.BlockJ(c0); j != 0 {
		b = g.k.rOp("xor.b32", b, imm(32*j))
	}
	return g.ldsmReg(b, baseOff+tile.BlockBase(r0, c0, rc), trans)
}

// ldsmReg emits an ldmatrix.x4 from address a + off.
func (g *gen) ldsmReg(a string, off int, trans bool) [4]string {
	k := g.k
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

// ldsmAt is ldsm with the lane offset in a register (from laneOff or
// laneOffCol) and the constant byte offset off (the lane-independent block
// base included).
func (g *gen) ldsmAt(base, laneOff string, off int, trans bool) [4]string {
	return g.ldsmReg(g.k.rOp("add.u32", base, laneOff), off, trans)
}

// mma emits c += a·b (m16n8k16, f32 accumulators in place), or c = a·b
// when first (the C operand is the zero register: no accumulator needs
// clearing before a product).
func (g *gen) mma(c [4]string, a [4]string, b0, b1 string, first bool) {
	in := c
	if first {
		in = [4]string{g.zero, g.zero, g.zero, g.zero}
	}
	g.k.op("mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%s, %s, %s, %s}, {%s, %s, %s, %s}, {%s, %s}, {%s, %s, %s, %s}",
		g.dt.name, g.dt.name, c[0], c[1], c[2], c[3], a[0], a[1], a[2], a[3], b0, b1, in[0], in[1], in[2], in[3])
}

// mma16 emits c += a·b (c = a·b when first) for a 16-column B block loaded
// by one ldmatrix.x4 (registers 0, 1: n-tile 0; 2, 3: n-tile 1) into the
// accumulator n-tiles c[0] and c[1].
func (g *gen) mma16(c [][4]string, a, b [4]string, first bool) {
	g.mma(c[0], a, b[0], b[1], first)
	g.mma(c[1], a, b[2], b[3], first)
}

// product emits acc[mt] += A_mt·B for the warp's m-tiles mt < len(acc),
// nk steps of 16 along k and nj n-tiles of 16: per step kk the A fragments
// a(mt, kk) of every m-tile, then per n-tile j one B fragment b(kk, j)
// that the m-tiles' MMAs into acc[mt][2j:] share; with zero the sums start
// from 0 at kk = 0.
func (g *gen) product(nk, nj int, acc [][][4]string, a func(mt, kk int) [4]string, b func(kk, j int) [4]string, zero bool) {
	for kk := range nk {
		as := make([][4]string, len(acc))
		for mt := range as {
			as[mt] = a(mt, kk)
		}
		for j := range nj {
			bf := b(kk, j)
			for mt := range as {
				g.mma16(acc[mt][2*j:], as[mt], bf, zero && kk == 0)
			}
		}
	}
}

// pack returns a .b32 with lo in the low and hi in the high 16 bits.
func (g *gen) pack(lo, hi string) string {
	return g.k.rOp(g.dt.cvt, hi, lo)
}

// acc4 allocates accumulators [n][4] set to 0.
func (g *gen) acc4(n int) [][4]string {
	a := g.regs4(n)
	g.zeroAcc(a)
	return a
}

// regs4 allocates accumulators [n][4] without initialising them.
func (g *gen) regs4(n int) [][4]string {
	a := make([][4]string, n)
	for i := range a {
		for j := range a[i] {
			a[i][j] = g.k.F()
		}
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
func (g *gen) seq(b string) seqInfo {
	k := g.k
	var s seqInfo
	s.qStart, s.kStart = k.R(), k.R()
	k.op("mov.u32 %s, 0", s.qStart)
	k.op("mov.u32 %s, 0", s.kStart)
	s.sq, s.sk = g.ld(".u32", "sq"), g.ld(".u32", "sk")
	cq, ck := g.ld(".u64", "cu_q"), g.ld(".u64", "cu_k")
	isVar := k.pOp("setp.ne.u64", cq, "0")
	bo := k.rdOp("mul.wide.u32", b, "4")
	aq := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cq), bo)
	ak := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", ck), bo)
	q1, k1 := k.R(), k.R()
	k.op("@%s ld.global.u32 %s, [%s]", isVar, s.qStart, aq)
	k.op("@%s ld.global.u32 %s, [%s+4]", isVar, q1, aq)
	k.op("@%s ld.global.u32 %s, [%s]", isVar, s.kStart, ak)
	k.op("@%s ld.global.u32 %s, [%s+4]", isVar, k1, ak)
	k.op("@%s sub.u32 %s, %s, %s", isVar, s.sq, q1, s.qStart)
	k.op("@%s sub.u32 %s, %s, %s", isVar, s.sk, k1, s.kStart)
	cu := g.ld(".u64", "used_k")
	used := k.pOp("setp.ne.u64", cu, "0")
	au := k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", cu), bo)
	k.op("@%s ld.global.u32 %s, [%s]", used, s.sk, au)
	s.off = k.rOp("sub.s32", s.sk, s.sq)
	return s
}

// rowBase returns the global byte address of row 0 of a sequence's head in
// a [batch, seq, heads, D] (or packed [total, heads, D]) tensor:
// ptr + ((b*batchStride + start*rowStride + head*D) * elemBytes).
func (g *gen) rowBase(ptr, b, batchStride, start, rowStride, head string, d, elemBytes int) string {
	k := g.k
	p := k.rdOp("cvta.to.global.u64", g.ld(".u64", ptr))
	b64 := k.rdOp("cvt.u64.u32", b)
	e := k.rdOp("mul.lo.u64", b64, g.ld(".u64", batchStride))
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", start, rowStride))
	e = k.rdOp("add.s64", e, k.rdOp("mul.wide.u32", head, imm(d)))
	e = k.rdOp("shl.b64", e, imm(bits.TrailingZeros(uint(elemBytes))))
	return k.rdOp("add.s64", p, e)
}

// statRows returns the global addresses of row 0 of this (batch, head)'s
// LSE and (if dsum) dsum rows, float32 laid out as lse_bs and lse_hs say
// (element row at +4·row).
func (g *gen) statRows(b, h, qStart string, dsum bool) (lseRow, dsumRow string) {
	k := g.k
	b64 := k.rdOp("cvt.u64.u32", b)
	li := k.rdOp("mul.lo.u64", b64, g.ld(".u64", "lse_bs"))
	li = k.rdOp("add.s64", li, k.rdOp("mul.wide.u32", h, g.ld(".u32", "lse_hs")))
	li = k.rdOp("add.s64", li, k.rdOp("cvt.u64.u32", qStart))
	li = k.rdOp("shl.b64", li, "2")
	lseRow = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "lse")), li)
	if dsum {
		dsumRow = k.rdOp("add.s64", k.rdOp("cvta.to.global.u64", g.ld(".u64", "dsum")), li)
	}
	return lseRow, dsumRow
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

// shflReduce returns x combined with its butterfly partners at the given
// lane distances (op: max.f32 or add.f32).
func (g *gen) shflReduce(x, op string, dist ...int) string {
	k := g.k
	for _, d := range dist {
		y := k.F()
		k.op("shfl.sync.bfly.b32 %s, %s, %d, 31, -1", y, x, d)
		x = k.fOp(op, x, y)
	}
	return x
}

// tree combines the values with op (max.f32 or add.f32) pairwise, a tree of
// depth log2(len) rather than a chain of len-1 dependent instructions.
func (g *gen) tree(op string, xs []string) string {
	for len(xs) > 1 {
		var next []string
		for i := 0; i+1 < len(xs); i += 2 {
			next = append(next, g.k.fOp(op, xs[i], xs[i+1]))
		}
		if len(xs)%2 == 1 {
			next = append(next, xs[len(xs)-1])
		}
		xs = next
	}
	return xs[0]
}

// reloadBlock re-reads the block's head and batch element and the first
// query row of its sequence, for an epilogue: reading them again costs a
// few instructions once, keeping them in registers across the main loop
// costs registers (ptxas spilled them).
func (g *gen) reloadBlock() (h, b, qStart, sq string) {
	k := g.k
	h = k.rOp("mov.u32", "%ctaid.y")
	b = k.rOp("mov.u32", "%ctaid.z")
	qStart, sq = g.seqQ(b)
	return h, b, qStart, sq
}

// scorePair emits the backward's two products of a tile, one 16-wide
// slice s of the head dim d at a time: acc[0][2j:] += a0(s)·b(false, s, j)
// and acc[1][2j:] += a1(s)·b(true, s, j) for the n/16 column blocks j, the
// first slice starting the sums (S and dP in the dQ kernel, Sᵀ and dPᵀ in
// the dK/dV kernel). a returns both left operands of slice s.
func (g *gen) scorePair(d, n int, acc [2][][4]string, a func(s int) (a0, a1 [4]string), b func(second bool, s, j int) [4]string) {
	for s := range d / 16 {
		a0, a1 := a(s)
		for j := range n / 16 {
			g.mma16(acc[0][2*j:], a0, b(false, s, j), s == 0)
			g.mma16(acc[1][2*j:], a1, b(true, s, j), s == 0)
		}
	}
}

// blockStart reads the block's head (ctaid.y), batch element (ctaid.z)
// and sequence geometry, and returns the first row of block idx of n rows
// (of keys with keys, else of queries); it branches to done when that row
// is past the sequence.
func (g *gen) blockStart(idx string, n int, keys bool, done string) (h, b string, s seqInfo, first string) {
	k := g.k
	h = k.rOp("mov.u32", "%ctaid.y")
	b = k.rOp("mov.u32", "%ctaid.z")
	s = g.seq(b)
	first = k.rOp("mul.lo.u32", idx, imm(n))
	rows := s.sq
	if keys {
		rows = s.sk
	}
	g.exitPast(first, rows, done)
	return h, b, s, first
}

// finish emits main, skipped when the block has no tile to visit
// (lo ≥ hi), then epilogue, then the done label that setup branches to and
// the kernel's return.
func (g *gen) finish(lo, hi, done string, main, epilogue func()) {
	k := g.k
	epi := k.newLabel("epilogue")
	empty := k.pOp("setp.ge.s32", lo, hi)
	k.op("@%s bra %s", empty, epi)
	main()
	k.label(epi)
	epilogue()
	g.end(done)
}

// end emits the done label, where the threads and blocks with nothing (more)
// to do branch, and the kernel's return; it returns the kernel.
func (g *gen) end(done string) *Kernel {
	g.k.label(done)
	g.k.op("ret")
	return g.k
}

// blockIndex returns the block's row-block index along x, the heaviest
// first when reversed (tile.Grid).
func (g *gen) blockIndex(reversed bool) string {
	k := g.k
	x := k.rOp("mov.u32", "%ctaid.x")
	if !reversed {
		return x
	}
	n := k.rOp("mov.u32", "%nctaid.x")
	n = k.rOp("sub.u32", n, "1")
	return k.rOp("sub.u32", n, x)
}

// log2 returns the base-2 logarithm of a power of two.
func log2(n int) int {
	if n <= 0 || n&(n-1) != 0 {
		panic(fmt.Sprintf("%d is not a power of two", n))
	}
	return bits.TrailingZeros(uint(n))
}
