package main

import "fmt"

// The bfloat16 product by BFMMLA (FEAT_BF16): one instruction multiplies a
// 2×4 block of A (two rows, four k) by a 4×2 block of B (four k, two
// columns) into a 2×2 block of C, held as [c(i,j), c(i,j+1), c(i+1,j),
// c(i+1,j+1)]. Its operands are two 4-k runs side by side: A's rows 2p,
// 2p+1 at one group of four k, and B's columns 2c, 2c+1 at it.
//
// This kernel takes the operands of Half as they are (A row-major, B in
// the pair layout) and builds the 2×4 blocks:
//
//	B, once per strip of 16 columns, into buf (packStrip with mmlaZipStore): pair rows
//	2g and 2g+1 (64 bytes apart) ZIP1 / ZIP2 .4S, giving for each column
//	pair (j, j+1) the block [pair(2g, j), pair(2g+1, j), pair(2g, j+1),
//	pair(2g+1, j+1)]: column j's four k in order, then column j+1's.
//	Group g of buf is 128 bytes, column pair c at byte 16·c; a k ending
//	in one pair (k mod 4 = 2) gets a last group whose second pair is 0.
//	A, rows 2p and 2p+1, k = 4g … 4g+3, in the loop: two LDR D (each
//	zeroes the upper half), ZIP1 .2D: [A[2p, 4g:4g+4], A[2p+1, 4g:4g+4]].
//
// A 6×16 tile keeps 3×8 accumulators (v8 + 8p + c: rows 2p, 2p+1, columns
// 2c, 2c+1); per 4 k: 6 LDR D + 4 LDP Q + 3 ZIP + 24 BFMMLA. The strip's
// repacking (8 ZIP per 4 k) is shared by all its row tiles; building B's
// blocks in every tile instead cost 8 more ZIPs per 24 BFMMLA, on the
// vector pipes BFMMLA issues on (the loop at 68% of the BFMMLA peak on
// Neoverse V2 against 88% now, llvm-mca 19). An odd last row has a zero
// second A row (LDR D only); the half last group loads A with LDR S, so
// its missing pair's products are 0 and add +0.
//
// Arithmetic: each output is summed from zero over the k groups in order,
// by BFMMLA's rule for the two pairs of a group (in Arm's original
// definition, and in qemu, BFDOT's: the pair's two products added with
// round-to-odd, then added to the sum, subnormals flushed; Arm now leaves
// the intermediate rounding implementation-defined). The store
// un-interleaves the 2×2 blocks with ZIP1/ZIP2 .2D.

// gBuf holds buf: the blocks of B's current strip.
const gBuf = "R23"

// mmlaAcc is the accumulator of row pair p, column pair c.
func mmlaAcc(p, c int) V { return V(8 + 8*p + c) }

// mmlaTile emits the BFMMLA tile of r rows (1 … 6) at gCRow, A at gARow,
// B's blocks at gBuf; gK holds k in pairs.
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
	for i := 1; i < r; i++ {
		f.i("ADD %s, %s, %s", gLda, aRowReg(i-1), aRowReg(i))
	}
	f.i("LSR $1, %s, %s", gK, gPc) // groups of four k
	f.i("CBZ %s, %stail", gPc, tag)
	f.label(tag + "loop")
	mmlaStep(f, r, false)
	f.i("ADD $128, %s", gBp)
	f.i("SUBS $1, %s, %s", gPc, gPc)
	f.i("BNE %sloop", tag)
	f.label(tag + "tail")
	f.i("TBZ $0, %s, %sstore", gK, tag)
	mmlaStep(f, r, true)
	f.label(tag + "store")
	mmlaStore(f, accumulate, r)
}

// mmlaStep emits the products of one group of four k (half: its second
// pair zero) for r rows: A's blocks in v0-v2 (v3 a temporary), B's from
// buf in v4-v7.
func mmlaStep(f *file, r int, half bool) {
	ld := "FMOVD.P 8"
	if half {
		ld = "FMOVS.P 4"
	}
	np := (r + 1) / 2
	for p := 0; p < np; p++ {
		f.i("%s(%s), F%d", ld, aRowReg(2*p), p)
		if 2*p+1 < r {
			f.i("%s(%s), F3", ld, aRowReg(2*p+1))
			f.w(zip1(d2, V(p), V(p), 3))
		}
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
