package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Dword transposes and the kernels built on them: the packers of pack.go
// (a pair of 16-bit elements is one dword, so packing the rows of K is a
// dword transpose) and TransposeRound.

// transposeDwords transposes the s.Lanes × s.Lanes dword matrix whose rows
// are r (8 ymm or 16 zmm) and returns its columns: out[j] lane i = r[i]
// lane j. Three stages:
//
//  1. VPUNPCKLDQ/HDQ of row pairs and 2. VPUNPCKLQDQ/HQDQ of those: within
//     each 128-bit lane L, u[4G+c] holds column 4L+c of rows 4G … 4G+3;
//  3. move the 128-bit lanes: out[4L+c] lane G = u[4G+c] lane L
//     (VPERM2I128 for 2 lanes, two rounds of VSHUFI32X4 for 4).
func transposeDwords(s isa, r []VecVirtual) []VecVirtual {
	n := len(r)
	if n != s.Lanes {
		panic("transposeDwords: need one row per lane")
	}
	t := make([]VecVirtual, n)
	for i := 0; i < n; i += 2 {
		t[i], t[i+1] = s.Vec(), s.Vec()
		VPUNPCKLDQ(r[i+1], r[i], t[i])
		VPUNPCKHDQ(r[i+1], r[i], t[i+1])
	}
	u := make([]VecVirtual, n)
	for g := 0; g < n; g += 4 {
		for c := 0; c < 2; c++ {
			u[g+2*c], u[g+2*c+1] = s.Vec(), s.Vec()
			VPUNPCKLQDQ(t[g+2+c], t[g+c], u[g+2*c])
			VPUNPCKHQDQ(t[g+2+c], t[g+c], u[g+2*c+1])
		}
	}
	out := make([]VecVirtual, n)
	for c := 0; c < 4; c++ {
		if n == 8 {
			out[c], out[4+c] = s.Vec(), s.Vec()
			VPERM2I128(Imm(0x20), u[4+c], u[c], out[c])
			VPERM2I128(Imm(0x31), u[4+c], u[c], out[4+c])
			continue
		}
		a, b, cc, d := u[c], u[4+c], u[8+c], u[12+c]
		v0, v1, v2, v3 := ZMM(), ZMM(), ZMM(), ZMM()
		VSHUFI32X4(Imm(0x44), b, a, v0) // a0 a1 b0 b1
		VSHUFI32X4(Imm(0xee), b, a, v1) // a2 a3 b2 b3
		VSHUFI32X4(Imm(0x44), d, cc, v2)
		VSHUFI32X4(Imm(0xee), d, cc, v3)
		for l, src := range [][2]VecVirtual{{v0, v2}, {v0, v2}, {v1, v3}, {v1, v3}} {
			imm := uint64(0x88) // lanes 0, 2 of each
			if l%2 == 1 {
				imm = 0xdd // lanes 1, 3
			}
			out[4*l+c] = ZMM()
			VSHUFI32X4(Imm(imm), src[1], src[0], out[4*l+c])
		}
	}
	return out
}

// loadRowsOrZero emits, for i < len(r): r[i] = load(i) if i < rows, else
// zero (rows is a register holding 1 … len(r)). load(i) finds row i at
// ptr, which advances by step between rows; row 0 is always loaded. The
// zeros are loaded from memory: a register zeroing idiom (VPXORD r, r, r)
// reads r as far as the register allocator knows, which would keep every
// r[i] live across the whole loop.
func loadRowsOrZero(r []VecVirtual, rows, ptr, step Register, load func(i int, dst VecVirtual)) {
	for i := range r {
		if i > 0 {
			CMPQ(rows, U32(i))
			JLE(LabelRef(fmt.Sprintf("zero%d", i)))
			ADDQ(step, ptr)
		}
		load(i, r[i])
	}
	JMP(LabelRef("loaded"))
	for i := 1; i < len(r); i++ {
		Label(fmt.Sprintf("zero%d", i))
		VMOVDQU64(packTab.Offset(ptZero), r[i])
	}
	Label("loaded")
}

// minConst returns a new register holding min(x, c).
func minConst(x Register, c int) GPVirtual {
	r := GP64()
	MOVQ(U32(c), r)
	CMPQ(x, U32(c))
	CMOVQLT(x, r)
	return r
}

// lowMask returns an opmask register holding 2^cnt − 1 (0 ≤ cnt ≤ 32), read
// from the table of masks, and the general-purpose register it was read
// into.
func lowMask(cnt Register) (OpmaskVirtual, GPVirtual) {
	tab := GP64() // the assembler takes no index on a static symbol
	LEAQ(packTab, tab)
	t := GP32()
	MOVL(Mem{Base: tab, Index: cnt, Scale: 4}, t)
	k := K()
	KMOVD(t, k)
	return k, t
}

// genTransposeRound generates transposeRound{BF16,F16}AVX512:
//
//	dst[j*ldd+i] = round(src[i*lds+j])   for i < rows, j < cols
//
// in blocks of 16×16: 16 rows of 16 float32 (masked to the columns left,
// rows beyond the last zeroed), a dword transpose, then each column rounded
// (integer rounding for bfloat16, VCVTPS2PH for fp16) and stored as 16
// words masked to the rows left.
func genTransposeRound(f16 bool) {
	name, what := "transposeRoundBF16AVX512", "bfloat16"
	if f16 {
		name, what = "transposeRoundF16AVX512", "fp16"
	}
	TEXT(name, NOSPLIT, "func(dst []uint16, ldd int, src []float32, lds, rows, cols int)")
	Pragma("noescape")
	Doc(name+" sets dst[j*ldd+i] to src[i*lds+j] rounded to "+what+" (to nearest even)",
		"for i < rows, j < cols (see Impl.TransposeRound). AVX512F and BW; the caller",
		"guarantees that all accesses are in bounds.")
	s := isaAVX512
	var c func(int) Op
	if !f16 {
		c = halfConsts(s, hcBias, hcOne, hcQuiet, hcAbs, hcInf)
	}
	lds := loadStride("lds", 4)
	ldd := loadStride("ldd", 2)
	sRow := Load(Param("src").Base(), GP64())
	dCol := Load(Param("dst").Base(), GP64())
	iLeft := Load(Param("rows"), GP64())

	Label("rowBlocks")
	TESTQ(iLeft, iLeft)
	JLE(LabelRef("done"))
	nr := minConst(iLeft, 16)
	kw, _ := lowMask(nr)
	jLeft := Load(Param("cols"), GP64())
	sp, dp := GP64(), GP64()
	MOVQ(sRow, sp)
	MOVQ(dCol, dp)

	Label("colBlocks")
	TESTQ(jLeft, jLeft)
	JLE(LabelRef("rowBlockDone"))
	nc := minConst(jLeft, 16)
	kc, _ := lowMask(nc)
	r := make([]VecVirtual, 16)
	for i := range r {
		r[i] = ZMM()
	}
	rp := GP64()
	MOVQ(sp, rp)
	loadRowsOrZero(r, nr, rp, lds, func(i int, dst VecVirtual) {
		VMOVUPS_Z(Mem{Base: rp}, kc, dst)
	})
	o := transposeDwords(s, r)
	dj := GP64()
	MOVQ(dp, dj)
	for j := range o {
		if j > 0 {
			CMPQ(nc, U32(j))
			JLE(LabelRef("stored"))
			ADDQ(ldd, dj)
		}
		if f16 {
			VCVTPS2PH(Imm(0), o[j], kw, Mem{Base: dj})
		} else {
			VPMOVDW(rneBF16(s, o[j], c), kw, Mem{Base: dj})
		}
	}
	Label("stored")
	ADDQ(U32(64), sp)
	t := GP64()
	MOVQ(ldd, t)
	SHLQ(Imm(4), t)
	ADDQ(t, dp)
	SUBQ(U32(16), jLeft)
	JMP(LabelRef("colBlocks"))

	Label("rowBlockDone")
	t = GP64()
	MOVQ(lds, t)
	SHLQ(Imm(4), t)
	ADDQ(t, sRow)
	ADDQ(U32(32), dCol)
	SUBQ(U32(16), iLeft)
	JMP(LabelRef("rowBlocks"))

	Label("done")
	VZEROUPPER()
	RET()
}
