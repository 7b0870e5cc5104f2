package main

import "fmt"

// The scores kernels of decode (see decode.go): S = Q·Kᵀ for a few query
// rows against n keys of a KV cache read in place.

func scoresKeys(mr int) int {
	if mr == 8 {
		return 2
	}
	return 4
}

func genScores(f *file, e delem, mr int) {
	name := fmt.Sprintf("scores%sM%dNEON", e.name, mr)
	f.text(name, fmt.Sprintf("func(s []float32, lds int, q []float32, k []%s, ldk, n, d int)", e.goType),
		fmt.Sprintf("%s sets s[r*lds+j] = Σ_p q[r*d+p]·k[j*ldk+p] for r < %d, j < n, p < d;", name, mr),
		cacheDoc(e, "ldk", "key"))
	const (
		gS, gLds, gQ, gK, gLdk, gN, gD = "R0", "R1", "R2", "R3", "R4", "R5", "R6"
		gPc, gT, gT2                   = "R7", "R8", "R22"
	)
	qp := []string{"R9", "R10", "R11", "R12", "R13", "R14", "R15", "R16"}
	kp := []string{"R17", "R19", "R20", "R21"}
	f.ld(gS, "s", "base")
	f.ld(gLds, "lds", "")
	f.i("LSL $2, %s", gLds)
	f.ld(gQ, "q", "base")
	f.ld(gK, "k", "base")
	f.ld(gLdk, "ldk", "")
	if e.size > 1 {
		f.i("LSL $%d, %s", map[int]int{2: 1, 4: 2}[e.size], gLdk)
	}
	f.ld(gN, "n", "")
	f.ld(gD, "d", "")
	hs := 1
	if mr <= 2 {
		hs = 2
	}
	const vQ0, vQ1 = 8, 9
	group := func(w int, tag string) {
		acc := func(r, j, h int) V { return V(16 + (r*w+j)*hs + h%hs) }
		kr := func(j, h int) V { return V(2*j + h) }
		sc := func(j int) V { return V(10 + j) }
		next := tag + "End"
		f.label(tag)
		f.i("CMP $%d, %s", w, gN)
		f.i("BLT %s", next)
		for r := 0; r < mr; r++ {
			for j := 0; j < w; j++ {
				for h := 0; h < hs; h++ {
					f.w(movi0(acc(r, j, h)))
				}
			}
		}
		f.i("MOVD %s, %s", gQ, qp[0])
		for r := 1; r < mr; r++ {
			f.i("ADD %s<<2, %s, %s", gD, qp[r-1], qp[r])
		}
		f.i("MOVD %s, %s", gK, kp[0])
		for j := 1; j < w; j++ {
			f.i("ADD %s, %s, %s", gLdk, kp[j-1], kp[j])
		}
		// step multiplies cnt (8, 4 or 1) elements of each key, loaded
		// by load(j), into the accumulators.
		step := func(cnt int, load func(j int)) {
			for j := 0; j < w; j++ {
				load(j)
			}
			for r := 0; r < mr; r++ {
				switch cnt {
				case 8:
					f.i("FLDPQ.P 32(%s), (F%d, F%d)", qp[r], vQ0, vQ1)
				case 4:
					f.i("FMOVQ.P 16(%s), F%d", qp[r], vQ0)
				default:
					f.i("FMOVS.P 4(%s), F%d", qp[r], vQ0)
				}
				for j := 0; j < w; j++ {
					f.w(fmla(acc(r, j, 0), vQ0, kr(j, 0)))
					if cnt == 8 {
						f.w(fmla(acc(r, j, 1), vQ1, kr(j, 1)))
					}
				}
			}
		}
		if e.q8() {
			f.i("LSR $5, %s, %s", gD, gPc)
			f.label(tag + "Block")
			for j := 0; j < w; j++ {
				f.loadQ8Scale(sc(j), fmt.Sprintf("(%s)", kp[j]), gT)
				f.i("ADD $2, %s", kp[j])
			}
			for sub := 0; sub < 4; sub++ {
				step(8, func(j int) {
					f.i("FMOVD.P 8(%s), F%d", kp[j], kr(j, 0))
					f.widenQ8([]V{kr(j, 0), kr(j, 1)}, 2, sc(j))
				})
			}
			f.i("SUBS $1, %s, %s", gPc, gPc)
			f.i("BNE %sBlock", tag)
		} else {
			f.i("LSR $3, %s, %s", gD, gPc)
			f.i("CBZ %s, %sHalf", gPc, tag)
			f.label(tag + "Step")
			step(8, func(j int) { f.loadElems(e, []V{kr(j, 0), kr(j, 1)}, kp[j], 0, 8*e.size, 8, gT) })
			f.i("SUBS $1, %s, %s", gPc, gPc)
			f.i("BNE %sStep", tag)
			f.label(tag + "Half")
			f.i("TBZ $2, %s, %sOne", gD, tag)
			step(4, func(j int) { f.loadElems(e, []V{kr(j, 0)}, kp[j], 0, 4*e.size, 4, gT) })
			f.label(tag + "One")
			f.i("AND $3, %s, %s", gD, gPc)
			f.i("CBZ %s, %sFold", gPc, tag)
			f.label(tag + "OneLoop")
			step(1, func(j int) { f.loadElems(e, []V{kr(j, 0)}, kp[j], 0, e.size, 1, gT) })
			f.i("SUBS $1, %s, %s", gPc, gPc)
			f.i("BNE %sOneLoop", tag)
			f.label(tag + "Fold")
		}
		// Fold and store row by row.
		f.i("MOVD %s, %s", gS, gT2)
		for r := 0; r < mr; r++ {
			if hs == 2 {
				for j := 0; j < w; j++ {
					f.w(fadd(acc(r, j, 0), acc(r, j, 0), acc(r, j, 1)))
				}
			}
			a := func(j int) V { return acc(r, j, 0) }
			switch w {
			case 4:
				f.w(faddp(a(0), a(0), a(1)))
				f.w(faddp(a(2), a(2), a(3)))
				f.w(faddp(a(0), a(0), a(2)))
				f.i("FMOVQ F%d, (%s)", a(0), gT2)
			case 2:
				f.w(faddp(a(0), a(0), a(1)))
				f.w(faddp(a(0), a(0), a(0)))
				f.i("FMOVD F%d, (%s)", a(0), gT2)
			case 1:
				f.w(faddp(a(0), a(0), a(0)))
				f.w(faddpS(a(0), a(0)))
				f.i("FMOVS F%d, (%s)", a(0), gT2)
			}
			if r < mr-1 {
				f.i("ADD %s, %s", gLds, gT2)
			}
		}
		f.i("ADD $%d, %s", 4*w, gS)
		if w == 1 {
			f.i("ADD %s, %s", gLdk, gK)
		} else {
			f.i("ADD %s<<%d, %s, %s", gLdk, map[int]int{2: 1, 4: 2}[w], gK, gK)
		}
		f.i("SUB $%d, %s", w, gN)
		f.i("B %s", tag)
		f.label(next)
	}
	w := scoresKeys(mr)
	group(w, "main")
	group(1, "rest")
	f.ret()
}
