package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// AMX matrix products: C (float32) = or += A·B for 16-bit A (row-major,
// bfloat16 or fp16) and B packed in the VNNI pair layout of bf16.go (strips
// ldb words apart), whose strips of 16 columns are exactly AMX B tiles:
// pair row q of a strip is tile row q (64 bytes), so the B tile of k-block
// [32t, 32t+32) is 16 rows at strip + 1024t with a stride of 64 bytes.
//
// One call processes mb row blocks of `rows` (≤ 16) rows each, over all
// n/16 strips and the whole depth k (even). The Go caller builds the tile
// configuration cfg (palette 1):
//
//	tmm0  C        rows × 64 bytes (16 float32)
//	tmm1  A        rows × 64 bytes (32 elements of k)
//	tmm2  B        16 × 64 bytes
//	tmm3  A tail   rows × 2·(k%32) bytes    (unconfigured when k%32 == 0)
//	tmm4  B tail   (k%32)/2 × 64 bytes
//
// and the call is self-contained: LDTILECFG first, TILERELEASE last, so no
// tile state is live when it returns (a goroutine switch can only happen
// between calls; asynchronous preemption never stops assembly).
//
// The tile instructions address memory as base + index (the stride), so the
// registers are fixed (no avo allocation in these functions):
//
//	R8 C row block   R9 C tile     R10 ldc (bytes)   R11 A row block
//	SI A tile        DX lda (bytes) BX B strip      DI B tile
//	CX 64            R12 row blocks left  R13 strips left  AX k steps / scratch
func genAMX(name string, op vexOp) {
	TEXT(name, NOSPLIT, "func(cfg *[64]byte, c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, mb, rows, n, k int, acc bool)")
	Pragma("noescape")
	Doc(name+" sets (acc false) or adds to (acc true) C the product A·B on AMX tiles,",
		"for mb blocks of rows rows (see amx.go of the generator for cfg).",
		"The caller guarantees mb ≥ 1, 1 ≤ rows ≤ 16, n%16 == 0, n ≥ 16, k%2 == 0, ldb ≥ 16k,",
		"that all accesses are in bounds and that the OS granted AMX permission.")
	Load(Param("cfg"), RAX)
	code, text := encLDTILECFG(memOf(Mem{Base: RAX}))
	raw(code, text, []Op{RAX}, nil)

	Load(Param("c").Base(), R8)
	Load(Param("ldc"), R10)
	SHLQ(Imm(2), R10)
	Load(Param("a").Base(), R11)
	Load(Param("lda"), RDX)
	SHLQ(Imm(1), RDX)
	MOVQ(U32(64), RCX)
	Load(Param("mb"), R12)

	Label("block")
	MOVQ(R8, R9)
	Load(Param("b").Base(), RBX)
	Load(Param("n"), R13)
	SHRQ(Imm(4), R13)

	Label("strip")
	cMem := Mem{Base: R9, Index: R10, Scale: 1}
	Load(Param("acc"), RAX)
	TESTQ(RAX, RAX)
	JE(LabelRef("zero"))
	code, text = encTILELOADD(0, memOf(cMem))
	raw(code, text, memRegs(cMem), nil)
	JMP(LabelRef("ksteps"))
	Label("zero")
	code, text = encTILEZERO(0)
	raw(code, text, nil, nil)

	Label("ksteps")
	MOVQ(R11, RSI)
	MOVQ(RBX, RDI)
	Load(Param("k"), RAX)
	SHRQ(Imm(5), RAX)
	JE(LabelRef("ktail"))
	aMem := Mem{Base: RSI, Index: RDX, Scale: 1}
	bMem := Mem{Base: RDI, Index: RCX, Scale: 1}
	Label("kloop")
	tileProduct(op, 1, 2, aMem, bMem)
	ADDQ(Imm(64), RSI)
	ADDQ(U32(1024), RDI)
	DECQ(RAX)
	JNE(LabelRef("kloop"))

	Label("ktail")
	Load(Param("k"), RAX)
	ANDQ(Imm(31), RAX)
	JE(LabelRef("store"))
	tileProduct(op, 3, 4, aMem, bMem)

	Label("store")
	code, text = encTILESTORED(memOf(cMem), 0)
	raw(code, text, memRegs(cMem), nil)
	ADDQ(Imm(64), R9)
	Load(Param("ldb"), RAX) // next strip: ldb words = 2·ldb bytes
	SHLQ(Imm(1), RAX)
	ADDQ(RAX, RBX)
	DECQ(R13)
	JNE(LabelRef("strip"))

	Load(Param("rows"), RAX)
	IMULQ(RDX, RAX)
	ADDQ(RAX, R11)
	Load(Param("rows"), RAX)
	IMULQ(R10, RAX)
	ADDQ(RAX, R8)
	DECQ(R12)
	JNE(LabelRef("block"))

	code, text = encTILERELEASE()
	raw(code, text, nil, nil)
	RET()
}

// tileProduct emits one step of the k loop: tile ta loaded from aMem, tile
// tb from bMem, and tmm0 += ta·tb.
func tileProduct(op vexOp, ta, tb int, aMem, bMem Mem) {
	code, text := encTILELOADD(ta, memOf(aMem))
	raw(code, text, memRegs(aMem), nil)
	code, text = encTILELOADD(tb, memOf(bMem))
	raw(code, text, memRegs(bMem), nil)
	code, text = encTDP(op, 0, ta, tb)
	raw(code, text, nil, nil)
}

// genAMXPeak generates amxPeak: four independent tile products per
// iteration (tmm0-3 accumulate products of tmm4-7), register-only.
func genAMXPeak() {
	TEXT("amxPeak", NOSPLIT, "func(cfg *[64]byte, iters int, fp16 bool)")
	Pragma("noescape")
	Doc("amxPeak runs iters iterations of four independent TDPBF16PS (TDPFP16PS if fp16)",
		"on full 16×16 tiles configured by cfg: 4·16·16·32·2 FLOPs per iteration.",
		"The caller guarantees that the OS granted AMX permission.")
	Load(Param("cfg"), RAX)
	code, text := encLDTILECFG(memOf(Mem{Base: RAX}))
	raw(code, text, []Op{RAX}, nil)
	for t := 0; t < 8; t++ {
		code, text = encTILEZERO(t)
		raw(code, text, nil, nil)
	}
	Load(Param("iters"), RCX)
	Load(Param("fp16"), RAX)
	TESTQ(RCX, RCX)
	JLE(LabelRef("done"))
	TESTQ(RAX, RAX)
	JNE(LabelRef("fp16"))
	for _, l := range []struct {
		label string
		op    vexOp
	}{{"bf16", opTDPBF16PS}, {"fp16", opTDPFP16PS}} {
		Label(l.label)
		for t := 0; t < 4; t++ {
			code, text = encTDP(l.op, t, 4+t/2, 6+t%2)
			raw(code, text, nil, nil)
		}
		DECQ(RCX)
		JNE(LabelRef(l.label))
		JMP(LabelRef("done"))
	}
	Label("done")
	code, text = encTILERELEASE()
	raw(code, text, nil, nil)
	RET()
}

func genAMXAll() {
	genAMX("amxBF16", opTDPBF16PS)
	genAMX("amxF16", opTDPFP16PS)
	genAMXPeak()
}
