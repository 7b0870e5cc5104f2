package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Philox-4x32-10 for the dropout mask, eight counters at once.

// genPhilox generates the constant table and philox8AVX2.
func genPhilox() {
	philoxTab = genPhiloxTable()
	genPhilox8()
}

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

// philoxTab holds the lane offsets 0..7, then the multipliers and the
// Weyl key increments, each in eight lanes (philoxM0 … of package kernel,
// whose tests compare them with the table).
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
