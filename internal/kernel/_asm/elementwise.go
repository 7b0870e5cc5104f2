package main

import (
	"fmt"
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Elementwise kernels: Scale, DsFromDp, Softcap and ALiBi.

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
// Softcap: x = c·tanh(x/c), and its derivative factor 1 - tanh².

// tanhT is Cephes' tanhf polynomial for |y| <= 0.625: tanh y = y +
// y·z·T(z), z = y², T(z) = (((T0·z + T1)·z + T2)·z + T3)·z + T4, package
// kernel's tanhT0 … tanhT4 (generic.go).
var tanhT = []float32{generic.F32("tanhT0"), generic.F32("tanhT1"), generic.F32("tanhT2"),
	generic.F32("tanhT3"), generic.F32("tanhT4")}

// genSoftcap generates softcapAVX2 (see Impl.Softcap). Both branches of
// tanh are computed for every lane and blended: the polynomial for
// |y| <= 0.625, and 1 − 2/(e^{2|y|} + 1) with the sign of y beyond, where
// e^{2|y|} uses the exponential's reduction and polynomial on [0, 88].
func genSoftcap() {
	genSoftcapTable()
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
	q := expCoreAVX2([]VecVirtual{u}, func(i int) Op { return expTab.Offset(64 * i) })[0] // e^{2|y|}
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
	VMOVUPS(k(tanhT[0]), ts)
	for _, c := range tanhT[1:] {
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

// softcapTab holds the constants of genSoftcap (softcapVals), each in the
// 8 lanes of a 32-byte entry. Package kernel's tests compare it with the
// Go constants of the same values (tanhT0 … in generic.go, tanhT here).
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
	softcapVals = append([]float32{math.Float32frombits(0x7fffffff), 88, 2, math.Float32frombits(0x80000000)}, tanhT...)
	softcapVals = append(softcapVals, 0.625)
	softcapTab = GLOBL("softcapconsts", RODATA|NOPTR)
	for i, v := range softcapVals {
		for l := 0; l < 8; l++ {
			DATA(32*i+4*l, U32(math.Float32bits(v)))
		}
	}
}

// alibiTab holds the constants of genALiBi, each in 8 lanes: the mask of
// the absolute value, the step 8.0, then the lane indexes 0 … 7 as
// float32. Package kernel's tests compare it with those values.
var alibiTab Mem

// Offsets in alibiTab.
const (
	alAbs   = 0
	alEight = 32
	alLanes = 64
)

func genALiBiTable() {
	alibiTab = GLOBL("alibiconsts", RODATA|NOPTR)
	for i, v := range []float32{math.Float32frombits(0x7fffffff), 8} {
		for l := 0; l < 8; l++ {
			DATA(32*i+4*l, U32(math.Float32bits(v)))
		}
	}
	for l := 0; l < 8; l++ {
		DATA(alLanes+4*l, U32(math.Float32bits(float32(l))))
	}
}

// genALiBi generates alibiAVX2 (see Impl.ALiBi): x[j] −= slope·|pos − j|,
// with j carried as a float vector {0..7} + 8·step.
func genALiBi() {
	genALiBiTable()
	TEXT("alibiAVX2", NOSPLIT, "func(x []float32, slope, pos float32)")
	Pragma("noescape")
	Doc("alibiAVX2 sets x[j] -= slope·|pos − j| (see Impl.ALiBi). len(x) is a multiple of 8.")
	xp := Load(Param("x").Base(), GP64())
	n := Load(Param("x").Len(), GP64())
	slope := broadcastParam(isaAVX2, "slope")
	d := broadcastParam(isaAVX2, "pos")
	VSUBPS(alibiTab.Offset(alLanes), d, d) // pos − {0..7}
	eight, abs := YMM(), YMM()
	VMOVUPS(alibiTab.Offset(alEight), eight)
	VMOVUPS(alibiTab.Offset(alAbs), abs)
	Label("loop")
	CMPQ(n, Imm(8))
	JL(LabelRef("done"))
	t, v := YMM(), YMM()
	VANDPS(abs, d, t) // |pos − j|
	VMOVUPS(Mem{Base: xp}, v)
	VMULPS(slope, t, t) // slope·|pos − j|, rounded as the generic twin rounds it
	VSUBPS(t, v, v)
	VMOVUPS(v, Mem{Base: xp})
	VSUBPS(eight, d, d)
	ADDQ(Imm(32), xp)
	SUBQ(Imm(8), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}
