package main

import (
	"math"

	"github.com/flashattn/flashattn/internal/kernel/_kconst"
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The kernels of score rows: ExpSum (the exponential of a row, and its
// sum) and Max.

// ---------------------------------------------------------------------------
// Exponential.

// generic holds package kernel's constants (generic.go): the float32
// exponential's Exp… and tanh's polynomial tanhT0 … tanhT4, the values of
// the tables; package kernel's TestAsmTables reads the tables back.
var generic = kconst.MustRead("../generic.go")

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
		cOne: 1, cInf: float32(math.Inf(1)),
	}
	for i, name := range map[int]string{cLog2e: "ExpLog2e", cLn2Hi: "ExpLn2Hi", cLn2Lo: "ExpLn2Lo",
		cP0: "ExpP0", cP1: "ExpP1", cP2: "ExpP2", cP3: "ExpP3", cP4: "ExpP4", cP5: "ExpP5",
		cMin: "ExpMin", cMax: "ExpMax"} {
		vals[i] = generic.F32(name)
	}
	expTab = GLOBL("expconsts", RODATA|NOPTR)
	for i, v := range vals {
		for l := 0; l < 16; l++ {
			DATA(64*i+4*l, U32(math.Float32bits(v)))
		}
	}
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
		// t = round(scale·x) − sub: the product rounded, not fused (see
		// Impl.ExpSum).
		t := s.Vec()
		VMULPS(Mem{Base: xp, Disp: off}, scale, t)
		VSUBPS(sub, t, t)
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
	VMULPS(Mem{Base: xp, Disp: off}, scale, t)
	VSUBPS(sub, t, t) // t = round(scale·x) − sub, as in genExpSum
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

// ---------------------------------------------------------------------------
// Row maximum.

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
