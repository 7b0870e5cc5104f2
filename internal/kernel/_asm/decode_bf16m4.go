package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The native bfloat16 scores for 4 query rows (grouped-query attention
// with 4 query heads per KV head):
//
//	scoresBF16M4AVX512BF16  S[r][j] = Σ_p Q[r][p]·K[j][p]    r < 4, j < n
//
// With 4 rows the rows alone fill half a ymm, so each lane holds a row and
// one of two consecutive pairs: lane 2r+e of packed Q vector t is the pair
// Q[r][4t+2e:4t+2e+2], and VPBROADCASTQ of the 4 values K[j][4t:4t+4]
// (one load, no shuffle) puts the matching pair of key j in every lane:
// one VDPBF16PS, 16 products, per 8 bytes of a key, and per key no
// widening, as with 8 rows. Keys go 8 at a time with two accumulators each
// (even and odd t, 16 independent chains); lane 2r+e of key j's sum is
// half of S[r][j], and VHADDPS of two keys' sums gives [S0j S1j S0j' S1j' |
// S2j S3j S2j' S3j'], which VSHUFPS and VPERM2F128 put in the order of S's
// rows. Keys beyond a multiple of 8 go one at a time.

// natQ4Bytes is the frame size of the packed Q of 4 rows: natMaxD/4
// vectors of 32 bytes.
const natQ4Bytes = natMaxD / 4 * 32

func genScoresNat4() {
	const rows = 4
	name := "scoresBF16M4AVX512BF16"
	// Not NOSPLIT: the frame holds the packed Q (up to 2 KiB).
	TEXT(name, 0, "func(s []float32, lds int, q []float32, k []uint16, ldk, n, d int)")
	Pragma("noescape")
	Doc(name+" sets s[r*lds+j] = Σ_p bf16(q[r*d+p])·k[j*ldk+p] for r < 4, j < n, with",
		"VDPBF16PS (q rounded to bfloat16; see decode_bf16m4.go). ldk is the key",
		"row stride in elements; d is a multiple of 32 up to 256, n >= 1, and",
		"all accesses are in bounds.")
	qLoc := AllocLocal(natQ4Bytes)
	sLoc := AllocLocal(32)

	// Pack Q: chunks of 16 values (4 quadwords) of the 4 rows, rounded, and
	// the 4×4 quadwords transposed: vector t = quadword t of rows 0-3.
	{
		ldq := Load(Param("d"), GP64()).(GPVirtual)
		SHLQ(Imm(2), ldq)
		ldq3 := GP64()
		LEAQ(Mem{Base: ldq, Index: ldq, Scale: 2}, ldq3)
		rs := newRowSet(slot(Param("q").Base()), ldq, ldq3, rows)
		dst := GP64()
		LEAQ(qLoc, dst)
		c := Load(Param("d"), GP64())
		SHRQ(Imm(4), c)
		Label("packq")
		for r := 0; r < rows; r++ {
			VMOVUPS(rs.mem(r, 0), zmm(r))
			vcvtneps2bf16(r, r)
		}
		// Y4 = [a0 b0|a2 b2], Y5 = [a1 b1|a3 b3], Y6, Y7 the same of rows 2, 3.
		VPUNPCKLQDQ(ymm(1), ymm(0), ymm(4))
		VPUNPCKHQDQ(ymm(1), ymm(0), ymm(5))
		VPUNPCKLQDQ(ymm(3), ymm(2), ymm(6))
		VPUNPCKHQDQ(ymm(3), ymm(2), ymm(7))
		VPERM2I128(Imm(0x20), ymm(6), ymm(4), ymm(8))
		VPERM2I128(Imm(0x20), ymm(7), ymm(5), ymm(9))
		VPERM2I128(Imm(0x31), ymm(6), ymm(4), ymm(10))
		VPERM2I128(Imm(0x31), ymm(7), ymm(5), ymm(11))
		for t := 0; t < 4; t++ {
			VMOVUPS(ymm(8+t), Mem{Base: dst, Disp: 32 * t})
		}
		rs.add(Imm(64))
		ADDQ(Imm(128), dst)
		DECQ(c)
		JNZ(LabelRef("packq"))
	}

	const keys = 8
	ld, ld3 := strides(slot(Param("ldk")), 2, keys)
	lds := loadStride("lds", 4)
	kp := Load(Param("k").Base(), GP64()).(GPVirtual)
	sp := Load(Param("s").Base(), GP64()).(GPVirtual)
	n := Load(Param("n"), GP64()).(GPVirtual)
	pf := GP64() // prefetch distance: 64 rows
	MOVQ(ld, pf)
	SHLQ(Imm(6), pf)

	Label("group")
	CMPQ(n, Imm(keys))
	JL(LabelRef("tail"))
	for j := 0; j < 2*keys; j++ {
		VPXOR(ymm(j), ymm(j), ymm(j))
	}
	{
		rs := newRowSet(kp, ld, ld3, keys)
		pfp := GP64()
		LEAQ(Mem{Base: kp, Index: pf, Scale: 1}, pfp)
		pfs := newRowSet(pfp, ld, ld3, keys)
		qq := GP64()
		LEAQ(qLoc, qq)
		c := Load(Param("d"), GP64())
		SHRQ(Imm(5), c)
		Label("step")
		for i := 0; i < 8; i++ { // 8 quadwords: 64 bytes of each key
			qv := 16 + i%2
			VMOVUPS(Mem{Base: qq, Disp: 32 * i}, ymm(qv))
			for j := 0; j < keys; j++ {
				b := 18 + (i*keys+j)%6
				VPBROADCASTQ(rs.mem(j, 8*i), ymm(b))
				vdpbf16psY(j+keys*(i%2), qv, b)
			}
		}
		for j := 0; j < keys; j++ {
			PREFETCHT1(pfs.mem(j, 0))
		}
		rs.add(Imm(64))
		pfs.add(Imm(64))
		ADDQ(U32(256), qq)
		DECQ(c)
		JNZ(LabelRef("step"))
	}
	for j := 0; j < keys; j++ {
		VADDPS(ymm(keys+j), ymm(j), ymm(j))
	}
	// Y8+g = hadd(keys 2g, 2g+1) = [S0a S1a S0b S1b | S2a S3a S2b S3b].
	for g := 0; g < 4; g++ {
		VHADDPS(ymm(2*g+1), ymm(2*g), ymm(8+g))
	}
	// Y12 = [S00..S03 | S20..S23], Y13 = [S10..S13 | S30..S33], Y14, Y15
	// the same of keys 4-7.
	for h := 0; h < 2; h++ {
		VSHUFPS(Imm(0x88), ymm(9+2*h), ymm(8+2*h), ymm(12+2*h))
		VSHUFPS(Imm(0xdd), ymm(9+2*h), ymm(8+2*h), ymm(13+2*h))
	}
	VPERM2F128(Imm(0x20), ymm(14), ymm(12), ymm(0))
	VPERM2F128(Imm(0x20), ymm(15), ymm(13), ymm(1))
	VPERM2F128(Imm(0x31), ymm(14), ymm(12), ymm(2))
	VPERM2F128(Imm(0x31), ymm(15), ymm(13), ymm(3))
	row := rowMems(sp, lds)
	for r := 0; r < rows; r++ {
		VMOVUPS(ymm(r), row(r))
	}
	LEAQ(Mem{Base: kp, Index: ld, Scale: 8}, kp)
	ADDQ(Imm(4*keys), sp)
	SUBQ(Imm(keys), n)
	JMP(LabelRef("group"))

	// The last n%8 keys, one at a time: two accumulators, their halves
	// added by VHADDPS, the lanes stored one by one.
	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	VPXOR(ymm(0), ymm(0), ymm(0))
	VPXOR(ymm(1), ymm(1), ymm(1))
	{
		kq, qq := GP64(), GP64()
		MOVQ(kp, kq)
		LEAQ(qLoc, qq)
		c := Load(Param("d"), GP64())
		SHRQ(Imm(5), c)
		Label("tailstep")
		for i := 0; i < 8; i++ {
			VMOVUPS(Mem{Base: qq, Disp: 32 * i}, ymm(8+i%2))
			VPBROADCASTQ(Mem{Base: kq, Disp: 8 * i}, ymm(10+i%2))
			vdpbf16psY(i%2, 8+i%2, 10+i%2)
		}
		ADDQ(Imm(64), kq)
		ADDQ(U32(256), qq)
		DECQ(c)
		JNZ(LabelRef("tailstep"))
	}
	VADDPS(ymm(1), ymm(0), ymm(0))
	VHADDPS(ymm(0), ymm(0), ymm(0)) // [S0 S1 S0 S1 | S2 S3 S2 S3]
	VMOVUPS(ymm(0), sLoc)
	{
		row := rowMems(sp, lds)
		for r := 0; r < rows; r++ {
			t := GP32()
			MOVL(sLoc.Offset(4*(r%2+4*(r/2))), t)
			MOVL(t, row(r))
		}
	}
	ADDQ(ld, kp)
	ADDQ(Imm(4), sp)
	DECQ(n)
	JMP(LabelRef("tail"))

	Label("done")
	VZEROUPPER()
	RET()
}
