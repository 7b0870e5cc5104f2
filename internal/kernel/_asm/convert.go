package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Bulk conversions between float32 and the 16-bit formats bfloat16 and
// IEEE binary16 (fp16). Every function converts len(src) elements, a
// multiple of 16; the Go wrappers convert the remaining tail in Go, so the
// assembly never reads or writes past the slices. Results equal the scalar
// conversions of halfconv.go bit for bit:
//
//	bf16 → f32   zero-extend each 16-bit word to 32 bits and shift left 16
//	fp16 → f32   VCVTPH2PS (F16C, or its AVX-512 form)
//	f32 → fp16   VCVTPS2PH with immediate 0 (round to nearest even)
//	f32 → bf16   integer round-to-nearest-even: (x + 0x7fff + bit16(x)) >> 16,
//	             NaN → (x >> 16) | 0x40 (quiet); with AVX512_BF16,
//	             VCVTNEPS2BF16, which rounds the same way and quiets NaN
//	             the same way, but flushes float32 subnormal inputs to ±0:
//	             a block of 16 that holds a subnormal takes the integer path.

// Indexes of the dword constants of the conversions.
const (
	hcBias    = iota // 0x7fff: rounding bias
	hcOne            // 1
	hcQuiet          // 0x40: the quiet bit of a bfloat16 NaN
	hcAbs            // 0x7fffffff
	hcInf            // 0x7f800000: exponent mask, +Inf
	hcMant           // 0x007fffff
	hcHigh           // 0xffff0000: the bfloat16 bits of a float32
	hcQuietHi        // 0x00400000: the quiet bit of a bfloat16 NaN, in a float32
	numHalfConsts
)

// halfTab (halfconsts) holds halfConstVals, halfVec (halfvecs) the same in
// 8 lanes each: the bit patterns of package kernel's halfconv.go, which its
// tests compare with the tables.
var halfTab Mem

func genHalfTable() {
	halfTab = GLOBL("halfconsts", RODATA|NOPTR)
	for i, v := range halfConstVals {
		DATA(4*i, U32(v))
	}
	// The same constants, each repeated 8 times (a ymm operand in memory,
	// for the AVX2 kernels that have no register to spare).
	halfVec = GLOBL("halfvecs", RODATA|NOPTR)
	for i, v := range halfConstVals {
		for l := 0; l < 8; l++ {
			DATA(32*i+4*l, U32(v))
		}
	}
}

var halfConstVals = [numHalfConsts]uint32{
	hcBias: 0x7fff, hcOne: 1, hcQuiet: 0x40, hcAbs: 0x7fffffff, hcInf: 0x7f800000, hcMant: 0x007fffff,
	hcHigh: 0xffff0000, hcQuietHi: 0x00400000,
}

var halfVec Mem

// halfConstMem is the ymm memory operand of constant i.
func halfConstMem(i int) Op { return halfVec.Offset(32 * i) }

// halfConsts broadcasts the constants is into registers and returns the
// lookup rneBF16 takes.
func halfConsts(s isa, is ...int) func(int) Op {
	c := map[int]VecVirtual{}
	for _, i := range is {
		c[i] = halfConst(s, i)
	}
	return func(i int) Op {
		v, ok := c[i]
		if !ok {
			panic(fmt.Sprintf("half constant %d not loaded", i))
		}
		return v
	}
}

// halfConst broadcasts dword constant i into a new vector register.
func halfConst(s isa, i int) VecVirtual {
	v := s.Vec()
	VPBROADCASTD(halfTab.Offset(4*i), v)
	return v
}

// convLoop emits: for n >= 16 { body(float32 byte offset 0 of this block); advance }.
// src and dst advance by 16 elements of their own sizes (in and out bytes).
func convLoop(n, src, dst Register, in, out int, body func()) {
	Label("loop")
	CMPQ(n, U32(16))
	JL(LabelRef("done"))
	body()
	ADDQ(U32(16*in), src)
	ADDQ(U32(16*out), dst)
	SUBQ(U32(16), n)
	JMP(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

func convHeader(name, sig, doc string) (n, src, dst Register) {
	TEXT(name, NOSPLIT, sig)
	Pragma("noescape")
	Doc(name+" "+doc, "len(src) is a multiple of 16 and len(dst) >= len(src).")
	dst = Load(Param("dst").Base(), GP64())
	src = Load(Param("src").Base(), GP64())
	n = Load(Param("src").Len(), GP64())
	return n, src, dst
}

// genHalfToF32 generates bf16ToF32<ISA> and f16ToF32<ISA>.
func genHalfToF32(s isa) {
	n, src, dst := convHeader("bf16ToF32"+s.Suffix, "func(dst []float32, src []uint16)",
		"widens the bfloat16 src to float32 (exact).")
	convLoop(n, src, dst, 2, 4, func() {
		for v := 0; v < 16/s.Lanes; v++ {
			x := s.Vec()
			VPMOVZXWD(Mem{Base: src, Disp: v * 2 * s.Lanes}, x)
			VPSLLD(Imm(16), x, x)
			VMOVUPS(x, Mem{Base: dst, Disp: v * s.Bytes()})
		}
	})

	n, src, dst = convHeader("f16ToF32"+s.Suffix, "func(dst []float32, src []uint16)",
		"widens the fp16 src to float32 (exact; NaN comes back quiet).")
	convLoop(n, src, dst, 2, 4, func() {
		for v := 0; v < 16/s.Lanes; v++ {
			x := s.Vec()
			VCVTPH2PS(Mem{Base: src, Disp: v * 2 * s.Lanes}, x)
			VMOVUPS(x, Mem{Base: dst, Disp: v * s.Bytes()})
		}
	})
}

// genF32ToF16 generates f32ToF16<ISA>.
func genF32ToF16(s isa) {
	n, src, dst := convHeader("f32ToF16"+s.Suffix, "func(dst []uint16, src []float32)",
		"rounds the float32 src to fp16, to nearest even.")
	convLoop(n, src, dst, 4, 2, func() {
		for v := 0; v < 16/s.Lanes; v++ {
			x := s.Vec()
			VMOVUPS(Mem{Base: src, Disp: v * s.Bytes()}, x)
			VCVTPS2PH(Imm(0), x, Mem{Base: dst, Disp: v * 2 * s.Lanes})
		}
	})
}

// rneBF16 computes, in the dword lanes of a new register, the bfloat16
// bits of the float32 lanes of x by integer rounding (see the top of this
// file); c gives the constants hcOne, hcBias, hcAbs, hcInf and hcQuiet (as
// registers, or for AVX2 also as memory operands).
func rneBF16(s isa, x VecVirtual, c func(int) Op) VecVirtual {
	t := s.Vec()
	VPSRLD(Imm(16), x, t) // x >> 16
	r := s.Vec()
	lsb := s.Vec()
	vpand(s, c(hcOne), t, lsb)
	VPADDD(c(hcBias), x, r)
	VPADDD(lsb, r, r)
	VPSRLD(Imm(16), r, r)
	abs := s.Vec()
	vpand(s, c(hcAbs), x, abs)
	if s.EVEX {
		k := K()
		VPCMPGTD(c(hcInf), abs, k) // NaN lanes
		VPORD(c(hcQuiet), t, t)
		VPBLENDMD(t, r, k, r)
		return r
	}
	VPCMPGTD(c(hcInf), abs, abs) // NaN lanes: all ones
	VPOR(c(hcQuiet), t, t)
	VPBLENDVB(abs, t, r, r)
	return r
}

// vpand emits dst = a & b: VPANDD with EVEX (AVX-512 has no VPAND on zmm),
// else VPAND.
func vpand(s isa, a, b, dst Op) {
	if s.EVEX {
		VPANDD(a, b, dst)
	} else {
		VPAND(a, b, dst)
	}
}

// genF32ToBF16 generates f32ToBF16<ISA> by integer rounding.
func genF32ToBF16(s isa) {
	n, src, dst := convHeader("f32ToBF16"+s.Suffix, "func(dst []uint16, src []float32)",
		"rounds the float32 src to bfloat16, to nearest even, by integer arithmetic.")
	c := halfConsts(s, hcBias, hcOne, hcQuiet, hcAbs, hcInf)
	convLoop(n, src, dst, 4, 2, func() {
		if s.EVEX {
			x := s.Vec()
			VMOVUPS(Mem{Base: src}, x)
			VPMOVDW(rneBF16(s, x, c), Mem{Base: dst})
			return
		}
		// Two ymm of 8 dwords → one ymm of 16 words. VPACKUSDW packs
		// within 128-bit lanes (the values are < 2^16, so it does not
		// saturate); VPERMQ puts the four quadwords back in order.
		x0, x1 := s.Vec(), s.Vec()
		VMOVUPS(Mem{Base: src}, x0)
		VMOVUPS(Mem{Base: src, Disp: 32}, x1)
		r0 := rneBF16(s, x0, c)
		r1 := rneBF16(s, x1, c)
		VPACKUSDW(r1, r0, r0)
		VPERMQ(Imm(0xd8), r0, r0)
		VMOVDQU(r0, Mem{Base: dst})
	})
}

// genF32ToBF16NE generates f32ToBF16AVX512BF16, which converts with
// VCVTNEPS2BF16 (fixed registers Z0 → Y1 around the raw encoding) and falls
// back to integer rounding for a block that holds a float32 subnormal; with
// scale, scaleBF16AVX512BF16, which converts the products x·a (VMULPS, as
// Scale) instead: a normalised output row stored in one pass.
func genF32ToBF16NE(scale bool) {
	var n, src, dst Register
	var av Register
	if scale {
		TEXT("scaleBF16AVX512BF16", NOSPLIT, "func(dst []uint16, x []float32, a float32)")
		Pragma("noescape")
		Doc("scaleBF16AVX512BF16 rounds the products x[i]·a (as Scale) to bfloat16, to nearest even, "+
			"into dst with VCVTNEPS2BF16 (AVX512_BF16); x is left as it is.",
			"len(dst) is a multiple of 16 and len(x) >= len(dst).")
		dst = Load(Param("dst").Base(), GP64())
		src = Load(Param("x").Base(), GP64())
		n = Load(Param("dst").Len(), GP64())
		av = broadcastParam(isaAVX512, "a")
	} else {
		n, src, dst = convHeader("f32ToBF16AVX512BF16", "func(dst []uint16, src []float32)",
			"rounds the float32 src to bfloat16, to nearest even, with VCVTNEPS2BF16 (AVX512_BF16).")
	}
	s := isaAVX512
	c := halfConsts(s, hcBias, hcOne, hcQuiet, hcAbs, hcInf, hcMant)
	Label("loop")
	CMPQ(n, U32(16))
	JL(LabelRef("done"))
	if scale {
		VMULPS(Mem{Base: src}, av, Z0)
	} else {
		VMOVUPS(Mem{Base: src}, Z0)
	}
	// Subnormal lanes: exponent zero and mantissa non-zero.
	kexp, ksub := K(), K()
	VPTESTNMD(c(hcInf), Z0, kexp)
	VPTESTMD(c(hcMant), Z0, kexp, ksub)
	KORTESTW(ksub, ksub)
	JNZ(LabelRef("subnormal"))
	vcvtneps2bf16(1, 0)
	VMOVDQU(Y1, Mem{Base: dst})
	Label("next")
	ADDQ(U32(64), src)
	ADDQ(U32(32), dst)
	SUBQ(U32(16), n)
	JMP(LabelRef("loop"))

	Label("subnormal")
	x := s.Vec()
	if scale {
		VMOVAPS(Z0, x) // the products
	} else {
		VMOVUPS(Mem{Base: src}, x)
	}
	VPMOVDW(rneBF16(s, x, c), Mem{Base: dst})
	JMP(LabelRef("next"))

	Label("done")
	VZEROUPPER()
	RET()
}

func genConvert() {
	genHalfTable()
	for _, s := range []isa{isaAVX512, isaAVX2} {
		genHalfToF32(s)
		genF32ToF16(s)
		genF32ToBF16(s)
		genRoundF32(s)
	}
	genF32ToBF16NE(false)
	genF32ToBF16NE(true)
	genCPUID()
}

// genRoundF32 generates roundBF16<ISA> and roundF16<ISA>: x[i] becomes the
// float32 value of x[i] rounded to the 16-bit type, in place.
//
//	bf16: (x + 0x7fff + bit16(x)) & 0xffff0000, NaN → (x | 0x00400000) & 0xffff0000
//	fp16: VCVTPS2PH (nearest even) then VCVTPH2PS
func genRoundF32(s isa) {
	for _, f16 := range []bool{false, true} {
		name, what := "roundBF16"+s.Suffix, "bfloat16"
		if f16 {
			name, what = "roundF16"+s.Suffix, "fp16"
		}
		TEXT(name, NOSPLIT, "func(x []float32)")
		Pragma("noescape")
		Doc(name+" rounds each element of x to "+what+" (to nearest even) and",
			"stores its float32 value back. len(x) is a multiple of 16.")
		xp := Load(Param("x").Base(), GP64())
		n := Load(Param("x").Len(), GP64())
		var c func(int) Op
		if !f16 {
			c = halfConsts(s, hcBias, hcOne, hcQuietHi, hcAbs, hcInf, hcHigh)
		}
		Label("loop")
		CMPQ(n, U32(16))
		JL(LabelRef("done"))
		for v := 0; v < 16/s.Lanes; v++ {
			m := Mem{Base: xp, Disp: v * s.Bytes()}
			x := s.Vec()
			VMOVUPS(m, x)
			if f16 {
				h := XMM()
				if s.EVEX {
					h = YMM()
				}
				VCVTPS2PH(Imm(0), x, h)
				VCVTPH2PS(h, x)
				VMOVUPS(x, m)
				continue
			}
			t, r, abs := s.Vec(), s.Vec(), s.Vec()
			VPSRLD(Imm(16), x, t)
			vpand(s, c(hcOne), t, t)
			VPADDD(c(hcBias), x, r)
			VPADDD(t, r, r)
			vpand(s, c(hcAbs), x, abs)
			if s.EVEX {
				k := K()
				VPCMPGTD(c(hcInf), abs, k)   // NaN lanes
				VPORD(c(hcQuietHi), x, k, r) // NaN lanes: x with the quiet bit
			} else {
				VPCMPGTD(c(hcInf), abs, abs) // NaN lanes: all ones
				VPOR(c(hcQuietHi), x, t)
				VPBLENDVB(abs, t, r, r)
			}
			vpand(s, c(hcHigh), r, r)
			VMOVUPS(r, m)
		}
		ADDQ(U32(64), xp)
		SUBQ(U32(16), n)
		JMP(LabelRef("loop"))
		Label("done")
		VZEROUPPER()
		RET()
	}
}
