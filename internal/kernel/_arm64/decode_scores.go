package main

import "fmt"

// The scores kernels of decode (see decode.go): S = Q·Kᵀ for a few query
// rows against n keys of a KV cache read in place.

// General-purpose registers of the scores kernels.
const (
	scS   = "R0"  // &S[0][j0]: the current group's column of S
	scLds = "R1"  // lds in bytes
	scQ   = "R2"  // Q
	scK   = "R3"  // the current group's first key row
	scLdk = "R4"  // ldk in bytes
	scN   = "R5"  // keys left
	scD   = "R6"  // d
	scPc  = "R7"  // steps (q8: blocks) left along d
	scT   = "R8"  // scratch of the loads
	scT2  = "R22" // S's row at the store
)

// scQRows and scKRows are the running pointers into Q's rows and into the
// group's key rows.
var (
	scQRows = []string{"R9", "R10", "R11", "R12", "R13", "R14", "R15", "R16"}
	scKRows = []string{"R17", "R19", "R20", "R21"}
)

// Q's values at one step: v8 (and v9 for eight elements).
const scVQ0, scVQ1 V = 8, 9

// The constants of q4Codes in the scores kernels (v14, v15: past the
// scales, below the accumulators).
const scQ4Mask, scQ4Eight V = 14, 15

// scoresKeys is the number of keys a scores kernel for mr rows reads side
// by side (w).
func scoresKeys(mr int) int {
	if mr == 8 {
		return 2
	}
	return 4
}

// genScores emits scores<T>M<mr>NEON: the groups of scoresKeys(mr) keys,
// then the keys left one at a time.
func genScores(f *file, e delem, mr int) {
	scoresEntry(f, e, mr)
	hs := 1
	if mr <= 2 {
		hs = 2
	}
	g := scoresGroup{f: f, e: e, mr: mr, hs: hs, w: scoresKeys(mr), tag: "main"}
	g.emit()
	g.w, g.tag = 1, "rest"
	g.emit()
	f.ret()
}

// scoresEntry starts the kernel: its signature and doc, and the arguments
// in their registers (strides in bytes).
func scoresEntry(f *file, e delem, mr int) {
	name := fmt.Sprintf("scores%sM%dNEON", e.name, mr)
	f.text(name, fmt.Sprintf("func(s []float32, lds int, q []float32, k []%s, ldk, n, d int)", e.goType),
		fmt.Sprintf("%s sets s[r*lds+j] = Σ_p q[r*d+p]·k[j*ldk+p] for r < %d, j < n, p < d;", name, mr),
		cacheDoc(e, "ldk", "key"))
	f.ld(scS, "s", "base")
	f.ldStride(scLds, "lds", 4)
	f.ld(scQ, "q", "base")
	f.ld(scK, "k", "base")
	f.ldStride(scLdk, "ldk", e.size)
	f.ld(scN, "n", "")
	f.ld(scD, "d", "")
	if e.bits == 4 {
		f.q4Consts(scQ4Mask, scQ4Eight)
	}
	if e.size == 1 {
		// fp8: the scratch in v10 (the scales' registers, unused), the
		// constants in q4_0's.
		f.fp8 = fp8Regs{t: 10, nan: scQ4Mask, k256: scQ4Eight}
		f.fp8Consts(f.fp8)
	}
}

// scoresGroup is the loop over groups of w keys of a scores kernel for mr
// query rows, its labels prefixed by tag. Its vector registers: the keys'
// values in v0-v7 (two per key), Q's in v8, v9, the block scales from
// v10, q4_0's constants in v14, v15 and the accumulators from v16, hs per
// row and key.
type scoresGroup struct {
	f   *file
	e   delem
	mr  int
	hs  int // accumulators per row and key: 2 for mr <= 2, else 1
	w   int // keys side by side
	tag string
}

// acc is accumulator h of row r and key j.
func (g scoresGroup) acc(r, j, h int) V { return V(16 + (r*g.w+j)*g.hs + h%g.hs) }

// kr is half h (elements 4h..4h+3 of a step) of key j's values.
func (g scoresGroup) kr(j, h int) V { return V(2*j + h) }

// sc is the scale of key j's current block (q8_0, q4_0).
func (g scoresGroup) sc(j int) V { return V(10 + j) }

// emit emits the loop: while at least w keys are left, zero the
// accumulators, multiply along d, fold and store the group's columns of S
// and move to the next group.
func (g scoresGroup) emit() {
	f := g.f
	next := g.tag + "End"
	f.label(g.tag)
	f.i("CMP $%d, %s", g.w, scN)
	f.i("BLT %s", next)
	g.zero()
	g.rowPointers()
	if g.e.quant() {
		g.qBlocks()
	} else {
		g.elemSteps()
	}
	g.foldStore()
	g.advance()
	f.label(next)
}

// zero clears the accumulators.
func (g scoresGroup) zero() {
	for r := 0; r < g.mr; r++ {
		for j := 0; j < g.w; j++ {
			for h := 0; h < g.hs; h++ {
				g.f.w(movi0(g.acc(r, j, h)))
			}
		}
	}
}

// rowPointers points scQRows at Q's rows and scKRows at the group's keys.
func (g scoresGroup) rowPointers() {
	f := g.f
	f.i("MOVD %s, %s", scQ, scQRows[0])
	for r := 1; r < g.mr; r++ {
		f.i("ADD %s<<2, %s, %s", scD, scQRows[r-1], scQRows[r])
	}
	f.i("MOVD %s, %s", scK, scKRows[0])
	for j := 1; j < g.w; j++ {
		f.i("ADD %s, %s, %s", scLdk, scKRows[j-1], scKRows[j])
	}
}

// step multiplies cnt (8, 4 or 1) elements of each key, loaded by
// load(j), by the same elements of every row of Q into the accumulators.
func (g scoresGroup) step(cnt int, load func(j int)) {
	f := g.f
	for j := 0; j < g.w; j++ {
		load(j)
	}
	for r := 0; r < g.mr; r++ {
		switch cnt {
		case 8:
			f.i("FLDPQ.P 32(%s), (F%d, F%d)", scQRows[r], scVQ0, scVQ1)
		case 4:
			f.i("FMOVQ.P 16(%s), F%d", scQRows[r], scVQ0)
		default:
			f.i("FMOVS.P 4(%s), F%d", scQRows[r], scVQ0)
		}
		for j := 0; j < g.w; j++ {
			f.w(fmla(g.acc(r, j, 0), scVQ0, g.kr(j, 0)))
			if cnt == 8 {
				f.w(fmla(g.acc(r, j, 1), scVQ1, g.kr(j, 1)))
			}
		}
	}
}

// qBlocks emits the loop along d of a q8_0 or q4_0 cache: per block of
// 32, each key's scale, then four steps of 8 values widened and scaled.
// q8_0 reads the step's 8 int8 (one LDR D, post-indexed); q4_0 reads 8
// code bytes, bytes 0-7 then 8-15 of the block twice (low nibbles: values
// 0-15, then high nibbles: values 16-31), two more instructions per step
// (q4Codes) than q8_0.
func (g scoresGroup) qBlocks() {
	f, e := g.f, g.e
	f.i("LSR $5, %s, %s", scD, scPc)
	f.label(g.tag + "Block")
	for j := 0; j < g.w; j++ {
		f.loadQ8Scale(g.sc(j), fmt.Sprintf("(%s)", scKRows[j]), scT)
		f.i("ADD $2, %s", scKRows[j])
	}
	for sub := 0; sub < 4; sub++ {
		g.step(8, func(j int) {
			k := g.kr(j, 0)
			if e.bits == 4 {
				f.i("FMOVD %d(%s), F%d", 8*(sub%2), scKRows[j], k)
				f.q4Codes(k, k, sub >= 2, scQ4Mask, scQ4Eight)
			} else {
				f.i("FMOVD.P 8(%s), F%d", scKRows[j], k)
			}
			f.widenQ8([]V{k, g.kr(j, 1)}, 2, g.sc(j))
		})
	}
	if e.bits == 4 {
		for j := 0; j < g.w; j++ {
			f.i("ADD $16, %s", scKRows[j])
		}
	}
	f.i("SUBS $1, %s, %s", scPc, scPc)
	f.i("BNE %sBlock", g.tag)
}

// elemSteps emits the loop along d of a float32 or 16-bit cache: steps of
// 8 elements, then one of 4 if d mod 8 >= 4, then single elements.
func (g scoresGroup) elemSteps() {
	f, e, tag := g.f, g.e, g.tag
	f.i("LSR $3, %s, %s", scD, scPc)
	f.i("CBZ %s, %sHalf", scPc, tag)
	f.label(tag + "Step")
	g.step(8, func(j int) { f.loadElems(e, []V{g.kr(j, 0), g.kr(j, 1)}, scKRows[j], 0, 8*e.size, 8, scT) })
	f.i("SUBS $1, %s, %s", scPc, scPc)
	f.i("BNE %sStep", tag)
	f.label(tag + "Half")
	f.i("TBZ $2, %s, %sOne", scD, tag)
	g.step(4, func(j int) { f.loadElems(e, []V{g.kr(j, 0)}, scKRows[j], 0, 4*e.size, 4, scT) })
	f.label(tag + "One")
	f.i("AND $3, %s, %s", scD, scPc)
	f.i("CBZ %s, %sFold", scPc, tag)
	f.label(tag + "OneLoop")
	g.step(1, func(j int) { f.loadElems(e, []V{g.kr(j, 0)}, scKRows[j], 0, e.size, 1, scT) })
	f.i("SUBS $1, %s, %s", scPc, scPc)
	f.i("BNE %sOneLoop", tag)
	f.label(tag + "Fold")
}

// foldStore folds and stores the accumulators row by row.
func (g scoresGroup) foldStore() {
	f := g.f
	f.i("MOVD %s, %s", scS, scT2)
	for r := 0; r < g.mr; r++ {
		g.foldRow(r)
		if r < g.mr-1 {
			f.i("ADD %s, %s", scLds, scT2)
		}
	}
}

// foldRow adds up row r's accumulators by an FADDP tree into
// [S[r][j0..j0+w)] and stores it at scT2.
func (g scoresGroup) foldRow(r int) {
	f := g.f
	if g.hs == 2 {
		for j := 0; j < g.w; j++ {
			f.w(fadd(g.acc(r, j, 0), g.acc(r, j, 0), g.acc(r, j, 1)))
		}
	}
	a := func(j int) V { return g.acc(r, j, 0) }
	switch g.w {
	case 4:
		f.w(faddp(a(0), a(0), a(1)))
		f.w(faddp(a(2), a(2), a(3)))
		f.w(faddp(a(0), a(0), a(2)))
		f.i("FMOVQ F%d, (%s)", a(0), scT2)
	case 2:
		f.w(faddp(a(0), a(0), a(1)))
		f.w(faddp(a(0), a(0), a(0)))
		f.i("FMOVD F%d, (%s)", a(0), scT2)
	case 1:
		f.w(faddp(a(0), a(0), a(0)))
		f.w(faddpS(a(0), a(0)))
		f.i("FMOVS F%d, (%s)", a(0), scT2)
	}
}

// advance moves S, K and the key count past the group and loops.
func (g scoresGroup) advance() {
	f := g.f
	f.i("ADD $%d, %s", 4*g.w, scS)
	if g.w == 1 {
		f.i("ADD %s, %s", scLdk, scK)
	} else {
		f.i("ADD %s<<%d, %s, %s", scLdk, map[int]int{2: 1, 4: 2}[g.w], scK, scK)
	}
	f.i("SUB $%d, %s", g.w, scN)
	f.i("B %s", g.tag)
}
