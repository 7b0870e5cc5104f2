package main

import (
	"math"
	"slices"

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
	cC1 // Exp2C1 … Exp2C6: AVX-512's polynomial of 2^r (see finish in genExpSum)
	cC2
	cC3
	cC4
	cC5
	cC6
	cB1 // Exp2B1 … Exp2B4: the bfloat16 store's shorter polynomial of 2^r
	cB2
	cB3
	cB4
	numConsts
)

// exp2C and exp2B are the coefficients of AVX-512's polynomials of 2^r,
// of r¹ up: degree 6 for ExpSum, degree 4 for ExpSumBF16, whose values are
// rounded to 8 significant bits (see Impl.ExpSumBF16).
var exp2C, exp2B = []int{cC1, cC2, cC3, cC4, cC5, cC6}, []int{cB1, cB2, cB3, cB4}

var expTab Mem

func genExpTable() {
	vals := [numConsts]float32{
		cOne: 1, cInf: float32(math.Inf(1)),
	}
	for i, name := range map[int]string{cLog2e: "ExpLog2e", cLn2Hi: "ExpLn2Hi", cLn2Lo: "ExpLn2Lo",
		cP0: "ExpP0", cP1: "ExpP1", cP2: "ExpP2", cP3: "ExpP3", cP4: "ExpP4", cP5: "ExpP5",
		cMin: "ExpMin", cMax: "ExpMax",
		cC1: "Exp2C1", cC2: "Exp2C2", cC3: "Exp2C3", cC4: "Exp2C4", cC5: "Exp2C5", cC6: "Exp2C6",
		cB1: "Exp2B1", cB2: "Exp2B2", cB3: "Exp2B3", cB4: "Exp2B4"} {
		vals[i] = generic.F32(name)
	}
	expTab = GLOBL("expconsts", RODATA|NOPTR)
	for i, v := range vals {
		for l := 0; l < 16; l++ {
			DATA(64*i+4*l, U32(math.Float32bits(v)))
		}
	}
}

// genExpSum generates expSum<ISA>, or with toBF16 (AVX-512 only: it needs
// AVX512_BF16) expSumBF16AVX512BF16, which stores each new value rounded to
// bfloat16 in dst instead of x (Impl.ExpSumBF16): the same exponential but
// for the polynomial of 2^r, of degree 4 (exp2B) instead of 6 (exp2C), the
// sum in the same order, and finish's store (see store below).
func genExpSum(s isa, toBF16 bool) {
	name := "expSum" + s.Suffix
	if toBF16 {
		if !s.EVEX {
			panic("expSum: the bfloat16 store needs AVX512_BF16")
		}
		name = "expSumBF16AVX512BF16"
		TEXT(name, NOSPLIT, "func(dst []uint16, x []float32, scale, sub float32) float32")
		Pragma("noescape")
		Doc(name+" sets dst[j] = bf16(exp(scale*x[j] - sub)) and returns the float32 sum",
			"of the unrounded values (see Impl.ExpSumBF16); x is left as it is.",
			"len(x) must be a multiple of 16 and len(dst) >= len(x).")
	} else {
		TEXT(name, NOSPLIT, "func(x []float32, scale, sub float32) float32")
		Pragma("noescape")
		Doc(name+" sets x[j] = exp(scale*x[j] - sub) and returns their sum (see Impl.ExpSum).",
			"len(x) must be a multiple of 16.")
	}

	xp := Load(Param("x").Base(), GP64())
	var dp Register // dst with toBF16: advances by half of xp's steps
	if toBF16 {
		dp = Load(Param("dst").Base(), GP64())
	}
	nl := Load(Param("x").Len(), GP64())
	scale := broadcastParam(s, "scale")
	sub := broadcastParam(s, "sub")

	// poly holds the coefficients of the polynomial of 2^r (AVX-512), of
	// r¹ up.
	poly := exp2C
	if toBF16 {
		poly = exp2B
	}
	top := poly[len(poly)-1]
	// c(i) is constant i as the memory-or-register operand of an
	// instruction. AVX2 has 16 registers: it keeps the constants used most
	// (and those that must be registers) and reads the polynomial's from
	// the table; with every constant in memory the loop was bound by loads
	// (16 per vector), at a third of the speed. AVX-512 keeps those it
	// uses but the polynomial's top coefficient (only loaded): that leaves
	// registers for the two pairs of vectors of its pipeline (see below);
	// it does not use the two-step ln 2 nor P0 … P5 (AVX2's polynomial).
	var creg [numConsts]VecVirtual
	inReg := func(i int) bool {
		if s.EVEX {
			switch i {
			case cLog2e, cOne, cMin:
				return true
			case cMax, cInf:
				return !toBF16 // toBF16 has no ExpMax mask (finish)
			}
			return slices.Contains(poly, i) && i != top
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

	// The exponential of a vector is computed in two stages: reduceArg loads
	// it and computes t, n and r (below); finish evaluates the polynomial,
	// scales by 2^n, stores the vector and adds it to its accumulator.
	// Within a stage the vectors' instructions are interleaved, one step
	// for all vectors before the next, so that each step finds independent
	// work while the previous one's latency runs: one vector's exponential
	// is a chain of about 50 cycles.
	type reduced struct{ t, n, r []VecVirtual }
	// reduceArg loads the vectors at byte offsets offs of xp and returns
	// t = round(scale·x) − sub, and n, r with exp(t) ≈ 2^n·2^r: the
	// reduction is in base 2, u = round(t·log2 e), n = round(u) and
	// r = u − n, both exact, |r| ≤ 1/2 (the rounding of u is the only
	// error, relative |t|·2^-24 at most: see Impl.ExpSum).
	reduceArg := func(offs []int) reduced {
		u := len(offs)
		each := func(f func(j int)) {
			for j := 0; j < u; j++ {
				f(j)
			}
		}
		t, n, r := vecs(s, u), vecs(s, u), vecs(s, u)
		if toBF16 {
			// t = scale·x − sub fused, rounded once (Impl.ExpSumBF16):
			// one FMA instead of ExpSum's product and subtraction, x
			// loaded first (the load port, not a vector pipe).
			each(func(j int) { VMOVUPS(Mem{Base: xp, Disp: offs[j]}, t[j]) })
			each(func(j int) { VFMSUB213PS(sub, scale, t[j]) }) // t = t*scale − sub
		} else {
			// t = round(scale·x) − sub: the product rounded, not fused
			// (see Impl.ExpSum).
			each(func(j int) { VMULPS(Mem{Base: xp, Disp: offs[j]}, scale, t[j]) })
			each(func(j int) { VSUBPS(sub, t[j], t[j]) })
		}
		// u = round(t·log2 e) (in n), r = u − round(u) by VREDUCEPS
		// (imm 0: no fraction bits kept, to nearest even), then
		// n = u − r on the add pipes. t is not clamped first: the lanes
		// where t > ExpMax are +Inf and those where t < ExpMin are 0 at
		// the end whatever p is, and a NaN propagates. u = ±Inf gives
		// r = +0 and n = ±Inf (VREDUCEPS's special case), hence
		// exp(+Inf) = 2^+Inf = +Inf, and exp(-Inf) = 0 by the mask.
		each(func(j int) { VMULPS(c(cLog2e), t[j], n[j]) })
		each(func(j int) { VREDUCEPS(Imm(0), n[j], r[j]) })
		each(func(j int) { VSUBPS(r[j], n[j], n[j]) })
		return reduced{t, n, r}
	}
	// store writes vector p, the exponentials of the vector at byte offset
	// off of xp: back to x, or (toBF16) rounded to bfloat16 at off/2 of
	// dp, by VCVTNEPS2BF16 (fixed registers Z(j) → Y(j) around the raw
	// encoding). VCVTNEPS2BF16 flushes float32 subnormals to zero, but no
	// value here is one: t ≥ ExpMin makes n ≥ −126 with r ≥ 0 at n = −126
	// (126·ln 2 exceeds −ExpMin), so p ≥ 1 there and p·2^n ≥ 2^−126, and
	// t < ExpMin gives 0. TestExpSumBF16 compares every float32 from ExpMin
	// up with the twin's integer rounding bit for bit.
	store := func(j int, p VecVirtual, off int) {
		if !toBF16 {
			VMOVUPS(p, Mem{Base: xp, Disp: off})
			return
		}
		VMOVAPS(p, zmm(j))
		vcvtneps2bf16(j, j)
		VMOVDQU(ymm(j), Mem{Base: dp, Disp: off / 2})
	}
	// finish sets the vectors at byte offsets offs of xp to exp(t) from
	// their reduced v and adds vector j to acc[j%len(acc)]: the same sums,
	// in the same order, as one vector at a time.
	finish := func(offs []int, v reduced, acc []VecVirtual) {
		u := len(offs)
		each := func(f func(j int)) {
			for j := 0; j < u; j++ {
				f(j)
			}
		}
		t, n, r := v.t, v.n, v.r
		p := vecs(s, u)
		// k1 is !(t < ExpMin) (NLT_UQ; true also for NaN, which
		// propagates through p), k2 is !(t > ExpMax) (NGT_UQ, NaN too).
		// toBF16 has no k2 (see the scaling below).
		k1, k2 := make([]Register, u), make([]Register, u)
		each(func(j int) {
			k1[j] = K()
			VCMPPS(Imm(0x15), c(cMin), t[j], k1[j])
			if !toBF16 {
				k2[j] = K()
				VCMPPS(Imm(0x1a), c(cMax), t[j], k2[j])
			}
		})
		// p = (((((C6·r + C5)·r + C4)·r + C3)·r + C2)·r + C1)·r + 1 ≈ 2^r
		// (with toBF16 (((B4·r + B3)·r + B2)·r + B1)·r + 1), Horner's
		// rule, one FMA per degree, the last one zero-masked by k1: p = 0
		// where t < ExpMin (also -Inf), and 0·2^n = 0 there (n ≤ -126 or
		// -Inf).
		each(func(j int) { VMOVUPS(c(top), p[j]) })
		for k := len(poly) - 2; k >= 0; k-- {
			each(func(j int) { VFMADD213PS(c(poly[k]), r[j], p[j]) }) // p = p*r + Ck
		}
		each(func(j int) { VFMADD213PS_Z(c(cOne), r[j], k1[j], p[j]) })
		// q = p·2^n where k2, +Inf where t > ExpMax: VSCALEFPS merged
		// into a copy of +Inf (the copy is eliminated at rename). 2^n
		// alone would overflow only above about 88.72, so the mask keeps
		// the contract's +Inf from ExpMax up. toBF16 scales unmasked
		// (q = p·2^n): from ExpMax to about 88.72 (n = 128, p < 1) q is
		// the finite exp(t), +Inf above (VSCALEFPS overflows), +Inf for
		// t = +Inf (n = +Inf, p = 1), as Impl.ExpSumBF16 says.
		q := vecs(s, u)
		each(func(j int) {
			if toBF16 {
				VSCALEFPS(n[j], p[j], q[j])
				return
			}
			VMOVAPS(c(cInf), q[j])
			VSCALEFPS(n[j], p[j], k2[j], q[j])
		})
		each(func(j int) {
			store(j, q[j], offs[j])
			VADDPS(q[j], acc[j%len(acc)], acc[j%len(acc)])
		})
	}
	exp := func(offs []int, acc []VecVirtual) {
		if !s.EVEX {
			expAVX2(s, xp, offs, acc, scale, sub, c)
			return
		}
		finish(offs, reduceArg(offs), acc)
	}
	offsets := func(u, from int) []int {
		offs := make([]int, u)
		for j := range offs {
			offs[j] = (from + j) * s.Bytes()
		}
		return offs
	}

	// advance moves xp (and dp) past u vectors and counts them off nl.
	advance := func(u int) {
		ADDQ(U32(u*s.Bytes()), xp)
		if toBF16 {
			ADDQ(U32(u*s.Bytes()/2), dp)
		}
		SUBQ(U32(u*s.Lanes), nl)
	}

	// The accumulators fix the order of the sums, hence the result's bits:
	// AVX-512 has two, acc[0] summing vectors 0, 2, 4, … of x and acc[1]
	// vectors 1, 3, 5, …, then the odd last vector is added after acc[1];
	// AVX2 has one. AVX2 computes one vector per iteration: two side by
	// side need more than its 16 registers (VBLENDVPS cannot use
	// Y16-Y31).
	acc := vecs(s, 1)
	if s.EVEX {
		acc = vecs(s, 2)
	}
	for _, a := range acc {
		zero(s, a)
	}
	if s.EVEX {
		// AVX-512 is software-pipelined, pw vectors per stage: each
		// iteration reduces the next pw vectors while it finishes the
		// current ones, so that the reduction's chain (about 20 cycles)
		// runs beside the polynomial's instead of after it. pw is even:
		// vector j of a stage is vector j mod 2 of x's pairs, so acc[j%2]
		// sums the same vectors as above.
		const pw = 2
		CMPQ(nl, U32(pw*s.Lanes))
		JL(LabelRef("afterpipe"))
		cur := reduceArg(offsets(pw, 0))
		Label("pipe")
		CMPQ(nl, U32(2*pw*s.Lanes))
		JL(LabelRef("drain"))
		next := reduceArg(offsets(pw, pw))
		finish(offsets(pw, 0), cur, acc)
		for j := 0; j < pw; j++ {
			VMOVAPS(next.t[j], cur.t[j])
			VMOVAPS(next.n[j], cur.n[j])
			VMOVAPS(next.r[j], cur.r[j])
		}
		advance(pw)
		JMP(LabelRef("pipe"))
		Label("drain")
		finish(offsets(pw, 0), cur, acc)
		advance(pw)
		Label("afterpipe")
		// At most pw-1 vectors are left.
		VADDPS(acc[1], acc[0], acc[0])
		CMPQ(nl, U32(s.Lanes))
		JL(LabelRef("done"))
		exp(offsets(1, 0), acc[:1])
		Label("done")
	} else {
		Label("loop1")
		CMPQ(nl, U32(s.Lanes))
		JL(LabelRef("after1"))
		exp(offsets(1, 0), acc)
		ADDQ(U32(s.Bytes()), xp)
		SUBQ(U32(s.Lanes), nl)
		JMP(LabelRef("loop1"))
		Label("after1")
	}
	x := reduce(s, acc[0], VADDPS)
	VADDSS(x.shuf, x.v, x.v)
	Store(x.v, ReturnIndex(0))
	VZEROUPPER()
	RET()
}

// vecs returns u new vector registers.
func vecs(s isa, u int) []VecVirtual {
	v := make([]VecVirtual, u)
	for i := range v {
		v[i] = s.Vec()
	}
	return v
}

// expAVX2 computes exp of the vectors at byte offsets offs of xp in place
// and adds vector j to acc[j%len(acc)], their instructions interleaved (see
// genExpSum). The chain is kept short: no clamping in front (lanes outside
// [ExpMin, ExpMax] are fixed at the end, off the chain) and the polynomial
// by Estrin's scheme.
func expAVX2(s isa, xp Register, offs []int, acc []VecVirtual, scale, sub VecVirtual, c func(int) Op) {
	t := vecs(s, len(offs))
	for j, off := range offs {
		VMULPS(Mem{Base: xp, Disp: off}, scale, t[j])
	}
	for j := range offs {
		VSUBPS(sub, t[j], t[j]) // t = round(scale·x) − sub, as in genExpSum
	}
	q := expCoreAVX2(t, c)
	for j, off := range offs {
		r2 := s.Vec()
		// 0 where t < ExpMin (incl. -Inf).
		VCMPPS(Imm(0x11), c(cMin), t[j], r2) // LT_OQ
		VANDNPS(q[j], r2, q[j])
		// t+Inf (= +Inf, or NaN for NaN) where t > ExpMax or t is NaN.
		VCMPPS(Imm(0x16), c(cMax), t[j], r2) // NLE_UQ
		VADDPS(c(cInf), t[j], t[j])
		VBLENDVPS(r2, t[j], q[j], q[j]) // q = r2 ? t : q
		VMOVUPS(q[j], Mem{Base: xp, Disp: off})
		VADDPS(q[j], acc[j%len(acc)], acc[j%len(acc)])
	}
}

// expCoreAVX2 returns e^t for the lanes of the vectors t in [ExpMin,
// ExpMax] (others are garbage, to be fixed by the caller), the vectors'
// instructions interleaved: n = round(t·log2 e), r = t − n·ln2 in two steps
// (ln2hi has few bits so n·ln2hi is exact), e^r by a degree-7 polynomial
// evaluated by Estrin's scheme (short dependency chain), and 2^n built
// from its exponent bits. c gives the constants of expTab.
func expCoreAVX2(t []VecVirtual, c func(int) Op) []VecVirtual {
	u := len(t)
	each := func(f func(j int)) {
		for j := 0; j < u; j++ {
			f(j)
		}
	}
	n, r := vecs(isaAVX2, u), vecs(isaAVX2, u)
	each(func(j int) { VMULPS(c(cLog2e), t[j], n[j]) })
	each(func(j int) { VROUNDPS(Imm(8), n[j], n[j]) })
	each(func(j int) { VMOVAPS(t[j], r[j]) })
	each(func(j int) { VFNMADD231PS(c(cLn2Hi), n[j], r[j]) })
	each(func(j int) { VFNMADD231PS(c(cLn2Lo), n[j], r[j]) })
	// q = P5 + P4·r + P3·r² + P2·r³ + P1·r⁴ + P0·r⁵
	//   = (P4·r + P5) + r²·((P2·r + P3) + r²·(P0·r + P1))
	a, b, q, r2 := vecs(isaAVX2, u), vecs(isaAVX2, u), vecs(isaAVX2, u), vecs(isaAVX2, u)
	each(func(j int) { VMULPS(r[j], r[j], r2[j]) })
	each(func(j int) {
		VMOVUPS(c(cP4), a[j])
		VFMADD213PS(c(cP5), r[j], a[j])
	})
	each(func(j int) {
		VMOVUPS(c(cP2), b[j])
		VFMADD213PS(c(cP3), r[j], b[j])
	})
	each(func(j int) {
		VMOVUPS(c(cP0), q[j])
		VFMADD213PS(c(cP1), r[j], q[j])
	})
	each(func(j int) { VFMADD213PS(b[j], r2[j], q[j]) }) // q = q·r² + b
	each(func(j int) { VFMADD213PS(a[j], r2[j], q[j]) }) // q = q·r² + a
	// e^r ≈ q·r² + r + 1.
	each(func(j int) { VFMADD213PS(r[j], r2[j], q[j]) })
	each(func(j int) { VADDPS(c(cOne), q[j], q[j]) })
	// 2^n = float32 bits (n+127)<<23, valid for n in [-126, 127].
	each(func(j int) { VCVTPS2DQ(n[j], n[j]) })
	each(func(j int) { VPSLLD(Imm(23), n[j], n[j]) })
	each(func(j int) { VPADDD(c(cOne), n[j], n[j]) })
	each(func(j int) { VMULPS(n[j], q[j], q[j]) })
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
