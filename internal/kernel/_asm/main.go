// Command _asm generates the amd64 assembly of package kernel with avo:
//
//	cd internal/kernel/_asm && go run . -out ../kernel_amd64.s -stubs ../kernel_amd64_stubs.go -pkg kernel
//
// (or `go generate ./internal/kernel`). It lives in its own module so that
// the main module does not depend on avo.
//
// Every kernel is generated twice from the same Go code: once for AVX-512
// (zmm registers, 16 float32 lanes) and once for AVX2+FMA (ymm registers, 8
// lanes), described by an isa value. The Go wrappers in impl_amd64.go check
// every length precondition before calling these functions; the assembly
// trusts its arguments.
package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// isa describes one vector instruction set.
type isa struct {
	Suffix string            // appended to the function names
	Lanes  int               // float32 lanes per vector register
	Vec    func() VecVirtual // allocates a virtual vector register
	EVEX   bool              // AVX-512: 32 registers, opmasks, VSCALEFPS
}

// Bytes is the size of one vector register in bytes.
func (s isa) Bytes() int { return 4 * s.Lanes }

var (
	isaAVX512 = isa{Suffix: "AVX512", Lanes: 16, Vec: ZMM, EVEX: true}
	isaAVX2   = isa{Suffix: "AVX2", Lanes: 8, Vec: YMM, EVEX: false}
)

// GEMM register blocking. The microkernel keeps an mr × (nv·Lanes) block of
// C in mr·nv accumulator registers:
//
//	AVX-512: 6 rows × 2 zmm = 6 × 32 floats, 12 accumulators
//	AVX2:    6 rows × 2 ymm = 6 × 16 floats, 12 accumulators
//
// Per step p of the k loop it loads the nv vectors B[p, j:j+nv·Lanes],
// broadcasts each of the mr scalars A[i, p] and issues mr·nv independent
// VFMADD231PS. 12 independent chains cover the FMA latency (4 cycles) times
// its throughput (1 zmm or 2 ymm per cycle on Zen 4) with room to spare.
const mr = 6

func main() {
	decodeMain() // with -decode: the kernels of decode.go, then exit
	ConstraintExpr("amd64,!purego")

	genExpTable()
	for _, s := range []isa{isaAVX512, isaAVX2} {
		for _, k := range []gemmKind{kindABt, kindAB, kindAtB} {
			genGemm(s, k)
		}
		genExpSum(s)
		genMax(s)
		genScale(s)
		genDsFromDp(s)
		genFMAPeak(s)
	}
	genDot4T()
	philoxTab = genPhiloxTable()
	genPhilox8()
	genSoftcapTable()
	genSoftcap()
	genALiBi()
	// Half precision: conversions, bfloat16 products, AMX, packers and
	// transposes (convert.go, bf16.go, amx.go, pack.go, transpose.go).
	genConvert()
	genBF16()
	genAMXAll()
	genPack()
	Generate()
}

// ---------------------------------------------------------------------------
// Matrix products.

type gemmKind int

const (
	kindABt gemmKind = iota // C = A·Bᵀ, Bᵀ packed in strips of 16 columns
	kindAB                  // C += A·B
	kindAtB                 // C += Aᵀ·B
)

// gemm holds the state of one matrix-product function being generated.
type gemm struct {
	s    isa
	kind gemmKind
	name string

	// Live across the whole function.
	cCol  GPVirtual // &C[0, j0] of the current column block
	bCol  GPVirtual // start of B for column j0 (packed strip or &B[0, j0])
	nLeft GPVirtual // columns still to do

	// Live across one pass over the rows of a column block.
	aRow  GPVirtual // &A[i0, 0] (&A[0, i0] for Aᵀ·B)
	cRow  GPVirtual // &C[i0, j0]
	mLeft GPVirtual // rows still to do
}

func genGemm(s isa, kind gemmKind) {
	g := &gemm{s: s, kind: kind}
	switch kind {
	case kindABt:
		g.name = "mulABt" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int)")
		Doc(g.name+" sets C = A·Bᵀ (see Impl.MulABt); bt is packed by PackBt.",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	case kindAB:
		g.name = "mulAddAB" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)")
		Doc(g.name+" adds A·B to C (see Impl.MulAddAB).",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	case kindAtB:
		g.name = "mulAddAtB" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)")
		Doc(g.name+" adds Aᵀ·B to C (see Impl.MulAddAtB).",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	}
	Pragma("noescape")

	g.cCol = Load(Param("c").Base(), GP64()).(GPVirtual)
	if kind == kindABt {
		g.bCol = Load(Param("bt").Base(), GP64()).(GPVirtual)
	} else {
		g.bCol = Load(Param("b").Base(), GP64()).(GPVirtual)
	}
	g.nLeft = Load(Param("n"), GP64()).(GPVirtual)

	// Column blocks of the full microkernel width, then (AVX-512 only) one
	// block of 16 columns when n%32 == 16.
	width := 2 * s.Lanes
	g.columnLoop(2, width)
	if width > 16 {
		g.columnLoop(1, s.Lanes)
	}
	VZEROUPPER()
	RET()
}

// columnLoop emits: for nLeft >= width { all rows of C[:, j0:j0+width]; advance }.
func (g *gemm) columnLoop(nv, width int) {
	top := fmt.Sprintf("cols%d", width)
	done := fmt.Sprintf("cols%dDone", width)
	Label(top)
	CMPQ(g.nLeft, U32(width))
	JL(LabelRef(done))

	g.rowPass(nv)

	// Advance C and B to the next column block.
	ADDQ(U32(4*width), g.cCol)
	if g.kind == kindABt {
		// width/16 packed strips of k·16 floats each.
		t := Load(Param("k"), GP64())
		SHLQ(Imm(uint64(log2(4*16*width/16))), t)
		ADDQ(t, g.bCol)
	} else {
		ADDQ(U32(4*width), g.bCol)
	}
	SUBQ(U32(width), g.nLeft)
	JMP(LabelRef(top))
	Label(done)
}

// rowPass emits the row loop over one column block of nv vectors: full
// tiles of mr rows, then one tile of the remaining m%mr rows.
func (g *gemm) rowPass(nv int) {
	g.aRow = Load(Param("a").Base(), GP64()).(GPVirtual)
	g.cRow = GP64()
	MOVQ(g.cCol, g.cRow)
	g.mLeft = Load(Param("m"), GP64()).(GPVirtual)

	rowLoop(fmt.Sprintf("v%d", nv), g.mLeft, func(r int) { g.tile(r, nv) }, func() {
		// Advance A and C by mr rows.
		if g.kind == kindAtB {
			ADDQ(Imm(4*mr), g.aRow) // row i of Aᵀ is column i of A
		} else {
			t := Load(Param("lda"), GP64())
			IMUL3Q(Imm(4*mr), t, t)
			ADDQ(t, g.aRow)
		}
		t := Load(Param("ldc"), GP64())
		IMUL3Q(Imm(4*mr), t, t)
		ADDQ(t, g.cRow)
	})
}

// rowLoop emits a loop over the rows of one column block, its labels
// tagged with tag: while mLeft >= mr, tile(mr) then advance (which moves A
// and C on by mr rows); then one tile(r) of the remaining r = mLeft < mr
// rows, if any.
func rowLoop(tag string, mLeft Register, tile func(r int), advance func()) {
	Label("rows" + tag)
	CMPQ(mLeft, Imm(mr))
	JL(LabelRef("rows" + tag + "Tail"))
	tile(mr)
	advance()
	SUBQ(Imm(mr), mLeft)
	JMP(LabelRef("rows" + tag))

	// Row tail: one tile with exactly mLeft (< mr) rows.
	Label("rows" + tag + "Tail")
	for r := mr - 1; r >= 1; r-- {
		next := fmt.Sprintf("rows%sTail%d", tag, r)
		CMPQ(mLeft, U32(r))
		JNE(LabelRef(next))
		tile(r)
		JMP(LabelRef("rows" + tag + "Done"))
		Label(next)
	}
	Label("rows" + tag + "Done")
}

// tile emits the microkernel for an r × (nv·Lanes) block of C at cRow,
// reading A from aRow and B from bCol.
func (g *gemm) tile(r, nv int) {
	s := g.s
	tag := fmt.Sprintf("r%dv%d", r, nv)
	Commentf("Microkernel: %d rows × %d columns, %d accumulators.", r, nv*s.Lanes, r*nv)

	// acc[i][v] holds C[i0+i, j0+v·Lanes : j0+(v+1)·Lanes].
	acc := make([][]VecVirtual, r)
	for i := range acc {
		acc[i] = make([]VecVirtual, nv)
		for v := range acc[i] {
			acc[i][v] = s.Vec()
		}
	}
	if g.kind == kindABt {
		// C is overwritten: start from zero.
		for i := range acc {
			for v := range acc[i] {
				zero(s, acc[i][v])
			}
		}
	} else {
		// C is accumulated into: start from the current values.
		ldc := Load(Param("ldc"), GP64())
		SHLQ(Imm(2), ldc)
		cp := GP64()
		MOVQ(g.cRow, cp)
		for i := range acc {
			for v := range acc[i] {
				VMOVUPS(Mem{Base: cp, Disp: v * s.Bytes()}, acc[i][v])
			}
			if i < r-1 {
				ADDQ(ldc, cp)
			}
		}
	}

	// Pointers that walk along k.
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	ap := GP64() // A[i0, p] (A[p, i0] for Aᵀ·B)
	MOVQ(g.aRow, ap)
	var a3 GPVirtual // A[i0+3, p]: rows 3..5 are addressed from here
	if g.kind != kindAtB && r > 3 {
		a3 = GP64()
		LEAQ(Mem{Base: ap, Index: lda, Scale: 2}, a3)
		ADDQ(lda, a3)
	}
	bp := GP64() // B[p, j0]
	MOVQ(g.bCol, bp)
	var bs GPVirtual // ABt: bytes per packed strip; AB/AtB: bytes per row of B
	switch {
	case g.kind == kindABt && nv*s.Lanes > 16:
		bs = Load(Param("k"), GP64()).(GPVirtual)
		SHLQ(Imm(6), bs)
	case g.kind != kindABt:
		bs = Load(Param("ldb"), GP64()).(GPVirtual)
		SHLQ(Imm(2), bs)
	}

	// aAddr(i) is the address of the scalar A[i0+i, p].
	aAddr := func(i int) Mem {
		if g.kind == kindAtB {
			return Mem{Base: ap, Disp: 4 * i}
		}
		base := Register(ap)
		if i >= 3 {
			base, i = a3, i-3
		}
		if i == 0 {
			return Mem{Base: base}
		}
		return Mem{Base: base, Index: lda, Scale: uint8(i)}
	}
	// bAddr(v) is the address of the vector B[p, j0+v·Lanes : +Lanes].
	bAddr := func(v int) Mem {
		col := v * s.Lanes
		if g.kind == kindABt {
			m := Mem{Base: bp, Disp: 4 * (col % 16)}
			if col >= 16 { // second packed strip (col/16 == 1)
				m.Index, m.Scale = bs, 1
			}
			return m
		}
		return Mem{Base: bp, Disp: 4 * col}
	}

	pc := Load(Param("k"), GP64())
	TESTQ(pc, pc)
	JE(LabelRef(tag + "store"))
	Label(tag + "loop")
	bv := make([]VecVirtual, nv)
	for v := range bv {
		bv[v] = s.Vec()
		VMOVUPS(bAddr(v), bv[v])
	}
	for i := 0; i < r; i++ {
		// A fresh virtual register per broadcast; its live range is short,
		// so the allocator reuses one physical register for all of them.
		bc := s.Vec()
		VBROADCASTSS(aAddr(i), bc)
		for v := range bv {
			VFMADD231PS(bv[v], bc, acc[i][v])
		}
	}
	// Step p → p+1.
	switch g.kind {
	case kindABt:
		ADDQ(Imm(4*16), bp)
	default:
		ADDQ(bs, bp)
	}
	if g.kind == kindAtB {
		ADDQ(lda, ap)
	} else {
		ADDQ(Imm(4), ap)
		if a3 != nil {
			ADDQ(Imm(4), a3)
		}
	}
	DECQ(pc)
	JNE(LabelRef(tag + "loop"))

	Label(tag + "store")
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	cp := GP64()
	MOVQ(g.cRow, cp)
	for i := range acc {
		for v := range acc[i] {
			VMOVUPS(acc[i][v], Mem{Base: cp, Disp: v * s.Bytes()})
		}
		if i < r-1 {
			ADDQ(ldc, cp)
		}
	}
}

// zero sets v to zero. VXORPS on zmm needs AVX512DQ; VPSUBD needs only
// AVX512F, and avo (like the CPU) knows that v-v does not read v.
func zero(s isa, v VecVirtual) {
	if s.EVEX {
		VPSUBD(v, v, v)
	} else {
		VXORPS(v, v, v)
	}
}

func log2(x int) int {
	n := 0
	for 1<<n < x {
		n++
	}
	if 1<<n != x {
		panic("not a power of two")
	}
	return n
}

// ---------------------------------------------------------------------------
// Exponential.

// Constants of the float32 exponential; must equal those of generic.go.
const (
	expLog2e = 1.44269504088896341
	expLn2Hi = 0.693359375
	expLn2Lo = -2.12194440e-4
	expMin   = -87.33654
	expMax   = 88.37626
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
)

// Indexes into the constant table; each entry is one value repeated in
// all 16 lanes (64 bytes), so either ISA can use it as a vector operand.
const (
	cLog2e = iota
	cLn2Hi
	cLn2Lo
	cP0
	cP1
	cP2
	cP3
	cP4
	cP5
	cOne // also the bit pattern 127<<23, the exponent bias in place
	cMin
	cMax
	cInf
	numConsts
)

var expTab Mem

func genExpTable() {
	vals := [numConsts]float32{
		cLog2e: expLog2e, cLn2Hi: expLn2Hi, cLn2Lo: expLn2Lo,
		cP0: expP0, cP1: expP1, cP2: expP2, cP3: expP3, cP4: expP4, cP5: expP5,
		cOne: 1, cMin: expMin, cMax: expMax, cInf: float32(math.Inf(1)),
	}
	expTab = GLOBL("expconsts", RODATA|NOPTR)
	for i, v := range vals {
		for l := 0; l < 16; l++ {
			DATA(64*i+4*l, U32(math.Float32bits(v)))
		}
	}
}

// broadcastParam loads the float32 parameter name into all lanes of a new
// vector register.
func broadcastParam(s isa, name string) VecVirtual {
	x := Load(Param(name), XMM())
	v := s.Vec()
	VBROADCASTSS(x, v)
	return v
}

func genExpSum(s isa) {
	name := "expSum" + s.Suffix
	TEXT(name, NOSPLIT, "func(x []float32, scale, sub float32) float32")
	Pragma("noescape")
	Doc(name+" sets x[j] = exp(scale*x[j] - sub) and returns their sum (see Impl.ExpSum).",
		"len(x) must be a multiple of 16.")

	xp := Load(Param("x").Base(), GP64())
	nl := Load(Param("x").Len(), GP64())
	scale := broadcastParam(s, "scale")
	sub := broadcastParam(s, "sub")

	// c(i) is constant i as the memory-or-register operand of an
	// instruction. AVX-512 has registers to spare and keeps every constant
	// in one. AVX2 has 16 registers: it keeps the constants used most
	// (and those that must be registers) and reads the polynomial's from
	// the table; with every constant in memory the loop was bound by loads
	// (16 per vector), at a third of the speed.
	var creg [numConsts]VecVirtual
	inReg := func(i int) bool {
		if s.EVEX {
			return true
		}
		switch i {
		case cLog2e, cLn2Hi, cOne, cMin, cMax:
			return true
		}
		return false
	}
	for i := range creg {
		if inReg(i) {
			creg[i] = s.Vec()
			VMOVUPS(expTab.Offset(64*i), creg[i])
		}
	}
	c := func(i int) Op {
		if inReg(i) {
			return creg[i]
		}
		return expTab.Offset(64 * i)
	}

	// exp computes one vector at byte offset off of xp in place and adds the
	// result to acc.
	exp := func(off int, acc VecVirtual) {
		if !s.EVEX {
			expAVX2(s, xp, off, acc, scale, sub, c)
			return
		}
		t := s.Vec()
		VMOVUPS(Mem{Base: xp, Disp: off}, t)
		VFMSUB213PS(sub, scale, t) // t = scale*t - sub
		r, n, p, r2 := s.Vec(), s.Vec(), s.Vec(), s.Vec()
		// r = t clamped so that 2^n stays finite. VMINPS returns its first
		// (Go-order) operand when either is NaN, so NaN survives.
		VMINPS(t, c(cMax), r)
		// n = round(r·log2 e), to nearest even.
		VMULPS(c(cLog2e), r, n)
		VRNDSCALEPS(Imm(0), n, n)
		// r -= n·ln2, in two steps (ln2hi has few bits so n·ln2hi is exact).
		VFNMADD231PS(c(cLn2Hi), n, r)
		VFNMADD231PS(c(cLn2Lo), n, r)
		// p = ((((P0·r + P1)·r + P2)·r + P3)·r + P4)·r + P5, Horner's rule.
		VMOVUPS(c(cP0), p)
		for _, k := range []int{cP1, cP2, cP3, cP4, cP5} {
			VFMADD213PS(c(k), r, p) // p = p*r + Pk
		}
		// p = p·r² + r + 1 ≈ exp(r).
		VMULPS(r, r, r2)
		VFMADD213PS(r, r2, p)
		VADDPS(c(cOne), p, p)
		// p·2^n, forced to 0 where t < ExpMin (true also for -Inf; false
		// for NaN, which propagates through p).
		k1 := K()
		VCMPPS(Imm(0x15), c(cMin), t, k1) // NLT_UQ: !(t < ExpMin)
		VSCALEFPS_Z(n, p, k1, p)
		// +Inf where t > ExpMax.
		k2 := K()
		VCMPPS(Imm(0x1e), c(cMax), t, k2) // GT_OQ
		VMOVAPS(c(cInf), k2, p)
		VMOVUPS(p, Mem{Base: xp, Disp: off})
		VADDPS(p, acc, acc)
	}

	// AVX-512: two vectors per iteration into two accumulators; AVX2 has
	// no registers for a second chain. Out-of-order execution overlaps the
	// long dependency chains of successive iterations either way.
	u := 1
	if s.EVEX {
		u = 2
	}
	acc := make([]VecVirtual, u)
	for i := range acc {
		acc[i] = s.Vec()
		zero(s, acc[i])
	}
	Label("loop")
	CMPQ(nl, U32(u*s.Lanes))
	JL(LabelRef("tail"))
	for i := range acc {
		exp(i*s.Bytes(), acc[i])
	}
	ADDQ(U32(u*s.Bytes()), xp)
	SUBQ(U32(u*s.Lanes), nl)
	JMP(LabelRef("loop"))
	Label("tail")
	for i := 1; i < u; i++ {
		VADDPS(acc[i], acc[0], acc[0])
	}
	Label("tailLoop")
	CMPQ(nl, U32(s.Lanes))
	JL(LabelRef("done"))
	exp(0, acc[0])
	ADDQ(U32(s.Bytes()), xp)
	SUBQ(U32(s.Lanes), nl)
	JMP(LabelRef("tailLoop"))
	Label("done")
	x := reduce(s, acc[0], VADDPS)
	VADDSS(x.shuf, x.v, x.v)
	Store(x.v, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// expAVX2 computes exp of the vector at byte offset off of xp in place and
// adds it to acc. The loop it sits in is bound by the latency of this chain
// (the FP scheduler holds only two or three iterations), so the chain is
// kept short: no clamping in front (lanes outside [ExpMin, ExpMax] are
// fixed at the end, off the chain) and the polynomial by Estrin's scheme.
func expAVX2(s isa, xp Register, off int, acc, scale, sub VecVirtual, c func(int) Op) {
	t := s.Vec()
	VMOVUPS(Mem{Base: xp, Disp: off}, t)
	VFMSUB213PS(sub, scale, t) // t = scale*t - sub
	q := expCoreAVX2(t, c)
	r2 := s.Vec()
	// 0 where t < ExpMin (incl. -Inf).
	VCMPPS(Imm(0x11), c(cMin), t, r2) // LT_OQ
	VANDNPS(q, r2, q)
	// t+Inf (= +Inf, or NaN for NaN) where t > ExpMax or t is NaN.
	VCMPPS(Imm(0x16), c(cMax), t, r2) // NLE_UQ
	VADDPS(c(cInf), t, t)
	VBLENDVPS(r2, t, q, q) // q = r2 ? t : q
	VMOVUPS(q, Mem{Base: xp, Disp: off})
	VADDPS(q, acc, acc)
}

// expCoreAVX2 returns e^t for the lanes of t in [ExpMin, ExpMax] (others
// are garbage, to be fixed by the caller): n = round(t·log2 e), r = t − n·ln2
// in two steps (ln2hi has few bits so n·ln2hi is exact), e^r by a degree-6
// polynomial evaluated by Estrin's scheme (short dependency chain), and 2^n
// built from its exponent bits. c gives the constants of expTab.
func expCoreAVX2(t VecVirtual, c func(int) Op) VecVirtual {
	n := YMM()
	VMULPS(c(cLog2e), t, n)
	VROUNDPS(Imm(8), n, n)
	r := YMM()
	VMOVAPS(t, r)
	VFNMADD231PS(c(cLn2Hi), n, r)
	VFNMADD231PS(c(cLn2Lo), n, r)
	// q = P5 + P4·r + P3·r² + P2·r³ + P1·r⁴ + P0·r⁵
	//   = (P4·r + P5) + r²·((P2·r + P3) + r²·(P0·r + P1))
	a, b, q, r2 := YMM(), YMM(), YMM(), YMM()
	VMULPS(r, r, r2)
	VMOVUPS(c(cP4), a)
	VFMADD213PS(c(cP5), r, a)
	VMOVUPS(c(cP2), b)
	VFMADD213PS(c(cP3), r, b)
	VMOVUPS(c(cP0), q)
	VFMADD213PS(c(cP1), r, q)
	VFMADD213PS(b, r2, q) // q = q·r² + b
	VFMADD213PS(a, r2, q) // q = q·r² + a
	// e^r ≈ q·r² + r + 1.
	VFMADD213PS(r, r2, q)
	VADDPS(c(cOne), q, q)
	// 2^n = float32 bits (n+127)<<23, valid for n in [-126, 127].
	VCVTPS2DQ(n, n)
	VPSLLD(Imm(23), n, n)
	VPADDD(c(cOne), n, n)
	VMULPS(n, q, q)
	return q
}

// reduced is a vector folded down to lanes 0 and 1 of v (v) and the same
// with lanes swapped (shuf); op(shuf, v) on the scalar finishes it.
type reduced struct{ v, shuf Register }

// reduce folds the lanes of v with the packed operation op (VADDPS or
// VMAXPS) down to two values, see reduced.
func reduce(s isa, v VecVirtual, op func(...Op)) reduced {
	y := v.AsY()
	if s.EVEX {
		hi := YMM()
		VEXTRACTF64X4(Imm(1), v, hi)
		op(hi, y, hi)
		y = hi
	}
	x := XMM()
	if s.EVEX {
		VEXTRACTF32X4(Imm(1), y, x)
	} else {
		VEXTRACTF128(Imm(1), y, x)
	}
	op(x, y.(Vec).AsX(), x)
	t := XMM()
	VPERMILPS(Imm(0x4e), x, t) // swap 64-bit halves
	op(t, x, x)
	VPERMILPS(Imm(0xb1), x, t) // swap adjacent lanes
	return reduced{v: x, shuf: t}
}

// ---------------------------------------------------------------------------
// Row reductions and elementwise kernels.

func genMax(s isa) {
	name := "max" + s.Suffix
	TEXT(name, NOSPLIT, "func(x []float32) float32")
	Pragma("noescape")
	Doc(name+" returns the largest element of x (see Impl.Max).",
		"len(x) must be a positive multiple of 16.")
	xp := Load(Param("x").Base(), GP64())
	nl := Load(Param("x").Len(), GP64())
	const u = 4
	var acc [u]VecVirtual
	for i := range acc {
		acc[i] = s.Vec()
		VMOVUPS(Mem{Base: xp}, acc[i])
	}
	Label("loop")
	CMPQ(nl, U32(u*s.Lanes))
	JL(LabelRef("tail"))
	for i := range acc {
		VMAXPS(Mem{Base: xp, Disp: i * s.Bytes()}, acc[i], acc[i])
	}
	ADDQ(U32(u*s.Bytes()), xp)
	SUBQ(U32(u*s.Lanes), nl)
	JMP(LabelRef("loop"))
	Label("tail")
	CMPQ(nl, U32(s.Lanes))
	JL(LabelRef("done"))
	VMAXPS(Mem{Base: xp}, acc[0], acc[0])
	ADDQ(U32(s.Bytes()), xp)
	SUBQ(U32(s.Lanes), nl)
	JMP(LabelRef("tail"))
	Label("done")
	VMAXPS(acc[1], acc[0], acc[0])
	VMAXPS(acc[3], acc[2], acc[2])
	VMAXPS(acc[2], acc[0], acc[0])
	x := reduce(s, acc[0], VMAXPS)
	VMAXSS(x.shuf, x.v, x.v)
	Store(x.v, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// elementwise emits a loop over n floats at 4 vectors per iteration, then
// one vector per iteration; body(off) handles the vector at byte offset off
// of the pointers it closes over, and step(bytes) advances them.
func elementwise(s isa, n Register, body func(off int), step func(bytes int)) {
	const u = 4
	Label("loop")
	CMPQ(n, U32(u*s.Lanes))
	JL(LabelRef("tail"))
	for i := 0; i < u; i++ {
		body(i * s.Bytes())
	}
	step(u * s.Bytes())
	SUBQ(U32(u*s.Lanes), n)
	JMP(LabelRef("loop"))
	Label("tail")
	CMPQ(n, U32(s.Lanes))
	JL(LabelRef("done"))
	body(0)
	step(s.Bytes())
	SUBQ(U32(s.Lanes), n)
	JMP(LabelRef("tail"))
	Label("done")
	VZEROUPPER()
	RET()
}

func genScale(s isa) {
	name := "scale" + s.Suffix
	TEXT(name, NOSPLIT, "func(x []float32, a float32)")
	Pragma("noescape")
	Doc(name+" multiplies x by a in place (see Impl.Scale).",
		"len(x) must be a multiple of 16.")
	xp := Load(Param("x").Base(), GP64())
	nl := Load(Param("x").Len(), GP64())
	a := broadcastParam(s, "a")
	elementwise(s, nl, func(off int) {
		v := s.Vec()
		VMULPS(Mem{Base: xp, Disp: off}, a, v)
		VMOVUPS(v, Mem{Base: xp, Disp: off})
	}, func(bytes int) {
		ADDQ(U32(bytes), xp)
	})
}

func genDsFromDp(s isa) {
	name := "dsFromDp" + s.Suffix
	TEXT(name, NOSPLIT, "func(dp, p []float32, d float32)")
	Pragma("noescape")
	Doc(name+" sets dp[j] = p[j] * (dp[j] - d) (see Impl.DsFromDp).",
		"len(p) >= len(dp), a multiple of 16.")
	dpp := Load(Param("dp").Base(), GP64())
	pp := Load(Param("p").Base(), GP64())
	nl := Load(Param("dp").Len(), GP64())
	d := broadcastParam(s, "d")
	elementwise(s, nl, func(off int) {
		v := s.Vec()
		VMOVUPS(Mem{Base: dpp, Disp: off}, v)
		VSUBPS(d, v, v) // v = dp - d
		VMULPS(Mem{Base: pp, Disp: off}, v, v)
		VMOVUPS(v, Mem{Base: dpp, Disp: off})
	}, func(bytes int) {
		ADDQ(U32(bytes), dpp)
		ADDQ(U32(bytes), pp)
	})
}

// ---------------------------------------------------------------------------
// Peak FMA throughput.

func genFMAPeak(s isa) {
	name := "FMAPeak" + s.Suffix
	TEXT(name, NOSPLIT, "func(iters int)")
	flops := 12 * s.Lanes * 2
	Doc(fmt.Sprintf("%s runs iters iterations of a loop of 12 independent", name),
		fmt.Sprintf("register-only VFMADD231PS chains on %d-lane vectors: one iteration", s.Lanes),
		fmt.Sprintf("is 12*%d*2 = %d float32 FLOPs. It measures the machine's peak.", s.Lanes, flops))
	n := Load(Param("iters"), GP64())
	x := s.Vec()
	zero(s, x)
	var acc [12]VecVirtual
	for i := range acc {
		acc[i] = s.Vec()
		zero(s, acc[i])
	}
	TESTQ(n, n)
	JLE(LabelRef("done"))
	Label("loop")
	for i := range acc {
		VFMADD231PS(x, x, acc[i])
	}
	DECQ(n)
	JNE(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// ---------------------------------------------------------------------------
// Few-row products for decoding.

// genDot4T generates dot4TAVX2: Sᵀ for four query rows against n key rows
// read in place (see Impl.Dot4T). It is AVX2 only; AVX-512 CPUs run it too.
// Two keys per step share the four A vectors: 8 independent FMA chains,
// 6 loads per 8 FMAs, then one horizontal-add tree per key.
func genDot4T() {
	TEXT("dot4TAVX2", NOSPLIT, "func(c []float32, ldc int, a []float32, b []float32, ldb, n, k int)")
	Pragma("noescape")
	Doc("dot4TAVX2 sets c[j*ldc+r] = Σ_p a[r*k+p]·b[j*ldb+p] for r < 4, j < n (see Impl.Dot4T).",
		"k must be a positive multiple of 8.")
	cp := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	a0 := Load(Param("a").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	n := Load(Param("n"), GP64())
	kb := Load(Param("k"), GP64())
	SHLQ(Imm(2), kb) // bytes per row of a
	a1, a2, a3 := GP64(), GP64(), GP64()
	LEAQ(Mem{Base: a0, Index: kb, Scale: 1}, a1)
	LEAQ(Mem{Base: a1, Index: kb, Scale: 1}, a2)
	LEAQ(Mem{Base: a2, Index: kb, Scale: 1}, a3)
	rows := []Register{a0, a1, a2, a3}

	// store4 reduces the four accumulators of one key (rows 0..3) and
	// stores the four sums at dst.
	store4 := func(acc []VecVirtual, dst Mem) {
		t0, t1 := YMM(), YMM()
		VHADDPS(acc[1], acc[0], t0) // pairs of rows 0,1
		VHADDPS(acc[3], acc[2], t1) // pairs of rows 2,3
		VHADDPS(t1, t0, t0)         // [s0 s1 s2 s3 | s0' s1' s2' s3']
		x := XMM()
		VEXTRACTF128(Imm(1), t0, x)
		VADDPS(x, t0.AsX(), x)
		VMOVUPS(x, dst)
	}

	b1 := GP64()
	Label("pair")
	CMPQ(n, Imm(2))
	JL(LabelRef("single"))
	{
		MOVQ(bp, b1)
		ADDQ(ldb, b1)
		acc := make([]VecVirtual, 8) // acc[key*4 + row]
		for i := range acc {
			acc[i] = YMM()
			VXORPS(acc[i], acc[i], acc[i])
		}
		off := GP64()
		XORQ(off, off)
		Label("pairDot")
		bv0, bv1 := YMM(), YMM()
		VMOVUPS(Mem{Base: bp, Index: off, Scale: 1}, bv0)
		VMOVUPS(Mem{Base: b1, Index: off, Scale: 1}, bv1)
		for r, ar := range rows {
			av := YMM()
			VMOVUPS(Mem{Base: ar, Index: off, Scale: 1}, av)
			VFMADD231PS(av, bv0, acc[r])
			VFMADD231PS(av, bv1, acc[4+r])
		}
		ADDQ(Imm(32), off)
		CMPQ(off, kb)
		JL(LabelRef("pairDot"))
		store4(acc[:4], Mem{Base: cp})
		store4(acc[4:], Mem{Base: cp, Index: ldc, Scale: 1})
		LEAQ(Mem{Base: cp, Index: ldc, Scale: 2}, cp)
		LEAQ(Mem{Base: bp, Index: ldb, Scale: 2}, bp)
		SUBQ(Imm(2), n)
		JMP(LabelRef("pair"))
	}
	Label("single")
	CMPQ(n, Imm(0))
	JE(LabelRef("done"))
	{
		acc := make([]VecVirtual, 4)
		for i := range acc {
			acc[i] = YMM()
			VXORPS(acc[i], acc[i], acc[i])
		}
		off := GP64()
		XORQ(off, off)
		Label("singleDot")
		bv := YMM()
		VMOVUPS(Mem{Base: bp, Index: off, Scale: 1}, bv)
		for r, ar := range rows {
			VFMADD231PS(Mem{Base: ar, Index: off, Scale: 1}, bv, acc[r])
		}
		ADDQ(Imm(32), off)
		CMPQ(off, kb)
		JL(LabelRef("singleDot"))
		store4(acc, Mem{Base: cp})
	}
	Label("done")
	VZEROUPPER()
	RET()
}

// ---------------------------------------------------------------------------
// Philox-4x32-10 for the dropout mask, eight counters at once.

// genPhilox8 generates philox8AVX2: the Philox-4x32-10 outputs of the eight
// counters (c0+g, c1, c2, c3), g = 0..7, under key (k0, k1), stored as
// out[4g+r] = word r of counter g. Each ymm lane carries one counter.
// mulhilo(M, x) for eight 32-bit lanes: VPMULUDQ multiplies the even lanes
// to 64 bits; the odd lanes are shifted down and multiplied the same way;
// hi and lo words are then blended back into place.
func genPhilox8() {
	TEXT("philox8AVX2", NOSPLIT, "func(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32)")
	Pragma("noescape")
	Doc("philox8AVX2 computes Philox-4x32-10 for the counters (c0+g, c1, c2, c3), g < 8,",
		"under key (k0, k1): out[4g+r] is word r of counter g.")
	op := Load(Param("out"), GP64())
	bcast := func(name string) VecVirtual {
		x := XMM()
		VMOVD(Load(Param(name), GP32()), x)
		v := YMM()
		VPBROADCASTD(x, v)
		return v
	}
	x0, x1, x2, x3 := bcast("c0"), bcast("c1"), bcast("c2"), bcast("c3")
	k0, k1 := bcast("k0"), bcast("k1")
	VPADDD(philoxTab.Offset(0), x0, x0) // c0 + {0..7}
	m0, m1 := YMM(), YMM()
	VMOVDQU(philoxTab.Offset(32), m0)
	VMOVDQU(philoxTab.Offset(64), m1)

	// mulhilo sets hi, lo = the high and low words of m·x, lane by lane.
	mulhilo := func(m, x VecVirtual) (hi, lo VecVirtual) {
		even, odd, t := YMM(), YMM(), YMM()
		VPMULUDQ(m, x, even) // 64-bit products of lanes 0,2,4,6
		VPSRLQ(Imm(32), x, t)
		VPMULUDQ(m, t, odd) // products of lanes 1,3,5,7 (m's odd lanes equal its even ones)
		hi, lo = YMM(), YMM()
		VPSRLQ(Imm(32), even, t)
		VPBLENDD(Imm(0xaa), odd, t, hi) // even lanes: hi(even); odd lanes: hi(odd)
		VPSLLQ(Imm(32), odd, t)
		VPBLENDD(Imm(0xaa), t, even, lo) // even lanes: lo(even); odd lanes: lo(odd)
		return hi, lo
	}
	w0, w1 := YMM(), YMM()
	VMOVDQU(philoxTab.Offset(96), w0)
	VMOVDQU(philoxTab.Offset(128), w1)
	for r := 0; r < 10; r++ {
		if r > 0 {
			VPADDD(w0, k0, k0)
			VPADDD(w1, k1, k1)
		}
		hi0, lo0 := mulhilo(m0, x0)
		hi1, lo1 := mulhilo(m1, x2)
		// (c0, c1, c2, c3) = (hi1^c1^k0, lo1, hi0^c3^k1, lo0)
		n0, n2 := YMM(), YMM()
		VPXOR(x1, hi1, n0)
		VPXOR(k0, n0, n0)
		VPXOR(x3, hi0, n2)
		VPXOR(k1, n2, n2)
		x0, x1, x2, x3 = n0, lo1, n2, lo0
	}
	// Transpose the 4 words × 8 counters to out[4g+r].
	a, b, c, d := YMM(), YMM(), YMM(), YMM()
	VPUNPCKLDQ(x1, x0, a) // g0: w0 w1, g1: w0 w1 | g4.., g5..
	VPUNPCKHDQ(x1, x0, b) // g2, g3 | g6, g7
	VPUNPCKLDQ(x3, x2, c)
	VPUNPCKHDQ(x3, x2, d)
	e, f, g, h := YMM(), YMM(), YMM(), YMM()
	VPUNPCKLQDQ(c, a, e) // g0 | g4
	VPUNPCKHQDQ(c, a, f) // g1 | g5
	VPUNPCKLQDQ(d, b, g) // g2 | g6
	VPUNPCKHQDQ(d, b, h) // g3 | g7
	o0, o1, o2, o3 := YMM(), YMM(), YMM(), YMM()
	VPERM2I128(Imm(0x20), f, e, o0) // g0 g1
	VPERM2I128(Imm(0x20), h, g, o1) // g2 g3
	VPERM2I128(Imm(0x31), f, e, o2) // g4 g5
	VPERM2I128(Imm(0x31), h, g, o3) // g6 g7
	VMOVDQU(o0, Mem{Base: op})
	VMOVDQU(o1, Mem{Base: op, Disp: 32})
	VMOVDQU(o2, Mem{Base: op, Disp: 64})
	VMOVDQU(o3, Mem{Base: op, Disp: 96})
	VZEROUPPER()
	RET()
}

// philoxTab holds the lane offsets 0..7, the multipliers and the Weyl key
// increments, each in eight lanes.
var philoxTab Mem

func genPhiloxTable() Mem {
	t := GLOBL("philoxconsts", RODATA|NOPTR)
	for g := 0; g < 8; g++ {
		DATA(4*g, U32(uint32(g)))
	}
	for i, v := range []uint32{0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85} {
		for l := 0; l < 8; l++ {
			DATA(32*(i+1)+4*l, U32(v))
		}
	}
	return t
}

// ---------------------------------------------------------------------------
// Softcap: x = c·tanh(x/c), and its derivative factor 1 - tanh².

// Cephes' tanhf polynomial for |y| <= 0.625: tanh y = y + y·z·T(z), z = y².
const (
	tanhT0 = -5.70498872745e-3
	tanhT1 = 2.06390887954e-2
	tanhT2 = -5.37397155531e-2
	tanhT3 = 1.33314422036e-1
	tanhT4 = -3.33332819422e-1
)

// genSoftcap generates softcapAVX2 (see Impl.Softcap). Both branches of
// tanh are computed for every lane and blended: the polynomial for
// |y| <= 0.625, and 1 − 2/(e^{2|y|} + 1) with the sign of y beyond, where
// e^{2|y|} uses the exponential's reduction and polynomial on [0, 88].
func genSoftcap() {
	TEXT("softcapAVX2", NOSPLIT, "func(x, g []float32, c float32)")
	Pragma("noescape")
	Doc("softcapAVX2 sets x[j] = c·tanh(x[j]/c) and, if len(g) > 0, g[j] = 1 − tanh² (see Impl.Softcap).",
		"len(x) is a multiple of 8; len(g) is 0 or len(x).")
	xp := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	gp := Load(Param("g").Base(), GP64())
	gn := Load(Param("g").Len(), GP64())
	cv := broadcastParam(isaAVX2, "c")
	one := YMM()
	VMOVUPS(expTab.Offset(64*cOne), one)
	inv := YMM()
	VDIVPS(cv, one, inv) // 1/c
	k := func(v float32) Op {
		return softcapConst(v)
	}
	Label("loop")
	CMPQ(n, Imm(8))
	JL(LabelRef("done"))
	y, a := YMM(), YMM()
	VMULPS(Mem{Base: xp}, inv, y)
	VANDPS(k(math.Float32frombits(0x7fffffff)), y, a) // |y|
	// Large branch: t = 1 − 2/(e^{2|y|} + 1).
	u := YMM()
	VADDPS(a, a, u)
	VMINPS(k(88), u, u)
	q := expCoreAVX2(u, func(i int) Op { return expTab.Offset(64 * i) }) // e^{2|y|}
	VADDPS(one, q, q)
	tl := YMM()
	VMOVUPS(k(2), tl)
	VDIVPS(q, tl, tl)   // 2/(e+1)
	VSUBPS(tl, one, tl) // 1 − 2/(e+1)
	sgn := YMM()
	VANDPS(k(math.Float32frombits(0x80000000)), y, sgn)
	VORPS(sgn, tl, tl) // with the sign of y
	// Small branch: t = y + y·z·T(z).
	z, ts := YMM(), YMM()
	VMULPS(y, y, z)
	VMOVUPS(k(tanhT0), ts)
	for _, c := range []float32{tanhT1, tanhT2, tanhT3, tanhT4} {
		VFMADD213PS(k(c), z, ts)
	}
	VMULPS(z, ts, ts)
	VFMADD213PS(y, y, ts) // ts = ts·y + y
	// Blend: large where |y| > 0.625 (false for NaN, which the small branch
	// propagates).
	m := YMM()
	VCMPPS(Imm(0x1e), k(0.625), a, m) // GT_OQ
	VBLENDVPS(m, tl, ts, ts)
	out := YMM()
	VMULPS(cv, ts, out)
	VMOVUPS(out, Mem{Base: xp})
	CMPQ(gn, Imm(0))
	JE(LabelRef("next"))
	VMULPS(ts, ts, ts)
	VSUBPS(ts, one, ts)
	VMOVUPS(ts, Mem{Base: gp})
	ADDQ(Imm(32), gp)
	Label("next")
	ADDQ(Imm(32), xp)
	SUBQ(Imm(8), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// softcapConsts are the constants of genSoftcap, one per 32-byte entry.
var (
	softcapTab  Mem
	softcapVals []float32
)

func softcapConst(v float32) Op {
	for i, w := range softcapVals {
		if math.Float32bits(w) == math.Float32bits(v) {
			return softcapTab.Offset(32 * i)
		}
	}
	panic(fmt.Sprintf("softcap constant %v not in the table", v))
}

func genSoftcapTable() {
	softcapVals = []float32{math.Float32frombits(0x7fffffff), 88, 2, math.Float32frombits(0x80000000),
		tanhT0, tanhT1, tanhT2, tanhT3, tanhT4, 0.625, 8}
	softcapTab = GLOBL("softcapconsts", RODATA|NOPTR)
	for i, v := range softcapVals {
		for l := 0; l < 8; l++ {
			DATA(32*i+4*l, U32(math.Float32bits(v)))
		}
	}
	// Then the lane indexes 0..7 as floats (see laneIndexes).
	for l := 0; l < 8; l++ {
		DATA(32*len(softcapVals)+4*l, U32(math.Float32bits(float32(l))))
	}
}

// genALiBi generates alibiAVX2 (see Impl.ALiBi): x[j] −= slope·|pos − j|,
// with j carried as a float vector {0..7} + 8·step.
func genALiBi() {
	TEXT("alibiAVX2", NOSPLIT, "func(x []float32, slope, pos float32)")
	Pragma("noescape")
	Doc("alibiAVX2 sets x[j] -= slope·|pos − j| (see Impl.ALiBi). len(x) is a multiple of 8.")
	xp := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	slope := broadcastParam(isaAVX2, "slope")
	d := broadcastParam(isaAVX2, "pos")
	VSUBPS(laneIndexes(), d, d) // pos − {0..7}
	eight, abs := YMM(), YMM()
	VMOVUPS(softcapConst(8), eight)
	VMOVUPS(softcapConst(math.Float32frombits(0x7fffffff)), abs)
	Label("loop")
	CMPQ(n, Imm(8))
	JL(LabelRef("done"))
	t, v := YMM(), YMM()
	VANDPS(abs, d, t) // |pos − j|
	VMOVUPS(Mem{Base: xp}, v)
	VFNMADD231PS(slope, t, v) // v −= slope·|pos − j|
	VMOVUPS(v, Mem{Base: xp})
	VSUBPS(eight, d, d)
	ADDQ(Imm(32), xp)
	SUBQ(Imm(8), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// laneIndexes is the vector {0, 1, ..., 7} as float32, from the softcap
// table.
func laneIndexes() Op { return softcapTab.Offset(32 * len(softcapVals)) }
