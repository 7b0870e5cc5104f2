package main

import (
	"fmt"
	"strings"
)

// The bfloat16 product by BFMMLA (FEAT_BF16): one instruction multiplies a
// 2×4 block of A (two rows, four k) by a 4×2 block of B (four k, two
// columns) into a 2×2 block of C, held as [c(i,j), c(i,j+1), c(i+1,j),
// c(i+1,j+1)]. Its operands are two 4-k runs side by side: A's rows 2p,
// 2p+1 at one group of four k, and B's columns 2c, 2c+1 at it.
//
// This kernel takes the operands of Half as they are (A row-major, B in
// the pair layout) and builds the 2×4 blocks in buf, once per call (A)
// or once per strip (B), so that its loop only loads and multiplies:
//
//	B, once per strip of 16 columns, into buf (packStrip with mmlaZipStore): pair rows
//	2g and 2g+1 (64 bytes apart) ZIP1 / ZIP2 .4S, giving for each column
//	pair (j, j+1) the block [pair(2g, j), pair(2g+1, j), pair(2g, j+1),
//	pair(2g+1, j+1)]: column j's four k in order, then column j+1's.
//	Group g of buf is 128 bytes, column pair c at byte 16·c; a k ending
//	in one pair (k mod 4 = 2) gets a last group whose second pair is 0.
//	A, once per call, after B's blocks (mmlaPackA): row pairs (2p, 2p+1)
//	by ZIP1 / ZIP2 .2D of two rows' 8 k, [A[2p, 4g:4g+4], A[2p+1,
//	4g:4g+4]]; the three pairs of a 6-row tile side by side, 48 bytes
//	per group (tile t at 48·G·t, G = k/4 rounded up), the half last group
//	zero-padded like B's. An odd last row is paired with itself: the
//	copy's products land in the block's second row, which is not stored.
//
// A 6×16 tile keeps 3×8 accumulators (v8 + 8p + c: rows 2p, 2p+1, columns
// 2c, 2c+1); per 4 k: 1 LD1 (3 registers) + 4 LDP Q + 24 BFMMLA, no ZIP
// (the loop ran 6 LDR D + 3 ZIP more, built A's blocks in every tile:
// 6.8 cycles per 24 BFMMLA on Neoverse V2 against 6.0 now, llvm-mca 19).
// The strip's repacking (8 ZIP per 4 k) is shared by all its row tiles,
// A's (1 ZIP per 4 k of a row pair) by all the strips; the half last
// group runs in the loop too (both operands' missing pair are 0, its
// products +0), so a tile has no k tail.
//
// Arithmetic: each output is summed from zero over the k groups in order,
// by BFMMLA's rule for the two pairs of a group (in Arm's original
// definition, and in qemu, BFDOT's: the pair's two products added with
// round-to-odd, then added to the sum, subnormals flushed; Arm now leaves
// the intermediate rounding implementation-defined). The store
// un-interleaves the 2×2 blocks with ZIP1/ZIP2 .2D.

// gBuf holds buf: the blocks of B's current strip.
const gBuf = "R23"

// Registers of the packed A: gABuf its start (after B's blocks in buf),
// gGroups the groups of four k (k/4 rounded up).
const (
	gABuf   = "R21"
	gGroups = "R12"
)

// mmlaAcc is the accumulator of row pair p, column pair c.
func mmlaAcc(p, c int) V { return V(8 + 8*p + c) }

// mmlaPackA packs A (m rows at a, lda) into gABuf (see above) and sets
// gGroups, gABuf and gA6 (the packed tile's 48·G bytes). It uses R3, R5,
// R10, R11, R13-R15, R17, R24, R26 and v0-v3 (before any tile).
func mmlaPackA(f *file) {
	row, rows, b0, b1, slot, dst, cnt, tile, pair := "R3", "R5", "R10", "R11", "R13", "R15", "R17", "R24", "R26"
	f.comment("A packed once into buf after B's blocks: row pairs, 48 bytes per group of a 6-row tile.")
	f.i("ADD $1, %s, %s", gK, gGroups)
	f.i("LSR $1, %s", gGroups)
	f.i("LSL $7, %s, %s", gGroups, gABuf) // B's blocks: 128 bytes per group
	f.i("ADD %s, %s", gBuf, gABuf)
	f.i("MOVD $48, %s", cnt)
	f.i("MUL %s, %s, %s", cnt, gGroups, gA6)
	f.ld(row, "a", "base")
	f.ld(rows, "m", "")
	f.i("MOVD %s, %s", gABuf, tile)
	f.i("MOVD %s, %s", tile, pair)
	f.i("MOVD $0, %s", slot)
	f.label("packAPair")
	f.i("MOVD %s, %s", row, b0)
	f.i("ADD %s, %s, %s", gLda, row, b1)
	f.i("CMP $1, %s", rows)
	f.i("BNE packATwo")
	f.i("MOVD %s, %s", b0, b1) // an odd last row, paired with itself
	f.label("packATwo")
	f.i("MOVD %s, %s", pair, dst)
	f.i("LSR $2, %s, %s", gK, cnt) // 8 k (two groups) at a time
	f.i("CBZ %s, packAFour", cnt)
	f.label("packAEight")
	// Offsets and ADDs, not post-indexed loads: llvm-mca 19's Neoverse N2
	// model gives a post-index's writeback the load's latency (6 cycles
	// per iteration against 2).
	f.i("FMOVQ (%s), F0", b0)
	f.i("FMOVQ (%s), F1", b1)
	f.i("ADD $16, %s", b0)
	f.i("ADD $16, %s", b1)
	f.w(zip1(d2, 2, 0, 1))
	f.w(zip2(d2, 3, 0, 1))
	f.i("FMOVQ F2, (%s)", dst)
	f.i("FMOVQ F3, 48(%s)", dst)
	f.i("ADD $96, %s", dst)
	f.i("SUBS $1, %s, %s", cnt, cnt)
	f.i("BNE packAEight")
	for _, g := range []struct {
		bit         int
		ld, next    string
		width, post int
	}{{1, "FMOVD", "packATwoK", 8, 48}, {0, "FMOVS", "packANext", 4, 0}} {
		// 4 k, then 2 k (the half group: LDR S zeroes the rest).
		f.label(map[int]string{1: "packAFour", 0: "packATwoK"}[g.bit])
		f.i("TBZ $%d, %s, %s", g.bit, gK, g.next)
		f.i("%s.P %d(%s), F0", g.ld, g.width, b0)
		f.i("%s.P %d(%s), F1", g.ld, g.width, b1)
		f.w(zip1(d2, 2, 0, 1))
		if g.post != 0 {
			f.i("FMOVQ.P F2, %d(%s)", g.post, dst)
		} else {
			f.i("FMOVQ F2, (%s)", dst)
		}
	}
	f.label("packANext")
	f.i("ADD %s, %s", gLda, row)
	f.i("ADD %s, %s", gLda, row)
	f.i("ADD $16, %s", pair)
	f.i("ADD $1, %s", slot)
	f.i("CMP $3, %s", slot)
	f.i("BNE packAMore")
	f.i("MOVD $0, %s", slot)
	f.i("ADD %s, %s", gA6, tile)
	f.i("MOVD %s, %s", tile, pair)
	f.label("packAMore")
	f.i("SUBS $2, %s, %s", rows, rows)
	f.i("BGT packAPair")
}

// mmlaTile emits the BFMMLA tile of r rows (1 … 6) at gCRow, its packed
// A at gARow, B's blocks at gBuf; gGroups holds the groups of four k.
func mmlaTile(f *file, accumulate bool, r int) {
	tag := fmt.Sprintf("r%d", r)
	np := (r + 1) / 2
	f.comment("Tile: %d rows × 16 columns, %d BFMMLA accumulators.", r, 8*np)
	for p := 0; p < np; p++ {
		for c := 0; c < 8; c++ {
			f.w(movi0(mmlaAcc(p, c)))
		}
	}
	f.i("MOVD %s, %s", gBuf, gBp)
	f.i("MOVD %s, %s", gARow, aRowReg(0))
	f.i("MOVD %s, %s", gGroups, gPc)
	f.i("CBZ %s, %sstore", gPc, tag)
	f.label(tag + "loop")
	mmlaStep(f, r)
	f.i("ADD $128, %s", gBp)
	f.i("SUBS $1, %s, %s", gPc, gPc)
	f.i("BNE %sloop", tag)
	f.label(tag + "store")
	mmlaStore(f, accumulate, r)
}

// mmlaStep emits the products of one group of four k for r rows: A's
// blocks (packed) in v0-v2, B's from buf in v4-v7.
func mmlaStep(f *file, r int) {
	np := (r + 1) / 2
	regs := make([]string, np)
	for p := range regs {
		regs[p] = fmt.Sprintf("V%d.S4", p)
	}
	if np == 3 {
		f.i("VLD1.P 48(%s), [%s]", aRowReg(0), strings.Join(regs, ", "))
	} else {
		f.i("VLD1 (%s), [%s]", aRowReg(0), strings.Join(regs, ", "))
		f.i("ADD $48, %s", aRowReg(0))
	}
	for c2 := 0; c2 < 4; c2++ {
		b := V(4 + c2%2*2)
		f.i("FLDPQ %d(%s), (F%d, F%d)", 32*c2, gBp, b, b+1)
		for h := V(0); h < 2; h++ {
			for p := 0; p < np; p++ {
				f.w(bfmmla(mmlaAcc(p, 2*c2+int(h)), V(p), b+h))
			}
		}
	}
}

// packStrip writes the strip of B at gB into buf, pairRows pair rows at
// a time (2: BFMMLA's blocks, mmlaZipStore; 1: f16UzpStore), a last
// single pair row (2, k mod 4 = 2) with a zero second one (v4-v7). It
// uses v0-v7 and v16-v23 (no tile is live).
func packStrip(f *file, pairRows int, store func(f *file, dst string)) {
	src, dst, cnt := "R26", "R24", "R25"
	f.comment("The strip of B repacked into buf.")
	f.i("MOVD %s, %s", gB, src)
	f.i("MOVD %s, %s", gBuf, dst)
	f.i("LSR $%d, %s, %s", pairRows-1, gK, cnt)
	f.i("CBZ %s, packTail", cnt)
	f.label("packLoop")
	for l := V(0); l < V(4*pairRows); l += 2 {
		f.i("FLDPQ %d(%s), (F%d, F%d)", 16*l, src, l, l+1)
	}
	store(f, dst)
	f.i("ADD $%d, %s", 64*pairRows, src)
	f.i("ADD $%d, %s", 64*pairRows, dst)
	f.i("SUBS $1, %s, %s", cnt, cnt)
	f.i("BNE packLoop")
	f.label("packTail")
	if pairRows == 2 {
		f.i("TBZ $0, %s, packDone", gK)
		f.i("FLDPQ (%s), (F0, F1)", src)
		f.i("FLDPQ 32(%s), (F2, F3)", src)
		for v := V(4); v < 8; v++ {
			f.w(movi0(v))
		}
		store(f, dst)
	}
	f.label("packDone")
}

// f16UzpStore splits the pair row in v0-v3 (columns 0-3, 4-7, 8-11,
// 12-15, as pairs) into even and odd k and stores each half of 8 columns
// at dst + 32·half: 8 even values, then 8 odd ones.
func f16UzpStore(f *file, dst string) {
	for h := V(0); h < 2; h++ {
		f.w(uzp1(h8, 16+2*h, 2*h, 2*h+1))
		f.w(uzp2(h8, 17+2*h, 2*h, 2*h+1))
	}
	for h := V(0); h < 2; h++ {
		f.i("FSTPQ (F%d, F%d), %d(%s)", 16+2*h, 17+2*h, 32*h, dst)
	}
}

// mmlaZipStore interleaves pair rows v0-v3 (columns 4c … 4c+3 in v(c))
// with v4-v7 (the next pair row) and stores the 8 blocks at dst: column
// pairs 2c, 2c+1 at byte 32·c.
func mmlaZipStore(f *file, dst string) {
	const off = 4
	for c := V(0); c < 4; c++ {
		f.w(zip1(s4, 16+2*c, c, off+c))
		f.w(zip2(s4, 17+2*c, c, off+c))
	}
	for c := V(0); c < 4; c++ {
		f.i("FSTPQ (F%d, F%d), %d(%s)", 16+2*c, 17+2*c, 32*c, dst)
	}
}

// mmlaStore writes (accumulate: adds) the tile's blocks to C, row pair by
// row pair: ZIP1 / ZIP2 .2D of the blocks of column pairs 2c, 2c+1 are
// rows 2p and 2p+1 at columns 4c … 4c+3, built in v0-v3 and v4-v7; C's
// rows are read into the pair's accumulators, free by then.
func mmlaStore(f *file, accumulate bool, r int) {
	f.i("MOVD %s, %s", gCRow, gCp)
	for p := 0; p < (r+1)/2; p++ {
		two := 2*p+1 < r
		for c4 := 0; c4 < 4; c4++ {
			f.w(zip1(d2, V(c4), mmlaAcc(p, 2*c4), mmlaAcc(p, 2*c4+1)))
			if two {
				f.w(zip2(d2, V(4+c4), mmlaAcc(p, 2*c4), mmlaAcc(p, 2*c4+1)))
			}
		}
		for row := 0; row < 2; row++ {
			if row == 1 && !two {
				break
			}
			v := V(4 * row)
			if accumulate {
				t := mmlaAcc(p, 0)
				f.i("FLDPQ (%s), (F%d, F%d)", gCp, t, t+1)
				f.i("FLDPQ 32(%s), (F%d, F%d)", gCp, t+2, t+3)
				for c4 := V(0); c4 < 4; c4++ {
					f.w(fadd(v+c4, v+c4, t+c4))
				}
			}
			f.i("FSTPQ (F%d, F%d), (%s)", v, v+1, gCp)
			f.i("FSTPQ (F%d, F%d), 32(%s)", v+2, v+3, gCp)
			if 2*p+row < r-1 {
				f.i("ADD %s, %s", gLdc, gCp)
			}
		}
	}
}
