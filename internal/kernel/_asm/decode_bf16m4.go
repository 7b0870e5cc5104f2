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

// natQuads is the layout of 4 rows: lane 2r+e of packed Q vector t is
// the pair Q[r][4t+2e:4t+2e+2], and a broadcast takes a quadword of a key.
func natQuads() natScores {
	ns := natScores{
		rows: 4, see: "decode_bf16m4.go", vb: 32, bw: 8, packStep: Imm(128),
		bcast: VPBROADCASTQ,
		// The tail's sum: [S0 S1 S0 S1 | S2 S3 S2 S3].
		fold: func() { VHADDPS(ymm(0), ymm(0), ymm(0)) },
		lane: func(r int) int { return r%2 + 4*(r/2) },
	}
	// Chunks of 16 values (4 quadwords) of the 4 rows, rounded, and the
	// 4×4 quadwords transposed: vector t = quadword t of rows 0-3.
	ns.pack = func(rs rowSet, dst Register) {
		for r := 0; r < 4; r++ {
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
	}
	ns.store = func(row func(r int) Mem) {
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
		for r := 0; r < 4; r++ {
			VMOVUPS(ymm(r), row(r))
		}
	}
	return ns
}
