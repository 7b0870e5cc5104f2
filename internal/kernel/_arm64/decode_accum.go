package main

import "fmt"

// The accum kernels of decode (see decode.go): O += P·V for a few query
// rows over n value rows of a KV cache read in place.

// accumKeyBlock is the number of keys whose V rows one pass keeps in L1
// while it sweeps O's columns.
const accumKeyBlock = 32

func accumCols(mr int) int {
	switch mr {
	case 1, 2:
		return 8
	case 4:
		return 4
	}
	return 2
}

func genAccum(f *file, e delem, mr int) {
	name := fmt.Sprintf("accum%sM%dNEON", e.name, mr)
	f.text(name, fmt.Sprintf("func(o []float32, ldo int, p []float32, ldp int, v []%s, ldv, n, d int)", e.goType),
		fmt.Sprintf("%s adds Σ_j p[r*ldp+j]·v[j*ldv+c] to o[r*ldo+c] for r < %d, c < d, j < n;", name, mr),
		cacheDoc(e, "ldv", "value"))
	const (
		gO, gLdo, gP, gLdp, gV, gLdv, gN, gD   = "R0", "R1", "R2", "R3", "R4", "R5", "R6", "R7"
		gPBlk, gVBlk, gNB, gCols, gOOff, gVOff = "R9", "R10", "R11", "R12", "R13", "R14"
		gPCur, gT, gVp, gKl, gT2               = "R15", "R16", "R17", "R19", "R20"
	)
	f.ld(gO, "o", "base")
	f.ld(gLdo, "ldo", "")
	f.i("LSL $2, %s", gLdo)
	f.ld(gP, "p", "base")
	f.ld(gLdp, "ldp", "")
	f.i("LSL $2, %s", gLdp)
	f.ld(gV, "v", "base")
	f.ld(gLdv, "ldv", "")
	if e.size > 1 {
		f.i("LSL $%d, %s", map[int]int{2: 1, 4: 2}[e.size], gLdv)
	}
	f.ld(gN, "n", "")
	f.ld(gD, "d", "")
	f.i("MOVD %s, %s", gP, gPBlk)
	f.i("MOVD %s, %s", gV, gVBlk)
	cwMain := accumCols(mr)
	pr := func(r int) V { return V(8 + r) }
	sc := V(8 + mr)
	if mr == 8 {
		sc = V(cwMain)
	}

	f.label("block")
	f.i("MOVD $%d, %s", accumKeyBlock, gNB)
	f.i("CMP %s, %s", gNB, gN)
	f.i("CSEL LT, %s, %s, %s", gN, gNB, gNB)
	f.i("MOVD %s, %s", gD, gCols)
	f.i("MOVD ZR, %s", gOOff)
	f.i("MOVD ZR, %s", gVOff)

	// chunk emits the pass over the block's keys for cw vectors of
	// columns (cw 0: one column) at O byte offset gOOff and cache offset
	// gVOff + voff (q8: the block at gVOff, values from voff).
	chunk := func(cw int, voff int, tag string) {
		nv := max(cw, 1)
		acc := func(r, c int) V { return V(16 + r*nv + c) }
		dv := func(c int) V { return V(c) }
		// O tile.
		loadStore := func(store bool) {
			f.i("ADD %s, %s, %s", gOOff, gO, gT)
			for r := 0; r < mr; r++ {
				for c := 0; c < nv; {
					op := "FLDPQ"
					if store {
						op = "FSTPQ"
					}
					switch {
					case cw == 0 && store:
						f.i("FMOVS F%d, (%s)", acc(r, 0), gT)
						c++
					case cw == 0:
						f.i("FMOVS (%s), F%d", gT, acc(r, 0))
						c++
					case nv-c >= 2 && store:
						f.i("%s (F%d, F%d), %d(%s)", op, acc(r, c), acc(r, c+1), 16*c, gT)
						c += 2
					case nv-c >= 2:
						f.i("%s %d(%s), (F%d, F%d)", op, 16*c, gT, acc(r, c), acc(r, c+1))
						c += 2
					case store:
						f.i("FMOVQ F%d, %d(%s)", acc(r, c), 16*c, gT)
						c++
					default:
						f.i("FMOVQ %d(%s), F%d", 16*c, gT, acc(r, c))
						c++
					}
				}
				if r < mr-1 {
					f.i("ADD %s, %s", gLdo, gT)
				}
			}
		}
		loadStore(false)
		f.i("MOVD %s, %s", gPBlk, gPCur)
		f.i("ADD %s, %s, %s", gVOff, gVBlk, gVp)
		f.i("MOVD %s, %s", gNB, gKl)
		// value loads the row of one key at gVp into dv(0..nv).
		value := func() {
			switch {
			case e.q8():
				f.loadQ8Scale(sc, fmt.Sprintf("(%s)", gVp), gT2)
				switch nv {
				case 8:
					f.i("FMOVQ %d(%s), F%d", voff, gVp, dv(2))
					f.i("FMOVQ %d(%s), F%d", voff+16, gVp, dv(6))
					f.widenQ8([]V{0, 1, 2, 3}, 4, sc)
					f.widenQ8([]V{4, 5, 6, 7}, 4, sc)
				case 4:
					f.i("FMOVQ %d(%s), F%d", voff, gVp, dv(2))
					f.widenQ8([]V{0, 1, 2, 3}, 4, sc)
				case 2:
					f.i("FMOVD %d(%s), F%d", voff, gVp, dv(0))
					f.widenQ8([]V{0, 1}, 2, sc)
				}
			case cw == 0:
				f.loadElems(e, []V{dv(0)}, gVp, 0, 0, 1, gT2)
			case e.size == 4:
				for c := 0; c < nv; c += 2 {
					if nv-c >= 2 {
						f.i("FLDPQ %d(%s), (F%d, F%d)", 16*c, gVp, dv(c), dv(c+1))
					} else {
						f.i("FMOVQ %d(%s), F%d", 16*c, gVp, dv(c))
					}
				}
			default: // 16-bit: raw values into the even registers, widened in place
				switch nv {
				case 8:
					f.i("FLDPQ (%s), (F%d, F%d)", gVp, dv(0), dv(2))
					f.i("FLDPQ 32(%s), (F%d, F%d)", gVp, dv(4), dv(6))
				case 4:
					f.i("FLDPQ (%s), (F%d, F%d)", gVp, dv(0), dv(2))
				case 2:
					f.i("FMOVQ (%s), F%d", gVp, dv(0))
				case 1:
					f.i("FMOVD (%s), F%d", gVp, dv(0))
				}
				if nv == 1 {
					f.widen16(e, dv(0), dv(0), false)
				}
				for c := 0; c+1 < nv; c += 2 {
					f.widen16(e, dv(c+1), dv(c), true)
					f.widen16(e, dv(c), dv(c), false)
				}
			}
			f.i("ADD %s, %s", gLdv, gVp)
		}
		// pLoad loads P[r][j..j+cnt) (cnt 4 or 1) of every row.
		pLoad := func(cnt int) {
			f.i("MOVD %s, %s", gPCur, gT)
			for r := 0; r < mr; r++ {
				if cnt == 4 {
					f.i("FMOVQ (%s), F%d", gT, pr(r))
				} else {
					f.i("FMOVS (%s), F%d", gT, pr(r))
				}
				if r < mr-1 {
					f.i("ADD %s, %s", gLdp, gT)
				}
			}
			f.i("ADD $%d, %s", 4*cnt, gPCur)
		}
		if cw > 0 {
			f.label(tag + "K4")
			f.i("CMP $4, %s", gKl)
			f.i("BLT %sK1", tag)
			pLoad(4)
			for l := 0; l < 4; l++ {
				value()
				for c := 0; c < nv; c++ {
					for r := 0; r < mr; r++ {
						f.w(fmlaE(acc(r, c), dv(c), pr(r), l))
					}
				}
			}
			f.i("SUB $4, %s", gKl)
			f.i("B %sK4", tag)
		}
		f.label(tag + "K1")
		f.i("CBZ %s, %sStore", gKl, tag)
		pLoad(1)
		value()
		for c := 0; c < nv; c++ {
			for r := 0; r < mr; r++ {
				f.w(fmlaE(acc(r, c), dv(c), pr(r), 0))
			}
		}
		f.i("SUB $1, %s", gKl)
		f.i("B %sK1", tag)
		f.label(tag + "Store")
		loadStore(true)
	}

	if e.q8() {
		f.i("LSR $5, %s, %s", gD, gCols) // blocks
		f.label("q8Block")
		subs := q8Values / (4 * cwMain)
		for h := 0; h < subs; h++ {
			chunk(cwMain, 2+4*cwMain*h, fmt.Sprintf("c%d", h))
			f.i("ADD $%d, %s", 16*cwMain, gOOff)
		}
		f.i("ADD $%d, %s", q8Bytes, gVOff)
		f.i("SUBS $1, %s, %s", gCols, gCols)
		f.i("BNE q8Block")
	} else {
		for cw := cwMain; cw >= 1; cw /= 2 {
			tag := fmt.Sprintf("w%d", cw)
			f.label(tag + "Chunk")
			f.i("CMP $%d, %s", 4*cw, gCols)
			f.i("BLT %sDone", tag)
			chunk(cw, 0, tag)
			f.i("ADD $%d, %s", 16*cw, gOOff)
			f.i("ADD $%d, %s", 4*cw*e.size, gVOff)
			f.i("SUB $%d, %s", 4*cw, gCols)
			if cw == cwMain {
				f.i("B %sChunk", tag)
			}
			f.label(tag + "Done")
		}
		f.label("colOne")
		f.i("CBZ %s, blockNext", gCols)
		chunk(0, 0, "one")
		f.i("ADD $4, %s", gOOff)
		f.i("ADD $%d, %s", e.size, gVOff)
		f.i("SUB $1, %s", gCols)
		f.i("B colOne")
	}
	f.label("blockNext")
	f.i("ADD %s<<2, %s, %s", gNB, gPBlk, gPBlk)
	f.i("MUL %s, %s, %s", gNB, gLdv, gT)
	f.i("ADD %s, %s", gT, gVBlk)
	f.i("SUBS %s, %s, %s", gNB, gN, gN)
	f.i("BNE block")
	f.ret()
}
