package main

import "fmt"

// The bfloat16 product by BFMMLA (FEAT_BF16): one instruction multiplies a
// 2×4 block of A (two rows, four k) by a 4×2 block of B (four k, two
// columns) into a 2×2 block of C, held as [c(i,j), c(i,j+1), c(i+1,j),
// c(i+1,j+1)]. Its operands are two 4-k runs side by side: A's rows 2p,
// 2p+1 at one group of four k, and B's columns 2c, 2c+1 at it.
//
// This kernel reads the operands of Half as they are (A row-major, B in
// the pair layout) and builds the 2×4 blocks in registers:
//
//	A, rows 2p and 2p+1, k = 4g … 4g+3: two LDR D (each zeroes the upper
//	half), ZIP1 .2D: [A[2p, 4g:4g+4], A[2p+1, 4g:4g+4]].
//	B, columns 4c … 4c+3: pair rows 2g and 2g+1 (LDR Q of 4 pairs each,
//	64 bytes apart), ZIP1 / ZIP2 .4S: [pair(2g, j), pair(2g+1, j)] for
//	j = 4c, 4c+1 and for 4c+2, 4c+3 — column j's four k in order.
//
// A 6×16 tile keeps 3×8 accumulators (v8 + 8p + c: rows 2p, 2p+1, columns
// 2c, 2c+1); per 4 k: 6 LDR D + 8 LDR Q + 3 + 8 ZIP + 24 BFMMLA. The
// shuffles share the vector pipes with BFMMLA, so the loop issues at most
// 24/35 of the BFMMLA rate (a layout of 2×4 blocks would need no ZIP: see
// half_arm64.go). An odd last row has a zero second A row (LDR D only);
// a k ending in one pair (k mod 4 = 2) is a last step with the missing
// pair zero (LDR S for A, ZIP with a zero register for B), whose products
// add +0.
//
// Arithmetic: each output is summed from zero over the k groups in order,
// by BFMMLA's rule for the two pairs of a group (in Arm's original
// definition, and in qemu, BFDOT's: the pair's two products added with
// round-to-odd, then added to the sum, subnormals flushed; Arm now leaves
// the intermediate rounding implementation-defined). The store
// un-interleaves the 2×2 blocks with ZIP1/ZIP2 .2D.

// mmlaAcc is the accumulator of row pair p, column pair c.
func mmlaAcc(p, c int) V { return V(8 + 8*p + c) }

// mmlaTile emits the BFMMLA tile of r rows (1 … 6) at gCRow, A at gARow,
// B at gB; gPc holds k in pairs.
func mmlaTile(f *file, accumulate bool, r int) {
	tag := fmt.Sprintf("r%d", r)
	np := (r + 1) / 2
	f.comment("Tile: %d rows × 16 columns, %d BFMMLA accumulators.", r, 8*np)
	for p := 0; p < np; p++ {
		for c := 0; c < 8; c++ {
			f.w(movi0(mmlaAcc(p, c)))
		}
	}
	f.i("MOVD %s, %s", gB, gBp)
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

// mmlaStep emits the products of one group of four k (half: one pair, the
// other zero) for r rows: A's blocks in v0-v2 (v3 a temporary), B's in v6,
// v7 from the pair rows loaded in v4, v5 (half: v5 zero).
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
	if half {
		f.w(movi0(5))
	}
	for c4 := 0; c4 < 4; c4++ {
		f.i("FMOVQ %d(%s), F4", 16*c4, gBp)
		if !half {
			f.i("FMOVQ %d(%s), F5", 64+16*c4, gBp)
		}
		f.w(zip1(s4, 6, 4, 5))
		f.w(zip2(s4, 7, 4, 5))
		for p := 0; p < np; p++ {
			f.w(bfmmla(mmlaAcc(p, 2*c4), V(p), 6))
			f.w(bfmmla(mmlaAcc(p, 2*c4+1), V(p), 7))
		}
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
