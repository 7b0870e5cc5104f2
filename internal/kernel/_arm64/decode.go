package main

import "fmt"

// The decode kernels: attention products that read a KV cache in place, in
// its storage type, for a few query rows (see kernel.Decode).
//
//	scores<T>M<mr>NEON  S[r][j] = Σ_p Q[r][p]·K[j][p]     r < mr, j < n
//	accum<T>M<mr>NEON   O[r][c] += Σ_j P[r][j]·V[j][c]    r < mr, c < d
//	readSumNEON         the wrapping sum of the uint32 words of a buffer
//
// T is F32, BF16 and F16 (widened in registers by SHLL #16 and FCVTL) or
// Q8 (q8_0 blocks: an fp16 scale then 32 int8, widened by SSHLL twice and
// SCVTF and multiplied by the scale, exactly). mr is 1, 2, 4 or 8; the Go
// wrappers (decode_arm64.go) split other row counts into these tiles and
// check every precondition. No kernel reads outside the rows it is given:
// the head dimension's tail (d mod 8) is read four elements, then one
// element at a time.
//
// scores: keys in groups of w (4; 2 for mr = 8) read side by side, eight
// elements per step (one LDP Q of float32, one LDR Q of 16-bit values, one
// LDR D of int8 per key), Q's rows loaded per step (LDP Q, post-indexed)
// and multiplied into mr·w accumulators (two per pair for mr <= 2, so
// that every tile has 16 independent chains except mr = 1, which has 8),
// folded by FADDP trees at the end of the group into [S[r][j0..j0+w)].
// Per step of a 4-row tile: 4 key loads (+8 widening instructions for
// 16-bit caches, +28 for q8), 4 Q loads, 32 FMLA.
//
// accum: keys in blocks of 32; for each block, O's columns in chunks of cw
// vectors (8 for mr <= 2, 4 for mr = 4, 2 for mr = 8; then halves, then
// single columns), each chunk's mr×cw tile of O held in 16 (mr = 1: 8)
// accumulators across the block's keys, so the block of V rows is read
// from memory once and from L1 for the other chunks. P is read four keys
// at a time (one LDR Q per row) and used by element. Per key of a 4-row
// tile: one load of 16 cache values (+ widening), 16 FMLA by element.
//
// Ceilings (Neoverse V2 / Apple M, estimated): one query row is bound by
// memory bandwidth for float32 and 16-bit caches (the loop issues one
// FMLA per 4 cached values, far above DRAM speed); from 4 rows on the
// float32 kernels are FMA-bound at ≈ 0.8 of the peak (16 chains, one load
// per two FMLA), the 16-bit ones ≈ 0.7 (one widening instruction per FMLA
// pair), q8_0 ≈ 0.4 (int8 to float32 costs 3.5 instructions per vector).

type delem struct {
	name   string
	goType string
	size   int // bytes per element; 0 for q8_0
	bf16   bool
}

var delems = []delem{
	{"F32", "float32", 4, false},
	{"BF16", "uint16", 2, true},
	{"F16", "uint16", 2, false},
	{"Q8", "byte", 0, false},
}

func (e delem) q8() bool { return e.size == 0 }

const (
	q8Values = 32
	q8Bytes  = 34
)

// widen16 widens the 16-bit values in the low (upper: high) four lanes of
// n into d as float32.
func (f *file) widen16(e delem, d, n V, upper bool) {
	switch {
	case e.bf16 && upper:
		f.w(shll2(d, n))
	case e.bf16:
		f.w(shll(d, n))
	case upper:
		f.w(fcvtl2(d, n))
	default:
		f.w(fcvtl(d, n))
	}
}

// loadElems loads cnt (1, 4 or 8) consecutive elements of a float32 or
// 16-bit row at addr (a Go memory operand; post is the post-increment in
// bytes or 0) as float32 into dst[0] (and dst[1] for 8). One element
// leaves lanes 1-3 zero. tmp is a scratch general register.
func (f *file) loadElems(e delem, dst []V, base string, off, post int, cnt int, tmp string) {
	mem := fmt.Sprintf("%d(%s)", off, base)
	suffix := ""
	if post != 0 {
		suffix = ".P"
		mem = fmt.Sprintf("%d(%s)", post, base)
	}
	switch {
	case e.size == 4 && cnt == 8:
		f.i("FLDPQ%s %s, (F%d, F%d)", suffix, mem, dst[0], dst[1])
	case e.size == 4 && cnt == 4:
		f.i("FMOVQ%s %s, F%d", suffix, mem, dst[0])
	case e.size == 4:
		f.i("FMOVS%s %s, F%d", suffix, mem, dst[0])
	case cnt == 8:
		f.i("FMOVQ%s %s, F%d", suffix, mem, dst[0])
		f.widen16(e, dst[1], dst[0], true)
		f.widen16(e, dst[0], dst[0], false)
	case cnt == 4:
		f.i("FMOVD%s %s, F%d", suffix, mem, dst[0])
		f.widen16(e, dst[0], dst[0], false)
	default:
		f.i("MOVHU%s %s, %s", suffix, mem, tmp)
		f.i("FMOVS %s, F%d", tmp, dst[0])
		f.widen16(e, dst[0], dst[0], false)
	}
}

// widenQ8 widens the int8 values in the low 4·cnt bytes of dst[0] (cnt
// 1 or 2: 4 or 8 bytes) or, for cnt 4, of dst[2] (16 bytes) into cnt
// float32 vectors dst[0..cnt) multiplied by lane 0 of sc.
func (f *file) widenQ8(dst []V, cnt int, sc V) {
	switch cnt {
	case 1:
		f.w(sshll(b8, dst[0], dst[0], 0))
		f.w(sshll(h4, dst[0], dst[0], 0))
	case 2:
		f.w(sshll(b8, dst[0], dst[0], 0))
		f.w(sshll2(h8, dst[1], dst[0], 0))
		f.w(sshll(h4, dst[0], dst[0], 0))
	case 4:
		f.w(sshll(b8, dst[0], dst[2], 0))
		f.w(sshll2(b16, dst[2], dst[2], 0))
		f.w(sshll2(h8, dst[1], dst[0], 0))
		f.w(sshll(h4, dst[0], dst[0], 0))
		f.w(sshll2(h8, dst[3], dst[2], 0))
		f.w(sshll(h4, dst[2], dst[2], 0))
	default:
		panic("widenQ8")
	}
	for _, v := range dst[:cnt] {
		f.w(scvtf(v, v))
	}
	for _, v := range dst[:cnt] {
		f.w(fmulE(v, v, sc, 0))
	}
}

// loadQ8Scale loads the fp16 scale at addr into lane 0 of sc as float32.
func (f *file) loadQ8Scale(sc V, mem, tmp string) {
	f.i("MOVHU %s, %s", mem, tmp)
	f.i("FMOVS %s, F%d", tmp, sc)
	f.w(fcvtl(sc, sc))
}

// ---------------------------------------------------------------------------
// Scores.

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

// cacheDoc is the second doc line of a scores or accum kernel.
func cacheDoc(e delem, ld, row string) string {
	if e.q8() {
		return ld + " is the " + row + " row stride in bytes (rows of d/32 blocks of 34 bytes); d is a positive multiple of 32, n >= 1; all accesses are in bounds."
	}
	return ld + " is the " + row + " row stride in elements; d, n >= 1; all accesses are in bounds."
}

// ---------------------------------------------------------------------------
// Accum.

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

// genReadSum emits readSumNEON: the wrapping sum of the uint32 words of b
// (len a positive multiple of 256): 128 bytes per step (two LD1 of four
// registers) into eight accumulators.
func genReadSum(f *file) {
	f.text("readSumNEON", "func(b []byte) uint32",
		"readSumNEON returns the wrapping sum of the little-endian uint32 words of b;",
		"len(b) is a positive multiple of 256.")
	f.ld("R0", "b", "base")
	f.ld("R1", "b", "len")
	for v := V(16); v < 24; v++ {
		f.w(movi0(v))
	}
	f.label("loop")
	f.i("VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]")
	f.i("VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]")
	for v := V(0); v < 8; v++ {
		f.w(vadd(s4, 16+v, 16+v, v))
	}
	f.i("SUBS $128, R1, R1")
	f.i("BNE loop")
	for v := V(0); v < 4; v++ {
		f.w(vadd(s4, 16+v, 16+v, 20+v))
	}
	f.w(vadd(s4, 16, 16, 17))
	f.w(vadd(s4, 18, 18, 19))
	f.w(vadd(s4, 16, 16, 18))
	f.w(addv(16, 16))
	f.i("FMOVS F16, R2")
	f.i("MOVW R2, %s", f.arg("ret", ""))
	f.ret()
}

func genDecode(f *file) {
	for _, e := range delems {
		for mr := 1; mr <= 8; mr *= 2 {
			genScores(f, e, mr)
		}
		for mr := 1; mr <= 8; mr *= 2 {
			genAccum(f, e, mr)
		}
	}
	genReadSum(f)
}
