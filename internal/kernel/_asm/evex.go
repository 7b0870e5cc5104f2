package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// An encoder for the few instructions the Go assembler does not know:
// VDPBF16PS and VCVTNEPS2BF16 (AVX512_BF16, EVEX) and the AMX tile
// instructions (VEX). The generator emits them as BYTE directives, so their
// register operands must be physical registers fixed at generation time;
// raw() tells avo which registers each one reads and writes, so that the
// register allocator keeps its virtual registers away from them.
//
// Encoding rules (Intel SDM vol. 2, §2.3 VEX and §2.7 EVEX):
//
//	EVEX  62 P0 P1 P2 opcode ModRM [SIB] [disp]
//	      P0 = R̄ X̄ B̄ R̄' 0 m m m      (R, R': bits 3, 4 of ModRM.reg;
//	                                 B, X: bits 3, 4 of ModRM.rm, or of base/index)
//	      P1 = W v̄ v̄ v̄ v̄ 1 p p      (vvvv: bits 0-3 of the second source, inverted)
//	      P2 = z L' L b V̄' a a a     (V': bit 4 of vvvv; b: broadcast; aaa: opmask)
//	VEX3  C4 R̄X̄B̄mmmmm Wv̄v̄v̄v̄Lpp opcode ModRM [SIB] [disp]
//
// pp: 0 none, 1 66, 2 F3, 3 F2; mmm: 1 0F, 2 0F38, 3 0F3A. An EVEX memory
// displacement that is a multiple of N (the memory operand's size, or the
// element size with broadcast) is stored as the 8-bit disp/N when it fits.
// The golden tests compare the bytes with GNU as (binutils 2.40).

// mem is the memory operand [base + index*scale + disp]; base and index are
// general-purpose register numbers 0-15 (AX=0 … R15=15); index < 0 means
// none. bcst marks an EVEX 32-bit broadcast ({1to16}).
type mem struct {
	base, index, scale, disp int
	bcst                     bool
}

var gpNames = [16]string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

// text formats m as objdump -M intel does, with size prefix pfx ("" for none).
func (m mem) text(pfx string) string {
	s := "[" + gpNames[m.base]
	if m.index >= 0 {
		s += fmt.Sprintf("+%s*%d", gpNames[m.index], m.scale)
	}
	switch {
	case m.disp == 0 && m.base&7 == 5: // [rbp], [r13]: encoded with a zero displacement
		s += "+0x0"
	case m.disp > 0:
		s += fmt.Sprintf("+0x%x", m.disp)
	case m.disp < 0:
		s += fmt.Sprintf("-0x%x", -m.disp)
	}
	s += "]"
	if pfx != "" {
		s = pfx + " " + s
	}
	return s
}

// modrmMem returns ModRM, SIB and displacement for m with ModRM.reg = r
// (low 3 bits used), compressing an 8-bit displacement by n (1 for VEX),
// and the REX-style X and B bits (bit 3 of index and base).
func modrmMem(r int, m mem, n int, forceSIB bool) (code []byte, x, b int) {
	if m.base < 0 || m.base > 15 || m.index > 15 || m.index == 4 {
		panic(fmt.Sprintf("encoder: bad memory operand %+v", m))
	}
	var mod, disp8 int
	var dispBytes []byte
	switch {
	case m.disp == 0 && m.base&7 != 5: // [rbp]/[r13] need a displacement
		mod = 0
	case m.disp%n == 0 && m.disp/n >= -128 && m.disp/n <= 127:
		mod, disp8 = 1, m.disp/n
		dispBytes = []byte{byte(int8(disp8))}
	default:
		mod = 2
		d := uint32(int32(m.disp))
		dispBytes = []byte{byte(d), byte(d >> 8), byte(d >> 16), byte(d >> 24)}
	}
	sib := forceSIB || m.index >= 0 || m.base&7 == 4
	if !sib {
		code = append(code, byte(mod<<6|(r&7)<<3|m.base&7))
		return append(code, dispBytes...), 0, m.base >> 3 & 1
	}
	idx, ss := 4, 0 // index 100: none
	if m.index >= 0 {
		idx = m.index
		switch m.scale {
		case 1:
		case 2:
			ss = 1
		case 4:
			ss = 2
		case 8:
			ss = 3
		default:
			panic(fmt.Sprintf("encoder: bad scale %d", m.scale))
		}
	}
	code = append(code, byte(mod<<6|(r&7)<<3|4), byte(ss<<6|(idx&7)<<3|m.base&7))
	return append(code, dispBytes...), idx >> 3 & 1, m.base >> 3 & 1
}

// evexOp is an EVEX-encoded opcode with W0.
type evexOp struct {
	name     string
	pp, mmm  int
	op       byte
	vvvvUsed bool
}

var (
	opVDPBF16PS     = evexOp{"vdpbf16ps", 2, 2, 0x52, true}
	opVCVTNEPS2BF16 = evexOp{"vcvtneps2bf16", 2, 2, 0x72, false}
)

func evexPrefix(o evexOp, ll, r, x, b, v int, bcst bool) []byte {
	inv := func(bit int) int { return ^bit & 1 }
	p0 := inv(r>>3&1)<<7 | inv(x)<<6 | inv(b)<<5 | inv(r>>4&1)<<4 | o.mmm
	p1 := 0<<7 | (^v&15)<<3 | 1<<2 | o.pp
	bb := 0
	if bcst {
		bb = 1
	}
	p2 := ll<<5 | bb<<4 | inv(v>>4&1)<<3
	return []byte{0x62, byte(p0), byte(p1), byte(p2), o.op}
}

// evexRR encodes o with vector register operands: ModRM.reg = r, vvvv = v,
// ModRM.rm = m (register numbers 0-31), vector length ll (2: 512 bits).
func evexRR(o evexOp, ll, r, v, m int) []byte {
	code := evexPrefix(o, ll, r, m>>4&1, m>>3&1, v, false)
	return append(code, byte(0xc0|(r&7)<<3|m&7))
}

// evexRM encodes o with ModRM.reg = r, vvvv = v and the memory operand mm.
func evexRM(o evexOp, ll, r, v int, mm mem) []byte {
	n := 16 << ll
	if mm.bcst {
		n = 4
	}
	rest, x, b := modrmMem(r, mm, n, false)
	return append(evexPrefix(o, ll, r, x, b, v, mm.bcst), rest...)
}

// vexOp is a VEX.128.W0 opcode in map 0F38.
type vexOp struct {
	name string
	pp   int
	op   byte
}

var (
	opTDPBF16PS   = vexOp{"tdpbf16ps", 2, 0x5c}
	opTDPFP16PS   = vexOp{"tdpfp16ps", 3, 0x5c}
	opTILELOADD   = vexOp{"tileloadd", 3, 0x4b}
	opTILESTORED  = vexOp{"tilestored", 2, 0x4b}
	opLDTILECFG   = vexOp{"ldtilecfg", 0, 0x49}
	opTILERELEASE = vexOp{"tilerelease", 0, 0x49}
	opTILEZERO    = vexOp{"tilezero", 3, 0x49}
)

func vexPrefix(o vexOp, r, x, b, v int) []byte {
	inv := func(bit int) int { return ^bit & 1 }
	b1 := inv(r>>3&1)<<7 | inv(x)<<6 | inv(b)<<5 | 2 // map 0F38
	b2 := (^v&15)<<3 | o.pp                          // W0, L0
	return []byte{0xc4, byte(b1), byte(b2), o.op}
}

// vexRR encodes o with ModRM.reg = r, vvvv = v, ModRM.rm = m (register form).
func vexRR(o vexOp, r, v, m int) []byte {
	return append(vexPrefix(o, r, 0, m>>3&1, v), byte(0xc0|(r&7)<<3|m&7))
}

// vexRM encodes o with ModRM.reg = r, vvvv unused and the memory operand mm
// (the tile loads and stores require a SIB byte).
func vexRM(o vexOp, r int, mm mem, sib bool) []byte {
	rest, x, b := modrmMem(r, mm, 1, sib)
	return append(vexPrefix(o, r, x, b, 0), rest...)
}

// Instructions: each returns its encoding and its objdump -M intel text.

func encVDPBF16PS(dst, src1, src2 int) ([]byte, string) {
	return encVDPBF16PSLen(2, dst, src1, src2)
}

// encVDPBF16PSLen is encVDPBF16PS at vector length ll (1: ymm, 2: zmm).
func encVDPBF16PSLen(ll, dst, src1, src2 int) ([]byte, string) {
	x := [...]string{1: "ymm", 2: "zmm"}[ll]
	return evexRR(opVDPBF16PS, ll, dst, src1, src2), fmt.Sprintf("vdpbf16ps %s%d,%s%d,%s%d", x, dst, x, src1, x, src2)
}

func encVDPBF16PSMem(dst, src1 int, m mem) ([]byte, string) {
	pfx := "ZMMWORD PTR"
	if m.bcst {
		pfx = "DWORD BCST"
	}
	return evexRM(opVDPBF16PS, 2, dst, src1, m), fmt.Sprintf("vdpbf16ps zmm%d,zmm%d,%s", dst, src1, m.text(pfx))
}

func encVCVTNEPS2BF16(dst, src int) ([]byte, string) {
	return evexRR(opVCVTNEPS2BF16, 2, dst, 0, src), fmt.Sprintf("vcvtneps2bf16 ymm%d,zmm%d", dst, src)
}

// encTDP encodes TDPBF16PS or TDPFP16PS dst += src1·src2 (tiles 0-7).
func encTDP(o vexOp, dst, src1, src2 int) ([]byte, string) {
	return vexRR(o, dst, src2, src1), fmt.Sprintf("%s tmm%d,tmm%d,tmm%d", o.name, dst, src1, src2)
}

func encTILELOADD(t int, m mem) ([]byte, string) {
	return vexRM(opTILELOADD, t, m, true), fmt.Sprintf("tileloadd tmm%d,%s", t, m.text(""))
}

func encTILESTORED(m mem, t int) ([]byte, string) {
	return vexRM(opTILESTORED, t, m, true), fmt.Sprintf("tilestored %s,tmm%d", m.text(""), t)
}

func encLDTILECFG(m mem) ([]byte, string) {
	return vexRM(opLDTILECFG, 0, m, false), "ldtilecfg " + m.text("")
}

func encTILERELEASE() ([]byte, string) { return vexRR(opTILERELEASE, 0, 0, 0), "tilerelease" }

func encTILEZERO(t int) ([]byte, string) {
	return vexRR(opTILEZERO, t, 0, 0), fmt.Sprintf("tilezero tmm%d", t)
}

// raw emits one encoded instruction: a comment "raw: <text>" (which the
// package's golden test checks against the bytes) and one BYTE directive per
// byte. inputs and outputs are the physical registers it reads and writes.
func raw(code []byte, text string, inputs, outputs []Op) {
	Comment("raw: " + text)
	for i, b := range code {
		in := &ir.Instruction{Opcode: "BYTE", Operands: []Op{U8(b)}}
		if i == 0 {
			in.Inputs, in.Outputs = inputs, outputs
		}
		Instruction(in)
	}
}

// zmm returns the physical vector register number n.
func zmm(n int) reg.VecPhysical { return reg.Vector.Lookup(reg.Index(n), reg.S512).(reg.VecPhysical) }

// vdpbf16ps emits VDPBF16PS Z(dst) += pairs of Z(src1)·Z(src2).
func vdpbf16ps(dst, src1, src2 int) {
	code, text := encVDPBF16PS(dst, src1, src2)
	raw(code, text, []Op{zmm(dst), zmm(src1), zmm(src2)}, []Op{zmm(dst)})
}

// vcvtneps2bf16 emits VCVTNEPS2BF16 Y(dst) ← Z(src).
func vcvtneps2bf16(dst, src int) {
	code, text := encVCVTNEPS2BF16(dst, src)
	raw(code, text, []Op{zmm(src)}, []Op{zmm(dst)})
}

// gpNum returns the encoding number of a physical general-purpose register.
func gpNum(r reg.Register) int {
	p, ok := r.(reg.Physical)
	if !ok {
		panic(fmt.Sprintf("encoder: %v is not a physical register", r))
	}
	return int(p.PhysicalIndex())
}

// memOf converts an avo memory operand with physical registers.
func memOf(m Mem) mem {
	out := mem{base: gpNum(m.Base), index: -1, disp: m.Disp}
	if m.Index != nil {
		out.index, out.scale = gpNum(m.Index), int(m.Scale)
	}
	return out
}

// memRegs lists the registers a memory operand reads.
func memRegs(m Mem) []Op {
	ops := []Op{m.Base}
	if m.Index != nil {
		ops = append(ops, m.Index)
	}
	return ops
}
