package main

import "fmt"

// The packers into the VNNI pair layout of Half and TransposeRound (see
// kernel.PackVNNIInto, Impl.TransposeRound), for full blocks; the Go side
// (pack_arm64.go) packs the edges with the reference code, so the results
// are bit for bit the reference's.
//
//	packN<S>NEON(dst, ldb, src, ld, pairs, strips): rows 2q, 2q+1 of B
//	(not transposed) for q < pairs and the strips' 16 columns: both rows
//	converted to 16 bits and interleaved by ZIP1/ZIP2 into one 64-byte
//	pair row.
//	packT<S>NEON(dst, ldb, src, ld, strips, k8): B given as the rows of Bᵀ
//	(keys): for each strip and block of 8 k, four rows of 8 values at a
//	time converted to 16 bits (four 32-bit pairs each) and transposed as
//	4×4 matrices of pairs (TRN1/TRN2 on .4s then .2d) into four pair rows.
//	transposeRound<E>NEON(dst, ldd, src, lds, rows8, cols8): 8×8 blocks,
//	each row rounded to 8 16-bit values and the block transposed by three
//	levels of TRN1/TRN2 (.8h, .4s, .2d).
//
// S is the source: BF16 or F16 (float32 rounded to that type) or 16
// (16-bit values copied).

type packSrc struct {
	name string
	f32  bool // float32 source (else 16-bit)
	bf16 bool // rounded to bfloat16 (else fp16)
}

var packSrcs = []packSrc{{"BF16", true, true}, {"F16", true, false}, {"16", false, false}}

// size returns the bytes of one element of s.
func (s packSrc) size() int {
	if s.f32 {
		return 4
	}
	return 2
}

func (s packSrc) goType() string {
	if s.f32 {
		return "float32"
	}
	return "uint16"
}

// narrow8 sets d to the 8 16-bit values of x0, x1 (float32) rounded as the
// source kind says; t holds 4 scratch registers.
func (f *file) narrow8(s packSrc, r bf16Regs, d, x0, x1 V, t [4]V) {
	if s.bf16 {
		f.narrowBF16(r, d, x0, x1, t[0], t[1], t[2], t[3])
		return
	}
	f.w(fcvtn(d, x0))
	f.w(fcvtn2(d, x1))
}

var packBF16Regs = bf16Regs{k7fff: 31, one: 30, quiet8h: 29}

// loadRow8 loads 8 values of a source row at (p) into 16-bit lanes of d;
// x0, x1 receive the float32 values of a float32 source.
func (f *file) loadRow8(s packSrc, d, x0, x1 V, t [4]V, p string, off int) {
	if !s.f32 {
		f.i("FMOVQ %d(%s), F%d", off, p, d)
		return
	}
	f.i("FLDPQ %d(%s), (F%d, F%d)", off, p, x0, x1)
	f.narrow8(s, packBF16Regs, d, x0, x1, t)
}

// packArgs loads the arguments every packer over s starts with: dst and
// src (bases), ldb (uint16s) and ld (elements of s), the strides in bytes.
func (f *file) packArgs(s packSrc, dst, ldb, src, ld string) {
	f.ld(dst, "dst", "base")
	f.ldStride(ldb, "ldb", 2)
	f.ld(src, "src", "base")
	f.ldStride(ld, "ld", s.size())
}

// ldStride loads the stride argument name, counted in elements of size
// bytes (1, 2 or 4), into register r in bytes.
func (f *file) ldStride(r, name string, size int) {
	f.ld(r, name, "")
	if size > 1 {
		f.i("LSL $%d, %s", map[int]int{2: 1, 4: 2}[size], r)
	}
}

func genPackN(f *file, s packSrc) {
	name := "packN" + s.name + "NEON"
	f.text(name, fmt.Sprintf("func(dst []uint16, ldb int, src []%s, ld, pairs, strips int)", s.goType()),
		name+" packs rows 2q, 2q+1 (q < pairs) and columns 16·strips of B (rows at src,",
		"stride ld) into the pair layout at dst with strip stride ldb; pairs, strips >= 1.")
	const (
		gDst, gLdb, gSrc, gLd, gPairs, gStrips = "R0", "R1", "R2", "R3", "R4", "R5"
		gS, gD, gCnt, gS1                      = "R6", "R7", "R8", "R9"
	)
	f.packArgs(s, gDst, gLdb, gSrc, gLd)
	f.ld(gPairs, "pairs", "")
	if s.f32 {
		f.constBase("R10")
		f.loadBF16Regs(packBF16Regs, "R10")
	}
	f.label("pair")
	f.i("MOVD %s, %s", gSrc, gS)
	f.i("ADD %s, %s, %s", gLd, gSrc, gS1)
	f.i("MOVD %s, %s", gDst, gD)
	f.ld(gCnt, "strips", "")
	f.label("strip")
	t := [4]V{20, 21, 22, 23}
	// Rows 2q and 2q+1, 16 values each, as 8+8 16-bit lanes: v0, v1 and v2, v3.
	for row, p := range []string{gS, gS1} {
		if s.f32 {
			f.i("VLD1.P 64(%s), [V%d.S4, V%d.S4, V%d.S4, V%d.S4]", p, 8+4*row, 9+4*row, 10+4*row, 11+4*row)
			f.narrow8(s, packBF16Regs, V(2*row), V(8+4*row), V(9+4*row), t)
			f.narrow8(s, packBF16Regs, V(2*row+1), V(10+4*row), V(11+4*row), t)
		} else {
			f.i("FLDPQ.P 32(%s), (F%d, F%d)", p, 2*row, 2*row+1)
		}
	}
	f.w(zip1(h8, 4, 0, 2))
	f.w(zip2(h8, 5, 0, 2))
	f.w(zip1(h8, 6, 1, 3))
	f.w(zip2(h8, 7, 1, 3))
	f.i("VST1 [V4.H8, V5.H8, V6.H8, V7.H8], (%s)", gD)
	f.i("ADD %s, %s", gLdb, gD)
	f.i("SUBS $1, %s, %s", gCnt, gCnt)
	f.i("BNE strip")
	f.i("ADD %s<<1, %s, %s", gLd, gSrc, gSrc)
	f.i("ADD $64, %s", gDst)
	f.i("SUBS $1, %s, %s", gPairs, gPairs)
	f.i("BNE pair")
	f.ret()
}

// transpose4x4S transposes the 4×4 matrix of 32-bit words in rows r into
// o (o[q] = word q of every row), using t as scratch.
func (f *file) transpose4x4S(r, o, t [4]V) {
	f.w(trn1(s4, t[0], r[0], r[1]))
	f.w(trn2(s4, t[1], r[0], r[1]))
	f.w(trn1(s4, t[2], r[2], r[3]))
	f.w(trn2(s4, t[3], r[2], r[3]))
	f.w(trn1(d2, o[0], t[0], t[2]))
	f.w(trn2(d2, o[2], t[0], t[2]))
	f.w(trn1(d2, o[1], t[1], t[3]))
	f.w(trn2(d2, o[3], t[1], t[3]))
}

func genPackT(f *file, s packSrc) {
	name := "packT" + s.name + "NEON"
	f.text(name, fmt.Sprintf("func(dst []uint16, ldb int, src []%s, ld, strips, k8 int)", s.goType()),
		name+" packs the first k8 (a positive multiple of 8) values of the 16·strips rows",
		"of Bᵀ at src (stride ld) into the pair layout at dst with strip stride ldb; strips >= 1.")
	const (
		gDst, gLdb, gSrc, gLd, gStrips, gK8 = "R0", "R1", "R2", "R3", "R4", "R5"
		gSB, gDB, gCnt, gRp                 = "R6", "R7", "R8", "R9"
	)
	f.packArgs(s, gDst, gLdb, gSrc, gLd)
	f.ld(gStrips, "strips", "")
	f.ld(gK8, "k8", "")
	if s.f32 {
		f.constBase("R10")
		f.loadBF16Regs(packBF16Regs, "R10")
	}
	f.label("strip")
	f.i("MOVD %s, %s", gSrc, gSB)
	f.i("MOVD %s, %s", gDst, gDB)
	f.i("LSR $3, %s, %s", gK8, gCnt)
	f.label("block")
	f.i("MOVD %s, %s", gSB, gRp)
	t := [4]V{20, 21, 22, 23}
	for g := 0; g < 4; g++ {
		var rows [4]V
		for i := 0; i < 4; i++ {
			rows[i] = V(i)
			f.loadRow8(s, rows[i], V(8+2*i), V(9+2*i), t, gRp, 0)
			f.i("ADD %s, %s", gLd, gRp)
		}
		o := [4]V{4, 5, 6, 7}
		f.transpose4x4S(rows, o, [4]V{16, 17, 18, 19})
		for q := 0; q < 4; q++ {
			f.i("FMOVQ F%d, %d(%s)", o[q], 64*q+16*g, gDB)
		}
	}
	f.i("ADD $%d, %s", 8*s.size(), gSB)
	f.i("ADD $256, %s", gDB)
	f.i("SUBS $1, %s, %s", gCnt, gCnt)
	f.i("BNE block")
	f.i("ADD %s<<4, %s, %s", gLd, gSrc, gSrc)
	f.i("ADD %s, %s", gLdb, gDst)
	f.i("SUBS $1, %s, %s", gStrips, gStrips)
	f.i("BNE strip")
	f.ret()
}

// General-purpose registers of transposeRound<E>NEON.
const (
	trDst  = "R0"  // dst at the current row band's columns
	trLdd  = "R1"  // ldd in bytes
	trSrc  = "R2"  // src at the current row band
	trLds  = "R3"  // lds in bytes
	trRows = "R4"  // rows left
	trCols = "R5"  // cols8
	trSB   = "R6"  // src at the current block
	trDB   = "R7"  // dst at the current block
	trCnt  = "R8"  // columns left in the band
	trRp   = "R9"  // src's row at the loads
	trDp   = "R11" // dst's row at the stores
)

// genTransposeRound emits transposeRound<E>NEON: for each band of 8 rows
// of src, its 8×8 blocks rounded, transposed and stored.
func genTransposeRound(f *file, s packSrc) {
	transposeRoundEntry(f, s)
	// Rows i0..i0+7 of src (row band), then column blocks along it.
	f.label("band")
	f.i("MOVD %s, %s", trSrc, trSB)
	f.i("MOVD %s, %s", trDst, trDB)
	f.i("MOVD %s, %s", trCols, trCnt)
	f.label("block")
	rows := transposeRoundLoad(f, s)
	transposeRoundStore(f, f.transpose8x8H(rows))
	f.i("ADD $32, %s", trSB)
	f.i("ADD %s<<3, %s, %s", trLdd, trDB, trDB)
	f.i("SUBS $8, %s, %s", trCnt, trCnt)
	f.i("BNE block")
	f.i("ADD %s<<3, %s, %s", trLds, trSrc, trSrc)
	f.i("ADD $16, %s", trDst)
	f.i("SUBS $8, %s, %s", trRows, trRows)
	f.i("BNE band")
	f.ret()
}

// transposeRoundEntry starts the kernel: its signature and doc, the
// arguments in their registers (strides in bytes) and for bfloat16 the
// rounding's constants.
func transposeRoundEntry(f *file, s packSrc) {
	name := "transposeRound" + s.name + "NEON"
	f.text(name, "func(dst []uint16, ldd int, src []float32, lds, rows8, cols8 int)",
		name+" sets dst[j*ldd+i] to src[i*lds+j] rounded to "+map[bool]string{true: "bfloat16", false: "fp16"}[s.bf16]+" for",
		"i < rows8, j < cols8 (positive multiples of 8).")
	f.ld(trDst, "dst", "base")
	f.ldStride(trLdd, "ldd", 2)
	f.ld(trSrc, "src", "base")
	f.ldStride(trLds, "lds", 4)
	f.ld(trRows, "rows8", "")
	f.ld(trCols, "cols8", "")
	if s.bf16 {
		f.constBase("R10")
		f.loadBF16Regs(packBF16Regs, "R10")
	}
}

// transposeRoundLoad loads the block's 8 rows at trSB, each rounded to 8
// 16-bit values, into v0-v7 and returns them.
func transposeRoundLoad(f *file, s packSrc) [8]V {
	f.i("MOVD %s, %s", trSB, trRp)
	t := [4]V{20, 21, 22, 23}
	var r [8]V
	for i := 0; i < 8; i++ {
		r[i] = V(i)
		f.loadRow8(s, r[i], V(8+2*(i%4)), V(9+2*(i%4)), t, trRp, 0)
		if i < 7 {
			f.i("ADD %s, %s", trLds, trRp)
		}
	}
	return r
}

// transpose8x8H transposes the 8×8 matrix of 16-bit lanes in rows r by
// three levels of TRN1/TRN2 (.8h in v8-v15, .4s in v16-v23, .2d into
// v0-v7) and returns the registers of its columns.
func (f *file) transpose8x8H(r [8]V) (out [8]V) {
	var a [8]V
	for i := 0; i < 8; i += 2 {
		a[i], a[i+1] = V(8+i), V(9+i)
		f.w(trn1(h8, a[i], r[i], r[i+1]))
		f.w(trn2(h8, a[i+1], r[i], r[i+1]))
	}
	// c[0]: cols 0|4 rows 0-3, c[1]: 2|6, c[2]: 1|5, c[3]: 3|7; c[4..7]
	// the same for rows 4-7.
	var c [8]V
	for h := 0; h < 2; h++ {
		b := 4 * h
		c[b], c[b+1], c[b+2], c[b+3] = V(16+b), V(17+b), V(18+b), V(19+b)
		f.w(trn1(s4, c[b], a[b], a[b+2]))
		f.w(trn2(s4, c[b+1], a[b], a[b+2]))
		f.w(trn1(s4, c[b+2], a[b+1], a[b+3]))
		f.w(trn2(s4, c[b+3], a[b+1], a[b+3]))
	}
	cols := [4][2]int{{0, 4}, {2, 6}, {1, 5}, {3, 7}}
	for x := 0; x < 4; x++ {
		lo, hi := V(x), V(4+x)
		f.w(trn1(d2, lo, c[x], c[4+x]))
		f.w(trn2(d2, hi, c[x], c[4+x]))
		out[cols[x][0]], out[cols[x][1]] = lo, hi
	}
	return out
}

// transposeRoundStore stores the block's columns as dst's 8 rows at trDB.
func transposeRoundStore(f *file, out [8]V) {
	f.i("MOVD %s, %s", trDB, trDp)
	for j := 0; j < 8; j++ {
		f.i("FMOVQ F%d, (%s)", out[j], trDp)
		if j < 7 {
			f.i("ADD %s, %s", trLdd, trDp)
		}
	}
}

func genPack(f *file) {
	for _, s := range packSrcs {
		genPackN(f, s)
		genPackT(f, s)
		if s.f32 {
			genTransposeRound(f, s)
		}
	}
}
