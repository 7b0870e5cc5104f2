package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Packers into the VNNI pair layout of the half-precision products (see
// vnni.go in package kernel): B[p, j] goes to word
//
//	(j/16)·ldb + (p/2)·32 + (j%16)·2 + p%2
//
// of dst, where dst starts at the first pair row to write (the Go wrapper
// adds p0·16). A pair (B[2q, j], B[2q+1, j]) is one dword, so
//
//   - from the rows of Bᵀ (K: n keys × k, "T" kernels) a strip of 16 keys
//     is the dword transpose of 16 rows of k/2 pairs each;
//   - from the rows of B (V: k rows × n, "N" kernels) pair row q of a strip
//     interleaves the words of rows 2q and 2q+1: VPERMT2W (AVX-512) or
//     VPUNPCKLWD/HWD + VPERM2I128 (AVX2), or for float32 sources rounded to
//     bfloat16 in dwords, r(2q) | r(2q+1) << 16.
//
// Sources are 16-bit (copied), or float32 rounded as the converters of
// convert.go do (bfloat16 by integer rounding, fp16 by VCVTPS2PH), bit for
// bit equal to the scalar packer.
//
// The AVX-512 kernels (F and BW) do whole matrices: masked loads (which do
// not fault on masked-off elements) zero the columns beyond k or n and the
// pad row of an odd k, rows beyond the last key of a strip are zeroed, and
// only whole pair rows of the output are stored. The AVX2 kernels do the
// full blocks (16 keys × 16 elements, or pairs of rows × 16 columns) and
// leave the edges to Go.

// srcKind is the element type of a packer's source.
type srcKind int

const (
	src16   srcKind = iota // 16-bit, copied
	srcBF16                // float32 rounded to bfloat16
	srcF16                 // float32 rounded to fp16
)

func (k srcKind) suffix() string { return [...]string{"16", "BF16", "F16"}[k] }

func (k srcKind) goType() string {
	if k == src16 {
		return "[]uint16"
	}
	return "[]float32"
}

// bytes is the size of one source element.
func (k srcKind) bytes() int {
	if k == src16 {
		return 2
	}
	return 4
}

// packTab (packtab): masks, VPERMT2W indexes and zeros; package kernel's
// tests rebuild it from these definitions and compare.
var packTab Mem

// Offsets in packtab.
const (
	ptMasks   = 0   // 33 dwords: 2^i − 1 for i = 0 … 32
	ptLo      = 192 // VPERMT2W indexes: words 0-15 of table 1 interleaved with words 0-15 of table 2
	ptHi      = 256 // … words 16-31 of both
	ptCompact = 320 // the even words of table 1, then those of table 2
	ptZero    = 384 // 64 zero bytes
)

func genPackTable() {
	packTab = GLOBL("packtab", RODATA|NOPTR)
	for i := 0; i <= 32; i++ {
		DATA(ptMasks+4*i, U32(uint32(uint64(1)<<i-1)))
	}
	// (The assembler wants DATA in increasing offsets.)
	for w := 0; w < 32; w++ {
		DATA(ptLo+2*w, U16(w/2+32*(w%2)))
	}
	for w := 0; w < 32; w++ {
		DATA(ptHi+2*w, U16(16+w/2+32*(w%2)))
	}
	for w := 0; w < 32; w++ {
		DATA(ptCompact+2*w, U16(2*(w%16)+32*(w/16)))
	}
	for i := 0; i < 64; i += 8 {
		DATA(ptZero+i, U64(0))
	}
}

// genPackT512 generates packT<kind>AVX512: the strips of the packed Bᵀ from
// the n×k row-major src (n keys of k elements, leading dimension ld).
func genPackT512(sk srcKind) {
	name := "packT" + sk.suffix() + "AVX512"
	TEXT(name, NOSPLIT, "func(dst []uint16, ldb int, src "+sk.goType()+", ld, n, k int)")
	Pragma("noescape")
	Doc(name+" packs the n×k matrix src (rows of Bᵀ) into the pair layout at dst",
		"with strip stride ldb: Pad(n)/16 strips of (k+k%2)/2 pair rows. AVX512F and BW;",
		"the caller guarantees that all accesses are in bounds.")
	s := isaAVX512
	eb := sk.bytes()
	var c func(int) Op
	var perm VecVirtual
	if sk == srcBF16 {
		c = halfConsts(s, hcBias, hcOne, hcQuiet, hcAbs, hcInf)
		perm = ZMM()
		VMOVDQU64(packTab.Offset(ptCompact), perm)
	}
	ld := loadStride("ld", eb)
	dStrip := Load(Param("dst").Base(), GP64())
	sStrip := Load(Param("src").Base(), GP64())
	nLeft := Load(Param("n"), GP64())

	Label("strips")
	TESTQ(nLeft, nLeft)
	JLE(LabelRef("done"))
	rows := minConst(nLeft, 16)
	sp, dp := GP64(), GP64()
	MOVQ(sStrip, sp)
	MOVQ(dStrip, dp)
	kLeft := Load(Param("k"), GP64())

	Label("blocks")
	TESTQ(kLeft, kLeft)
	JLE(LabelRef("stripDone"))
	cnt := minConst(kLeft, 32) // elements of this block of 32
	m, _ := lowMask(cnt)
	var mHi OpmaskVirtual
	if sk != src16 {
		mHi = K()
		KSHIFTRD(Imm(16), m, mHi)
	}
	r := make([]VecVirtual, 16)
	for i := range r {
		r[i] = ZMM()
	}
	rp := GP64()
	MOVQ(sp, rp)
	loadRowsOrZero(r, rows, rp, ld, func(i int, dst VecVirtual) {
		if sk == src16 {
			VMOVDQU16_Z(Mem{Base: rp}, m, dst)
			return
		}
		x0, x1 := ZMM(), ZMM()
		VMOVUPS_Z(Mem{Base: rp}, m, x0)
		VMOVUPS_Z(Mem{Base: rp, Disp: 64}, mHi, x1)
		if sk == srcF16 {
			y0, y1 := YMM(), YMM()
			VCVTPS2PH(Imm(0), x0, y0)
			VCVTPS2PH(Imm(0), x1, y1)
			VINSERTI64X4(Imm(1), y1, y0.AsZ(), dst)
			return
		}
		a := rneBF16(s, x0, c)
		b := rneBF16(s, x1, c)
		VMOVDQA64(a, dst)
		VPERMT2W(b, perm, dst)
	})
	o := transposeDwords(s, r)
	qn := GP64() // pair rows of this block: (cnt+1)/2
	LEAQ(Mem{Base: cnt, Disp: 1}, qn)
	SHRQ(Imm(1), qn)
	for q := range o {
		if q > 0 {
			CMPQ(qn, U32(q))
			JLE(LabelRef("stored"))
		}
		VMOVDQU64(o[q], Mem{Base: dp, Disp: 64 * q})
	}
	Label("stored")
	ADDQ(U32(32*eb), sp)
	ADDQ(U32(16*64), dp)
	SUBQ(U32(32), kLeft)
	JMP(LabelRef("blocks"))

	Label("stripDone")
	nextStrip(ld, sStrip, dStrip)
	SUBQ(U32(16), nLeft)
	JMP(LabelRef("strips"))

	Label("done")
	VZEROUPPER()
	RET()
}

// genPackN512 generates packN<kind>AVX512: the packed B from the k×n
// row-major src (leading dimension ld), one pair of source rows at a time.
func genPackN512(sk srcKind) {
	name := "packN" + sk.suffix() + "AVX512"
	TEXT(name, NOSPLIT, "func(dst []uint16, ldb int, src "+sk.goType()+", ld, k, n int)")
	Pragma("noescape")
	Doc(name+" packs the k×n matrix src (rows of B) into the pair layout at dst",
		"with strip stride ldb: Pad(n)/16 strips of (k+k%2)/2 pair rows. AVX512F and BW;",
		"the caller guarantees that all accesses are in bounds.")
	s := isaAVX512
	eb := sk.bytes()
	var c func(int) Op
	var lo, hi VecVirtual
	switch sk {
	case srcBF16:
		c = halfConsts(s, hcBias, hcOne, hcQuiet, hcAbs, hcInf)
	default:
		lo = ZMM()
		VMOVDQU64(packTab.Offset(ptLo), lo)
		if sk == src16 {
			hi = ZMM()
			VMOVDQU64(packTab.Offset(ptHi), hi)
		}
	}
	ld := loadStride("ld", eb)
	ldb := loadStride("ldb", 2)
	r0 := Load(Param("src").Base(), GP64()) // row 2q
	r1 := GP64()                            // row 2q+1
	LEAQ(Mem{Base: r0, Index: ld, Scale: 1}, r1)
	dq := Load(Param("dst").Base(), GP64()) // pair row q of strip 0
	kLeft := Load(Param("k"), GP64())

	Label("pairs")
	TESTQ(kLeft, kLeft)
	JLE(LabelRef("done"))
	// Row 2q+1 is read only if it exists: its loads are masked with
	// second = all ones if kLeft ≥ 2, else 0.
	second, ones := GP32(), GP32()
	XORL(second, second)
	MOVL(U32(0xffffffff), ones)
	CMPQ(kLeft, U32(2))
	CMOVLGE(ones, second)
	cp, dp := GP64(), GP64()
	XORQ(cp, cp)
	MOVQ(dq, dp)
	nLeft := Load(Param("n"), GP64())

	width := 16 // columns per iteration: one strip, or two for 16-bit sources
	if sk == src16 {
		width = 32
	}
	Label("cols")
	TESTQ(nLeft, nLeft)
	JLE(LabelRef("pairDone"))
	cnt := minConst(nLeft, width)
	ka, t := lowMask(cnt)
	ANDL(second, t)
	kb := K()
	KMOVD(t, kb)
	m0 := Mem{Base: r0, Index: cp, Scale: 1}
	m1 := Mem{Base: r1, Index: cp, Scale: 1}
	switch sk {
	case src16:
		a, b, o := ZMM(), ZMM(), ZMM()
		VMOVDQU16_Z(m0, ka, a)
		VMOVDQU16_Z(m1, kb, b)
		VMOVDQA64(a, o)
		VPERMT2W(b, lo, o)
		VMOVDQU64(o, Mem{Base: dp})
		CMPQ(nLeft, U32(16))
		JLE(LabelRef("pairDone"))
		VPERMT2W(b, hi, a)
		VMOVDQU64(a, Mem{Base: dp, Index: ldb, Scale: 1})
		ADDQ(ldb, dp)
	case srcBF16:
		x0, x1 := ZMM(), ZMM()
		VMOVUPS_Z(m0, ka, x0)
		VMOVUPS_Z(m1, kb, x1)
		a := rneBF16(s, x0, c)
		b := rneBF16(s, x1, c)
		VPSLLD(Imm(16), b, b)
		VPORD(b, a, a)
		VMOVDQU64(a, Mem{Base: dp})
	case srcF16:
		x0, x1 := ZMM(), ZMM()
		VMOVUPS_Z(m0, ka, x0)
		VMOVUPS_Z(m1, kb, x1)
		y0, y1 := YMM(), YMM()
		VCVTPS2PH(Imm(0), x0, y0)
		VCVTPS2PH(Imm(0), x1, y1)
		VPERMT2W(y1.AsZ(), lo, y0.AsZ())
		VMOVDQU64(y0.AsZ(), Mem{Base: dp})
	}
	ADDQ(ldb, dp)
	ADDQ(U32(width*eb), cp)
	SUBQ(U32(width), nLeft)
	JMP(LabelRef("cols"))

	Label("pairDone")
	nextPairRow(ld, r0, r1, dq)
	SUBQ(U32(2), kLeft)
	JMP(LabelRef("pairs"))

	Label("done")
	VZEROUPPER()
	RET()
}

// genPackT2 generates packT<kind>AVX2: strips full strips of 16 keys, k
// (a multiple of 16) elements each, in blocks of 8 keys × 8 pairs (an 8×8
// dword transpose); the rest is left to Go.
func genPackT2(sk srcKind) {
	name := "packT" + sk.suffix() + "AVX2"
	TEXT(name, NOSPLIT, "func(dst []uint16, ldb int, src "+sk.goType()+", ld, strips, k int)")
	Pragma("noescape")
	Doc(name+" packs strips×16 rows of k elements of src (rows of Bᵀ) into the pair",
		"layout at dst with strip stride ldb. k is a multiple of 16. AVX2 (and F16C for",
		"fp16); the caller guarantees that all accesses are in bounds.")
	s := isaAVX2
	eb := sk.bytes()
	ld := loadStride("ld", eb)
	dStrip := Load(Param("dst").Base(), GP64())
	sStrip := Load(Param("src").Base(), GP64())
	sLeft := Load(Param("strips"), GP64())

	Label("strips")
	TESTQ(sLeft, sLeft)
	JLE(LabelRef("done"))
	sp, dp := GP64(), GP64()
	MOVQ(sStrip, sp)
	MOVQ(dStrip, dp)
	kLeft := Load(Param("k"), GP64())

	Label("blocks")
	CMPQ(kLeft, U32(16))
	JL(LabelRef("stripDone"))
	rp := GP64()
	MOVQ(sp, rp)
	for h := 0; h < 2; h++ { // keys 8h … 8h+7
		r := make([]VecVirtual, 8)
		for i := range r {
			r[i] = YMM()
			if i > 0 || h > 0 {
				ADDQ(ld, rp)
			}
			switch sk {
			case src16:
				VMOVDQU(Mem{Base: rp}, r[i])
			case srcBF16:
				x0, x1 := YMM(), YMM()
				VMOVUPS(Mem{Base: rp}, x0)
				VMOVUPS(Mem{Base: rp, Disp: 32}, x1)
				a := rneBF16(s, x0, halfConstMem)
				b := rneBF16(s, x1, halfConstMem)
				VPACKUSDW(b, a, a) // in-lane: a0-3 b0-3 | a4-7 b4-7
				VPERMQ(Imm(0xd8), a, r[i])
			case srcF16:
				x0, x1 := YMM(), YMM()
				VMOVUPS(Mem{Base: rp}, x0)
				VMOVUPS(Mem{Base: rp, Disp: 32}, x1)
				h0, h1 := XMM(), XMM()
				VCVTPS2PH(Imm(0), x0, h0)
				VCVTPS2PH(Imm(0), x1, h1)
				VINSERTI128(Imm(1), h1, h0.AsY(), r[i])
			}
		}
		o := transposeDwords(s, r)
		for q := range o {
			VMOVDQU(o[q], Mem{Base: dp, Disp: 64*q + 32*h})
		}
	}
	ADDQ(U32(16*eb), sp)
	ADDQ(U32(8*64), dp)
	SUBQ(U32(16), kLeft)
	JMP(LabelRef("blocks"))

	Label("stripDone")
	nextStrip(ld, sStrip, dStrip)
	DECQ(sLeft)
	JMP(LabelRef("strips"))

	Label("done")
	VZEROUPPER()
	RET()
}

// genPackN2 generates packN<kind>AVX2: pairs full pair rows of strips
// full strips; the odd last row and the column tail are left to Go.
func genPackN2(sk srcKind) {
	name := "packN" + sk.suffix() + "AVX2"
	TEXT(name, NOSPLIT, "func(dst []uint16, ldb int, src "+sk.goType()+", ld, pairs, strips int)")
	Pragma("noescape")
	Doc(name+" packs rows 0 … 2·pairs−1, columns 0 … 16·strips−1 of src (rows of B)",
		"into the pair layout at dst with strip stride ldb. AVX2 (and F16C for fp16);",
		"the caller guarantees that all accesses are in bounds.")
	s := isaAVX2
	eb := sk.bytes()
	var c func(int) Op
	if sk == srcBF16 {
		c = halfConsts(s, hcBias, hcOne, hcQuiet, hcAbs, hcInf)
	}
	ld := loadStride("ld", eb)
	ldb := loadStride("ldb", 2)
	r0 := Load(Param("src").Base(), GP64())
	r1 := GP64()
	LEAQ(Mem{Base: r0, Index: ld, Scale: 1}, r1)
	dq := Load(Param("dst").Base(), GP64())
	pLeft := Load(Param("pairs"), GP64())

	Label("pairs")
	TESTQ(pLeft, pLeft)
	JLE(LabelRef("done"))
	cp, dp := GP64(), GP64()
	XORQ(cp, cp)
	MOVQ(dq, dp)
	sLeft := Load(Param("strips"), GP64())

	Label("cols")
	TESTQ(sLeft, sLeft)
	JLE(LabelRef("pairDone"))
	at := func(base Register, disp int) Mem { return Mem{Base: base, Index: cp, Scale: 1, Disp: disp} }
	switch sk {
	case src16:
		a, b, lo, hi := YMM(), YMM(), YMM(), YMM()
		VMOVDQU(at(r0, 0), a)
		VMOVDQU(at(r1, 0), b)
		VPUNPCKLWD(b, a, lo) // columns 0-3 | 8-11
		VPUNPCKHWD(b, a, hi) // columns 4-7 | 12-15
		o0, o1 := YMM(), YMM()
		VPERM2I128(Imm(0x20), hi, lo, o0)
		VPERM2I128(Imm(0x31), hi, lo, o1)
		VMOVDQU(o0, Mem{Base: dp})
		VMOVDQU(o1, Mem{Base: dp, Disp: 32})
	case srcBF16:
		for h := 0; h < 2; h++ { // columns 8h … 8h+7
			x0, x1 := YMM(), YMM()
			VMOVUPS(at(r0, 32*h), x0)
			VMOVUPS(at(r1, 32*h), x1)
			a := rneBF16(s, x0, c)
			b := rneBF16(s, x1, c)
			VPSLLD(Imm(16), b, b)
			VPOR(b, a, a)
			VMOVDQU(a, Mem{Base: dp, Disp: 32 * h})
		}
	case srcF16:
		for h := 0; h < 2; h++ {
			x0, x1 := YMM(), YMM()
			VMOVUPS(at(r0, 32*h), x0)
			VMOVUPS(at(r1, 32*h), x1)
			a, b, lo, hi := XMM(), XMM(), XMM(), XMM()
			VCVTPS2PH(Imm(0), x0, a)
			VCVTPS2PH(Imm(0), x1, b)
			VPUNPCKLWD(b, a, lo)
			VPUNPCKHWD(b, a, hi)
			VMOVDQU(lo, Mem{Base: dp, Disp: 32 * h})
			VMOVDQU(hi, Mem{Base: dp, Disp: 32*h + 16})
		}
	}
	ADDQ(ldb, dp)
	ADDQ(U32(16*eb), cp)
	DECQ(sLeft)
	JMP(LabelRef("cols"))

	Label("pairDone")
	nextPairRow(ld, r0, r1, dq)
	DECQ(pLeft)
	JMP(LabelRef("pairs"))

	Label("done")
	VZEROUPPER()
	RET()
}

// nextStrip moves the T packers on to the next strip: the source by 16
// rows of ld bytes, the destination by the strip stride (ldb words).
func nextStrip(ld, sStrip, dStrip Register) {
	t := GP64()
	MOVQ(ld, t)
	SHLQ(Imm(4), t)
	ADDQ(t, sStrip)
	ADDQ(loadStride("ldb", 2), dStrip)
}

// loadStride loads the stride argument name, counted in elements of size
// bytes, into a new register in bytes.
func loadStride(name string, size int) Register {
	r := Load(Param(name), GP64())
	if size > 1 {
		SHLQ(Imm(uint64(log2(size))), r)
	}
	return r
}

// nextPairRow moves the N packers on to the next pair row: the source rows
// r0 and r1 by two rows of ld bytes, the destination dq by 64 bytes.
func nextPairRow(ld, r0, r1, dq Register) {
	ADDQ(ld, r0)
	ADDQ(ld, r0)
	ADDQ(ld, r1)
	ADDQ(ld, r1)
	ADDQ(U32(64), dq)
}

func genPack() {
	genPackTable()
	for _, sk := range []srcKind{src16, srcBF16, srcF16} {
		genPackT512(sk)
		genPackN512(sk)
		genPackT2(sk)
		genPackN2(sk)
	}
	for _, f16 := range []bool{false, true} {
		genTransposeRound(f16)
	}
}
