package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// What the kernel families share: the instruction sets every kernel is
// generated for (each twice from the same Go code: once for AVX-512, zmm
// registers and 16 float32 lanes, once for AVX2+FMA, ymm registers and 8
// lanes), parameters, zeroing and horizontal reductions.

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

// broadcastParam loads the float32 parameter name into all lanes of a new
// vector register.
func broadcastParam(s isa, name string) VecVirtual {
	x := Load(Param(name), XMM())
	v := s.Vec()
	VBROADCASTSS(x, v)
	return v
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
