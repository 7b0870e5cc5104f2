package main

import (
	"fmt"
	"strings"
)

// Matrix products. The microkernel keeps a tile of mr rows × 16 columns
// of C in 4·mr accumulators (v8-v31: row i, columns 4v..4v+3 in
// v(8+4i+v)), the A values of the tile's rows from v2 and one half-row of
// B (8 columns) at a time in v0, v1:
//
//	A·B (mr = 6): A is read four k at a time, one LDR Q per row (v2+i
//	holds A[i, p..p+3]); for each of the four k, B's row is loaded as
//	two pairs of vectors and every accumulator gets one FMLA by element
//	(lane = k). Per 4 k: 6 LDR Q + 8 LD1 (22 loads of 128 bits) + 96
//	FMLA + 4-7 pointer and loop instructions.
//	A·Bᵀ (mr = 6): the same loop on the packed Bᵀ (LDP Q), FMLA by
//	element too: each element is the chain of fused multiply-adds
//	s = fma(a[p], b[p], s) from zero in the order of k, the arithmetic
//	of mulABtFused (Impl.FusedScores; bit for bit its results). Per 4 k:
//	6 LDR Q + 8 LDP Q + 96 FMLA.
//	Aᵀ·B (mr = 6): the tile's 6 rows of Aᵀ at one k are consecutive in
//	memory: one LD1 (rows 0-3, post-incremented by lda) and one LDR D
//	(rows 4-5) into v2, v3, and B's row as one LD1 of four vectors
//	(v4-v7; Aᵀ·B leaves those free) post-incremented by ldb. Per k: 3
//	loads + 24 FMLA + 2 loop instructions.
//
// Ceiling on Neoverse V2 / Apple M (4 FP pipes that issue FMLA, FMUL and
// FADD alike, latency 4; 3 load pipes): A·B and Aᵀ·B are FMA-bound, 24
// cycles per 4 k of a full tile against 7.3 cycles of loads, issuing ≈
// 4.8 instructions per cycle; each accumulator is updated every 6 cycles
// (24 chains ≥ the 16 that cover latency × pipes). So their inner loop
// can run at the FMA peak. A·Bᵀ is the same loop with LDP Q for B:
// FMA-bound alike. Whole calls at the forward's tile shapes, predicted by
// llvm-mca 19 (the mca-kit's predict_call.py: k loops, tails, the code
// around them; not measured), in % of the FP32 FMA peak:
//
//	                        Neoverse V2   N2    N1
//	A·Bᵀ 48×512×64 (d 64)       96%      96%   96%   (49% unfused)
//	A·Bᵀ 48×512×128 (d 128)     98%      98%   98%   (49-50% unfused)
//	A·B  48×64×512, 48×128×512  99%      99%   99%
//
// A·Bᵀ rounded each product before adding it (FMUL then FADD, both on the
// FP pipes: half the FMA peak, and Q·Kᵀ was 57% of the forward's cycles on
// Neoverse V2) until the rule of SPEC §4 admitted fused scores measured
// against the plain algorithm fused the same way: the rounding of large logits (|S| ~ 1e4),
// which the softmax amplifies, is then the baseline's own (the 40× failure
// of the reliability report's finding 9, TestRowsMeetTheRule, came from
// fused scores measured against the unfused baseline). The amd64 kernels
// keep VMULPS + VADDPS: the x86 cores add on separate pipes, so fusing
// gains them nothing. Row tails (m mod mr rows) use the same code with
// fewer rows: 4r chains, latency-bound below 4 rows.
//
// The 16-bit products (Half) use the A·B loop on the pair layout, one
// k step being a pair of k:
//
//	bfloat16 (BFDOT by element, FEAT_BF16): 6×16 tiles, 24 accumulators;
//	per 4 pairs (8 k): 6 LDR Q + 8 LDP Q + 96 BFDOT of 8 multiply-adds
//	each, twice the work of an FMLA per instruction. If BFDOT issues
//	like FMLA (4 per cycle on Neoverse V2, latency 4-5: an assumption,
//	not a measurement), the loop runs at 2× the float32 FLOP peak.
//	bfloat16 by BFMMLA (FEAT_BF16): 6×16 tiles of 2×2 blocks, 24
//	accumulators; the 2×4 operands are built from the pair layout with
//	ZIP into buf (mmla.go; B once per strip, A once per call): per 2
//	pairs (4 k), 1 LD1 + 4 LDP Q + 24 BFMMLA of 16 multiply-adds each.
//	fp16 (FMLAL/FMLAL2 by element, FEAT_FHM): 5×16 tiles, 20
//	accumulators (A must sit in v0-v15 for a 16-bit element index, and
//	the pairs need a third B register); each strip of B is first
//	repacked into buf with even and odd k apart (4 UZP per pair, once
//	per strip instead of in every row tile), then per pair: 2 LDP Q +
//	40 FMLAL(2) of 4 multiply-adds, at most the FMLAL rate, which is the
//	float32 FMA rate: the gain over widening to float32 is the halved
//	reads and the skipped conversions, not the arithmetic.
//
// Each accumulator of A·Bᵀ is updated in the order of k, from zero: one
// element of mulABtNEON is exactly Impl.Dot of its row and column (the
// Go dotFused, a chain of FMA32 in index order).

const gemmMR = 6

type gemmKind int

const (
	kindABt      gemmKind = iota // C = A·Bᵀ, Bᵀ packed in strips of 16 columns
	kindAB                       // C += A·B
	kindAtB                      // C += Aᵀ·B
	kindBF16                     // Half: C (+)= A·B, bfloat16 in the pair layout (BFDOT)
	kindF16                      // Half: C (+)= A·B, fp16 in the pair layout (FMLAL)
	kindBF16MMLA                 // Half: C (+)= A·B, bfloat16 in the pair layout (BFMMLA, mmla.go)
)

// packed reports whether B is read as 16-column strips with a fixed step
// per k (A·Bᵀ: 16 floats; the pair layout: one pair row, 32 values).
func (k gemmKind) packed() bool { return k == kindABt || k.half() }

// half reports a 16-bit product (a k step is a pair of k).
func (k gemmKind) half() bool { return k == kindBF16 || k == kindF16 || k == kindBF16MMLA }

// stripBuf reports a 16-bit product that repacks each strip of B into
// buf (an argument) before its row tiles: BFMMLA's 2×4 blocks, FMLAL's
// even and odd k apart.
func (k gemmKind) stripBuf() bool { return k == kindF16 || k == kindBF16MMLA }

// mr is the number of rows of a full tile: fp16 keeps its A rows in
// v3-v7 (FMLAL by element reads v0-v15 only) and needs a third B
// register, so it has 5 rows (20 accumulators).
func (k gemmKind) mr() int {
	if k == kindF16 {
		return 5
	}
	return gemmMR
}

// aReg is the register of row i's A values.
func (k gemmKind) aReg(i int) V {
	if k == kindF16 {
		return V(3 + i)
	}
	return V(2 + i)
}

// General-purpose registers of the products.
const (
	gC     = "R0"  // &C[0, j0] of the column block
	gB     = "R1"  // B of the column block (its packed strip, or &B[0, j0])
	gN     = "R2"  // columns left
	gARow  = "R3"  // A of the row tile (&A[i0, 0]; Aᵀ·B: &A[0, i0])
	gCRow  = "R4"  // &C[i0, j0]
	gM     = "R5"  // rows left
	gLdc   = "R6"  // ldc in bytes
	gLda   = "R7"  // lda in bytes
	gLdb   = "R8"  // ldb in bytes (A·Bᵀ: bytes per packed strip, 64k)
	gK     = "R9"  // k
	gA6    = "R19" // 6·lda bytes
	gC6    = "R20" // 6·ldc bytes
	gBp    = "R16" // B at step p
	gBp2   = "R21" // A·B: B at step p, column 8
	gPc    = "R17" // k left
	gCp    = "R22" // C rows at load and store
	gAPtr0 = 10    // R10-R15: A rows of the tile (Aᵀ·B: R10 only)
)

func accReg(i, v int) V { return V(8 + 4*i + v) }

func aRowReg(i int) string { return fmt.Sprintf("R%d", gAPtr0+i) }

// genGemm emits the product of kind (accumulate: adding to C): for each
// block of 16 columns, the tiles of kind.mr() rows, then the row tail.
func genGemm(f *file, kind gemmKind, accumulate bool) {
	mr := kind.mr()
	gemmEntry(f, kind, accumulate)
	gemmArgs(f, kind, mr)
	if kind.stripBuf() {
		f.ld(gBuf, "buf", "base")
	}
	if kind == kindBF16MMLA {
		mmlaPackA(f)
	}
	f.label("cols")
	switch kind {
	case kindBF16MMLA:
		packStrip(f, 2, mmlaZipStore)
	case kindF16:
		packStrip(f, 1, f16UzpStore)
	}
	gemmRows(f, kind, accumulate, mr)
	gemmRowTail(f, kind, accumulate, mr)
	f.label("colNext")
	f.i("ADD $64, %s", gC)
	if kind.packed() {
		f.i("ADD %s, %s", gLdb, gB)
	} else {
		f.i("ADD $64, %s", gB)
	}
	f.i("SUBS $16, %s, %s", gN, gN)
	f.i("BNE cols")
	f.ret()
}

// gemmEntry starts the product: its name, signature and doc, and B in gB.
func gemmEntry(f *file, kind gemmKind, accumulate bool) {
	switch kind {
	case kindABt:
		f.text("mulABtNEON", "func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int)",
			"mulABtNEON sets C = A·Bᵀ (see Impl.MulABt); bt is packed by PackBt.",
			"n%16 == 0, m, n >= 1; all accesses are in bounds.",
			"Inner loop, per 4 k of a 6×16 tile: 6 LDR Q + 8 LDP Q + 96 FMLA (24 chains):",
			"fused multiply-adds in the order of k from zero, bit for bit mulABtFused",
			"(Impl.FusedScores).")
	case kindAB:
		f.text("mulAddABNEON", "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)",
			"mulAddABNEON adds A·B to C (see Impl.MulAddAB).",
			"n%16 == 0, m, n, k >= 1; all accesses are in bounds.",
			"Inner loop, per 4 k of a 6×16 tile: 6 LDR Q + 8 LD1 (2 regs) + 96 FMLA (24 chains).")
	case kindAtB:
		f.text("mulAddAtBNEON", "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)",
			"mulAddAtBNEON adds Aᵀ·B to C (see Impl.MulAddAtB).",
			"n%16 == 0, m, n, k >= 1; all accesses are in bounds.",
			"Inner loop, per k of a 6×16 tile: LD1 + LDR D (A) + LD1 (4 regs, B) + 24 FMLA (24 chains).")
	case kindBF16, kindF16, kindBF16MMLA:
		gemmHalfText(f, kind, accumulate)
	}
	if kind == kindABt {
		f.ld(gB, "bt", "base")
	} else {
		f.ld(gB, "b", "base")
	}
}

// gemmHalfText starts a 16-bit product: mul<E>NEON, or mulAdd<E>NEON
// when accumulating.
func gemmHalfText(f *file, kind gemmKind, accumulate bool) {
	e, ins := "BF16", "BFDOT"
	switch kind {
	case kindF16:
		e, ins = "F16", "FMLAL/FMLAL2"
	case kindBF16MMLA:
		e, ins = "BF16MMLA", "BFMMLA"
	}
	name := "mul" + e + "NEON"
	what := "sets C = A·B"
	if accumulate {
		name, what = "mulAdd"+e+"NEON", "adds A·B to C"
	}
	sig, bounds := "func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int)", ""
	if kind.stripBuf() {
		sig, bounds = strings.TrimSuffix(sig, ")")+", buf []uint16)", " buf holds 16·(k rounded up to 4) elements."
		if kind == kindBF16MMLA {
			bounds = " buf holds (16 + 6·⌈m/6⌉)·(k rounded up to 4) elements."
		}
	}
	f.text(name, sig,
		fmt.Sprintf("%s %s (see Half.Mul) by %s: A m×k %s, B in the pair layout", name, what, ins, e),
		"with strip stride ldb. k is even, n%16 == 0, m, n >= 1; all accesses are in bounds."+bounds,
		map[gemmKind]string{
			kindBF16:     "Inner loop, per 4 pairs of a 6×16 tile: 6 LDR Q + 8 LDP Q + 96 BFDOT (24 chains).",
			kindF16:      "Inner loop, per pair of a 5×16 tile: 2 LDP Q + 40 FMLAL/FMLAL2 (20 chains).",
			kindBF16MMLA: "Inner loop, per 2 pairs of a 6×16 tile: LD1 (3 regs) + 4 LDP Q + 24 BFMMLA (24 chains)."}[kind])
}

// gemmArgs loads the other arguments: strides in bytes (A·Bᵀ: the packed
// strip's), k in steps (pairs for the 16-bit kinds), and the strides of a
// full tile of mr rows.
func gemmArgs(f *file, kind gemmKind, mr int) {
	f.ld(gC, "c", "base")
	f.ld(gN, "n", "")
	f.ld(gK, "k", "")
	f.ld(gLdc, "ldc", "")
	f.i("LSL $2, %s", gLdc)
	f.ld(gLda, "lda", "")
	if kind.half() {
		f.i("LSL $1, %s", gLda)
		f.ld(gLdb, "ldb", "")
		f.i("LSL $1, %s", gLdb)
		f.i("LSR $1, %s", gK) // k steps: pairs
	} else {
		f.i("LSL $2, %s", gLda)
	}
	if kind == kindABt {
		f.i("LSL $6, %s, %s", gK, gLdb)
	} else if !kind.half() {
		f.ld(gLdb, "ldb", "")
		f.i("LSL $2, %s", gLdb)
	}
	f.i("MOVD $%d, R23", mr)
	f.i("MUL R23, %s, %s", gLda, gA6)
	f.i("MUL R23, %s, %s", gLdc, gC6)
}

// gemmRows emits the loop over the full tiles of mr rows of a column
// block.
func gemmRows(f *file, kind gemmKind, accumulate bool, mr int) {
	if kind == kindBF16MMLA {
		f.i("MOVD %s, %s", gABuf, gARow) // A packed (mmlaPackA); gA6 is its tile's size
	} else {
		f.ld(gARow, "a", "base")
	}
	f.i("MOVD %s, %s", gC, gCRow)
	f.ld(gM, "m", "")
	f.label("rows")
	f.i("CMP $%d, %s", mr, gM)
	f.i("BLT rowsTail")
	gemmTile(f, kind, accumulate, mr)
	if kind == kindAtB {
		f.i("ADD $%d, %s", 4*mr, gARow)
	} else {
		f.i("ADD %s, %s", gA6, gARow)
	}
	f.i("ADD %s, %s", gC6, gCRow)
	f.i("SUB $%d, %s", mr, gM)
	f.i("B rows")
}

// gemmRowTail emits the tiles of the 1..mr-1 rows left, one of which runs.
func gemmRowTail(f *file, kind gemmKind, accumulate bool, mr int) {
	f.label("rowsTail")
	for r := mr - 1; r >= 1; r-- {
		f.i("CMP $%d, %s", r, gM)
		f.i("BEQ tile%d", r)
	}
	f.i("B colNext")
	for r := mr - 1; r >= 1; r-- {
		f.label(fmt.Sprintf("tile%d", r))
		gemmTile(f, kind, accumulate, r)
		f.i("B colNext")
	}
}

// atRows gives, for the Aᵀ·B tile of r rows, the register and lane of
// row i's A value and the loads that fill them (widths 4, 2, 1 floats at
// byte offsets 0, 16; or 0, 8).
func atRows(r int) (reg func(i int) (V, int), loads []struct{ width, off int }) {
	switch {
	case r >= 4:
		loads = append(loads, struct{ width, off int }{4, 0})
		if r > 4 {
			loads = append(loads, struct{ width, off int }{r - 4, 16})
		}
	case r >= 2:
		loads = append(loads, struct{ width, off int }{2, 0})
		if r > 2 {
			loads = append(loads, struct{ width, off int }{1, 8})
		}
	default:
		loads = append(loads, struct{ width, off int }{1, 0})
	}
	first := loads[0].width
	return func(i int) (V, int) {
		if i < first {
			return 2, i
		}
		return 3, i - first
	}, loads
}

// gemmTile emits the microkernel for r rows at gCRow, A at gARow, B at gB.
func gemmTile(f *file, kind gemmKind, accumulate bool, r int) {
	if kind == kindBF16MMLA {
		mmlaTile(f, accumulate, r)
		return
	}
	tag := fmt.Sprintf("r%d", r)
	f.comment("Tile: %d rows × 16 columns, %d accumulators.", r, 4*r)
	// Every product sums from zero; accumulating ones add the tile's sum
	// to C once, at the store (see Impl.MulAddAB).
	for i := 0; i < r; i++ {
		for v := 0; v < 4; v++ {
			f.w(movi0(accReg(i, v)))
		}
	}
	if kind.stripBuf() {
		f.i("MOVD %s, %s", gBuf, gBp)
	} else {
		f.i("MOVD %s, %s", gB, gBp)
	}
	f.i("MOVD %s, %s", gK, gPc)
	if kind == kindAtB {
		gemmTileAtB(f, r, tag)
	} else {
		gemmTileAB(f, kind, r, tag)
	}
	f.label(tag + "store")
	f.i("MOVD %s, %s", gCRow, gCp)
	for i := 0; i < r; i++ {
		if accumulate { // C in v0-v3, free after the k loop
			f.i("FLDPQ (%s), (F0, F1)", gCp)
			f.i("FLDPQ 32(%s), (F2, F3)", gCp)
			for v := 0; v < 4; v++ {
				f.w(fadd(accReg(i, v), accReg(i, v), V(v)))
			}
		}
		f.i("FSTPQ (F%d, F%d), (%s)", accReg(i, 0), accReg(i, 1), gCp)
		f.i("FSTPQ (F%d, F%d), 32(%s)", accReg(i, 2), accReg(i, 3), gCp)
		if i < r-1 {
			f.i("ADD %s, %s", gLdc, gCp)
		}
	}
}

// gemmTileAB is the k loop of A·Bᵀ and A·B (and the 16-bit kinds): four
// k at a time, then one at a time.
func gemmTileAB(f *file, kind gemmKind, r int, tag string) {
	f.i("MOVD %s, %s", gARow, aRowReg(0))
	for i := 1; i < r; i++ {
		f.i("ADD %s, %s, %s", gLda, aRowReg(i-1), aRowReg(i))
	}
	if kind == kindAB {
		f.i("ADD $32, %s, %s", gBp, gBp2)
	}
	f.i("CMP $4, %s", gPc)
	f.i("BLT %stail", tag)
	f.label(tag + "loop4")
	for i := 0; i < r; i++ {
		f.i("FMOVQ.P 16(%s), F%d", aRowReg(i), kind.aReg(i))
	}
	for l := 0; l < 4; l++ {
		gemmBRow(f, kind, r, l, 64*l)
	}
	if kind.packed() {
		f.i("ADD $256, %s", gBp)
	}
	f.i("SUB $4, %s", gPc)
	f.i("CMP $4, %s", gPc)
	f.i("BGE %sloop4", tag)
	f.label(tag + "tail")
	f.i("CBZ %s, %sstore", gPc, tag)
	f.label(tag + "loop1")
	for i := 0; i < r; i++ {
		f.i("FMOVS.P 4(%s), F%d", aRowReg(i), kind.aReg(i))
	}
	gemmBRow(f, kind, r, 0, 0)
	if kind.packed() {
		f.i("ADD $64, %s", gBp)
	}
	f.i("SUBS $1, %s, %s", gPc, gPc)
	f.i("BNE %sloop1", tag)
}

// gemmBRow emits the products of one k step (lane l of the A registers)
// for r rows, loading B's row in two halves of 8 columns (at byte offset
// off of gBp for the packed kinds; through gBp, gBp2 for A·B, advancing
// them by ldb).
func gemmBRow(f *file, kind gemmKind, r, l, off int) {
	for half := 0; half < 2; half++ {
		if kind == kindAB {
			p := gBp
			if half == 1 {
				p = gBp2
			}
			f.i("VLD1.P (%s)(%s), [V0.S4, V1.S4]", p, gLdb)
		} else if kind == kindF16 { // even k in v2, odd in v1 (f16UzpStore)
			f.i("FLDPQ %d(%s), (F2, F1)", off+32*half, gBp)
		} else {
			f.i("FLDPQ %d(%s), (F0, F1)", off+32*half, gBp)
		}
		switch kind {
		case kindF16:
			gemmF16Half(f, r, l, half)
		case kindBF16:
			for i := 0; i < r; i++ {
				f.w(bfdotE(accReg(i, 2*half), 0, kind.aReg(i), l))
				f.w(bfdotE(accReg(i, 2*half+1), 1, kind.aReg(i), l))
			}
		default:
			for i := 0; i < r; i++ {
				f.w(fmlaE(accReg(i, 2*half), 0, kind.aReg(i), l))
				f.w(fmlaE(accReg(i, 2*half+1), 1, kind.aReg(i), l))
			}
		}
	}
}

// gemmF16Half emits the fp16 products of one pair step (pair l of the A
// registers) with half (8 columns) of B's pair row, its even (k = 2q)
// values in v2 and odd (k = 2q+1) ones in v1, as the strip's repacking
// left them in buf. Odd then even, as the generic fp16 twin adds them.
func gemmF16Half(f *file, r, l, half int) {
	for _, src := range []V{1, 2} {
		idx := 2*l + 1
		if src == 2 {
			idx = 2 * l
		}
		for i := 0; i < r; i++ {
			f.w(fmlalE(accReg(i, 2*half), src, kindF16.aReg(i), idx))
			f.w(fmlal2E(accReg(i, 2*half+1), src, kindF16.aReg(i), idx))
		}
	}
}

// gemmTileAtB is the k loop of Aᵀ·B.
func gemmTileAtB(f *file, r int, tag string) {
	ap := aRowReg(0)
	f.i("MOVD %s, %s", gARow, ap)
	reg, loads := atRows(r)
	f.label(tag + "loop")
	for j := len(loads) - 1; j >= 0; j-- { // the post-incremented load last
		ld := loads[j]
		dst := 2 + j
		switch {
		case j == 0 && ld.width == 4:
			f.i("VLD1.P (%s)(%s), [V%d.S4]", ap, gLda, dst)
		case ld.width == 4:
			f.i("FMOVQ %d(%s), F%d", ld.off, ap, dst)
		case ld.width == 2:
			f.i("FMOVD %d(%s), F%d", ld.off, ap, dst)
		default:
			f.i("FMOVS %d(%s), F%d", ld.off, ap, dst)
		}
	}
	if loads[0].width != 4 {
		f.i("ADD %s, %s", gLda, ap)
	}
	f.i("VLD1.P (%s)(%s), [V4.S4, V5.S4, V6.S4, V7.S4]", gBp, gLdb)
	bv := []V{4, 5, 6, 7}
	for v := 0; v < 4; v++ {
		for i := 0; i < r; i++ {
			a, l := reg(i)
			f.w(fmlaE(accReg(i, v), bv[v], a, l))
		}
	}
	f.i("SUBS $1, %s, %s", gPc, gPc)
	f.i("BNE %sloop", tag)
}
