package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The decode kernels (see decode.go): scores<T>M<mr><ISA>, S = Q·Kᵀ.

// scoresGen holds the state of one scores function being generated.
type scoresGen struct {
	s  isa
	e  decodeElem
	mr int

	kmask Register     // AVX-512: opmask of the first t lanes (t = d mod 16)
	qc    *quantConsts // AVX-512 q8_0, q4_0: scale slots (one per key of a group), q4_0 table
	wmask VecVirtual   // AVX2: mask of the last t of the 8 window lanes

	// Frame slots: &S[0][j0], &K[j0][0], keys left, steps per row and
	// (AVX2) the window rewinds of a key row and of a Q row in bytes.
	sp, kb, nLeft, steps, rewK, rewQ Mem

	// The multi-head kernels (genScoresGroup): ldk is the slot of the row
	// stride (ldk, or hs for the heads), and the frame slots of the Q row
	// of the next key and its head number.
	heads bool
	group bool // genScoresGroup, mr > 1: mr rows per head, w heads per block
	// gk is the number of keys of a block of the loop being generated
	// (groupScoresKeys for the main loop of a group kernel, else 1): a
	// block takes w/gk heads of gk consecutive keys.
	gk         int
	ldk        Mem
	qCur, hCur Mem
	// The output position of the multi-head kernels: &s[h][j] of the next
	// row, h, &s[0][j], and a 64-byte buffer for a folded vector.
	oPtr, oHead, oKey, oBuf Mem
}

// stepElems is the number of elements of d one step of the p loop covers.
func (g *scoresGen) stepElems() int {
	if g.e.quant() {
		return quantValues
	}
	return g.s.Lanes
}

// stepKBytes is the number of bytes of a key row one step covers.
func (g *scoresGen) stepKBytes() int {
	if g.e.quant() {
		return g.e.blockBytes()
	}
	return g.s.Lanes * g.e.Size
}

// numRegs is the number of vector registers of the ISA.
func numRegs(s isa) int {
	if s.EVEX {
		return 32
	}
	return 16
}

func genScores(s isa, e decodeElem, mr int) {
	name := fmt.Sprintf("scores%sM%d%s", e.Name, mr, s.Suffix)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(s []float32, lds int, q []float32, k []%s, ldk, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets s[r*lds+j] = Σ_p q[r*d+p]·k[j*ldk+p] for r < %d, j < n, p < d;", name, mr),
		cacheDoc(s, e, "ldk", "key"))

	g := &scoresGen{s: s, e: e, mr: mr, ldk: slot(Param("ldk"))}
	g.body()
}

// genScoresGroup generates the multi-head form of the mr-row kernel
// scores<T>M<mr><ISA> (mr query rows per KV head): n rows at k, hs apart
// (the rows of consecutive heads of a cache whose heads lie side by side,
// then of the next key: row v is key v/heads of head h = v%heads),
// multiplied by Q rows h·mr … h·mr+mr-1, the sums stored at
// s[(h·mr+r)*lds+v/heads]. Each sum gets exactly the arithmetic of
// scores<T>M<mr><ISA>; only the Q rows change from row to row, so that the
// cache is read in address order.
//
// mr = 1 is scoresHeads<T><ISA> (multi-head attention): a block takes
// L cache rows, the Q row moving on (and back to head 0) row by row, so
// any heads >= 1 will do. mr > 1 is scoresGroup<T>M<mr><ISA>
// (grouped-query attention): a block takes the rows of L/mr consecutive
// heads of one key (heads is a multiple of that) where scores<T>M<mr><ISA>
// takes L/mr keys of one head.
//
// Where the AVX-512 q8_0 4-row kernel's time goes (Zen 4, 32/8 heads,
// d = 128): perf of flashattn bench -mode decode puts 53% of the decode's
// samples here, 44% in accumGroupQ8M4AVX512 and 3% in the softmax and Go
// glue between them; of this kernel's, 70% in the step loop and 30% after
// it (the fold, the scatter, the next block's setup). llvm-mca -mcpu=znver4:
// 40.1 cycles per step (bound 40: 32 FMAs and 8 VMULPS on FP0/FP1;
// VPMOVSXBD on FP2, VCVTDQ2PS on FP2/FP3), 205 per block of 4 steps with
// the fold and scatter (FP1 198: the fold's 24 VSHUFF32X4 also take FP1);
// as ymm (the Zen 5 proxy) 26.7 per step and 152 per block. Builds with
// parts cut out (wrong sums, self-check off; BenchmarkDecode group-scores
// with 8 heads of 2048 keys, in cache, cycles of this kernel, medians of 4
// alternated runs under load): 20% fewer without the scale multiply, 10%
// without the fold, 5% without the widening. Tried and not kept (no gain
// beyond the noise, 2961 against 2988 and 2996 samples): the scatter as
// one VMOVLPS/VMOVHPS per S row straight from the folded vector's 128-bit
// groups instead of the round trip through oBuf, and, on top of it, the
// fold256 level as one VALIGND and two adds (the second merge-masked to
// the upper half: the same sums with the same first operands) instead of
// two VSHUFF32X4 and one add, which takes the fold off FP1 in the model.
func genScoresGroup(s isa, e decodeElem, mr int) {
	name := fmt.Sprintf("scoresGroup%sM%d%s", e.Name, mr, s.Suffix)
	doc := fmt.Sprintf("%s sets s[(h*%d+r)*lds+v/heads] = Σ_p q[(h*%d+r)*d+p]·k[v*hs+p], h = v%%heads, for r < %d, v < n, p < d, bit for bit as scores%sM%d%s;", name, mr, mr, mr, e.Name, mr, s.Suffix)
	pre := fmt.Sprintf(" heads is a multiple of %d and n of heads.", s.Lanes/mr)
	if mr == 1 {
		name = fmt.Sprintf("scoresHeads%s%s", e.Name, s.Suffix)
		doc = fmt.Sprintf("%s sets s[(v%%heads)*lds+v/heads] = Σ_p q[(v%%heads)*d+p]·k[v*hs+p] for v < n, p < d, bit for bit as scores%sM1%s;", name, e.Name, s.Suffix)
		pre = " heads >= 1."
	}
	TEXT(name, NOSPLIT, fmt.Sprintf("func(s []float32, lds int, q []float32, heads int, k []%s, hs, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(doc, cacheDoc(s, e, "hs", "key")+pre)
	g := &scoresGen{s: s, e: e, mr: mr, ldk: slot(Param("hs")), heads: true, group: mr > 1}
	g.qCur, g.hCur = AllocLocal(8), AllocLocal(8)
	g.oPtr, g.oHead, g.oKey, g.oBuf = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(64)
	q0 := Load(Param("q").Base(), GP64())
	MOVQ(q0, g.qCur)
	s0 := Load(Param("s").Base(), GP64())
	MOVQ(s0, g.oPtr)
	MOVQ(s0, g.oKey)
	z := GP64()
	XORQ(z, z)
	MOVQ(z, g.hCur)
	MOVQ(z, g.oHead)
	g.body()
}

// scatterGroup stores the sums of v (lane r·w+jj: row r of head
// h+jj/gk for key j+jj%gk, h the block's first head and j its first key)
// at s[(h+jj/gk)·mr+r][j+jj%gk], then moves on to the next w/gk heads,
// or to the first head of the next gk keys.
func (g *scoresGen) scatterGroup(v VecVirtual, w int) {
	gk := g.gk
	s, mr := g.s, g.mr
	if s.EVEX && mr*w == 16 {
		VMOVUPS(v, g.oBuf)
	} else {
		VMOVUPS(v.AsY(), g.oBuf)
	}
	op, h, oj := ldMem(g.oPtr), ldMem(g.oHead), ldMem(g.oKey)
	lds := Load(Param("lds"), GP64())
	SHLQ(Imm(2), lds)
	for hh := 0; hh < w/gk; hh++ {
		for r := 0; r < mr; r++ {
			for kk := 0; kk < gk; kk++ {
				x := GP32()
				MOVL(g.oBuf.Offset(4*(r*w+hh*gk+kk)), x)
				MOVL(x, Mem{Base: op, Disp: 4 * kk})
			}
			ADDQ(lds, op)
		}
	}
	ADDQ(U32(w/gk), h)
	nextKeyAt(op, h, oj, gk, slot(Param("heads")))
	MOVQ(op, g.oPtr)
	MOVQ(h, g.oHead)
	MOVQ(oj, g.oKey)
}

// scatter stores the w sums of v (lane i: the row i of the block) at
// their places s[h][j], h and j following from row to row.
func (g *scoresGen) scatter(v VecVirtual, w int) {
	s := g.s
	switch {
	case w == 1:
		VMOVSS(v.AsX(), g.oBuf)
	case s.EVEX && w == 16:
		VMOVUPS(v, g.oBuf)
	default:
		VMOVUPS(v.AsY(), g.oBuf)
	}
	op, h, oj := ldMem(g.oPtr), ldMem(g.oHead), ldMem(g.oKey)
	lds := Load(Param("lds"), GP64())
	heads := Load(Param("heads"), GP64())
	for i := 0; i < w; i++ {
		x := GP32()
		MOVL(g.oBuf.Offset(4*i), x)
		MOVL(x, Mem{Base: op})
		// Next row: the next head (one S row on), or the first head of
		// the next key.
		LEAQ(Mem{Base: op, Index: lds, Scale: 4}, op)
		INCQ(h)
		nextKeyAt(op, h, oj, 1, heads)
	}
	MOVQ(op, g.oPtr)
	MOVQ(h, g.oHead)
	MOVQ(oj, g.oKey)
}

// nextKeyAt emits: if h == heads { oj += 4·keys; op = oj; h = 0 } — after
// the last head of a key's rows, the output moves on to the first head of
// the next keys (S column oj, 4 bytes a key), branch-free.
func nextKeyAt(op, h, oj Register, keys int, heads Op) {
	nk := GP64()
	LEAQ(Mem{Base: oj, Disp: 4 * keys}, nk)
	z := GP64()
	XORQ(z, z)
	CMPQ(h, heads)
	CMOVQEQ(nk, oj)
	CMOVQEQ(nk, op)
	CMOVQEQ(z, h)
}

// body emits the function body of a scores kernel after its TEXT.
func (g *scoresGen) body() {
	s, e, mr := g.s, g.e, g.mr
	g.sp, g.kb, g.nLeft, g.steps = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	MOVQ(Load(Param("s").Base(), GP64()), g.sp)
	MOVQ(Load(Param("k").Base(), GP64()), g.kb)
	MOVQ(Load(Param("n"), GP64()), g.nLeft)
	d := Load(Param("d"), GP64())
	steps := GP64()
	MOVQ(d, steps)
	SHRQ(Imm(uint64(log2(g.stepElems()))), steps)
	MOVQ(steps, g.steps)
	if !e.quant() {
		t := GP64()
		MOVQ(d, t)
		ANDQ(Imm(uint64(s.Lanes-1)), t)
		if s.EVEX {
			g.kmask = tailMask(t)
		} else {
			g.wmask = windowMask(t)
			g.rewK, g.rewQ = AllocLocal(8), AllocLocal(8)
			rw := windowRewind(t)
			rk := GP64()
			MOVQ(rw, rk)
			SHLQ(Imm(uint64(log2(e.Size))), rk)
			MOVQ(rk, g.rewK)
			SHLQ(Imm(2), rw)
			MOVQ(rw, g.rewQ)
		}
	}

	w := s.Lanes / mr
	// A group kernel of one key a block reads every Q operand from
	// memory (mr rows per head of the block: mr·w rows), so the scale
	// slots' store and loads do not pay there: it takes the scale in a
	// register like a kernel of mr·w rows (q8_0 on Zen 4, group-scores of
	// BenchmarkDecode: 1.02-1.2× the speed with slots, 5 of 6 alternated
	// runs under load). With two keys a block (groupScoresKeys) it loads
	// half as much and the slots pay again (flashattn bench, q8_0 GQA
	// 32/8, alternated under load: 9.4 GB/s with slots, 9.3 without, 8.6
	// at one key a block).
	slotRows := mr
	if g.group && groupScoresKeys(s, e, mr, true) == 1 {
		slotRows = mr * w
	}
	g.qc = newQuantConsts(s, e, slotRows, scoresGroup(mr, w))
	g.keyLoop(w, groupScoresKeys(s, e, mr, g.group), "main")
	if w > 1 {
		g.keyLoop(1, 1, "rest")
	}
	Label("done")
	VZEROUPPER()
	RET()
}

// cacheDoc is the second line of the doc comment of a scores or accum
// kernel: the cache row stride ld (of a key or value row) and the
// preconditions on d and n.
func cacheDoc(s isa, e decodeElem, ld, row string) string {
	stride, pre := ld+" is the "+row+" row stride in elements", "d >= 1"
	switch {
	case e.quant():
		stride, pre = fmt.Sprintf("%s is the %s row stride in bytes (rows of d/32 blocks of %d bytes)", ld, row, e.blockBytes()), "d is a positive multiple of 32"
	case !s.EVEX:
		pre = "d >= 8"
	}
	return stride + "; " + pre + ", n >= 1, and all accesses are in bounds."
}

// tailMask returns the opmask of the first t lanes.
func tailMask(t Register) Register {
	k := K()
	tab := GP64()
	LEAQ(decMask16, tab)
	KMOVW(Mem{Base: tab, Index: t, Scale: 2}, k)
	return k
}

// windowMask returns the ymm mask of the last t of 8 lanes.
func windowMask(t Register) VecVirtual {
	tab := GP64()
	LEAQ(decMask8, tab)
	m := YMM()
	VMOVUPS(Mem{Base: tab, Index: t, Scale: 4, Disp: 32}, m)
	return m
}

// firstMask returns the ymm mask of the first t of 8 lanes (t in a
// register, 0 <= t <= 8).
func firstMask(t Register) VecVirtual {
	u := GP64()
	MOVQ(U32(8), u)
	SUBQ(t, u)
	tab := GP64()
	LEAQ(decMask8, tab)
	m := YMM()
	VMOVUPS(Mem{Base: tab, Index: u, Scale: 4}, m)
	return m
}

// windowRewind returns (8-t) mod 8 in a new register: the number of
// elements the window of the last 8 starts before the tail (0: no tail).
func windowRewind(t Register) GPVirtual {
	rw := GP64()
	MOVQ(U32(8), rw)
	SUBQ(t, rw)
	ANDQ(Imm(7), rw)
	return rw
}

// keyLoop emits: while keys left >= w { S[:, j0:j0+w] = Q·K[j0:j0+w]ᵀ }.
// The keys of a block are taken one after the other, each row read from
// start to end (w rows read side by side defeat the hardware prefetchers),
// into its own mr accumulators; the w·mr accumulators are folded together
// at the end of the block. A group kernel's block (the cache rows of w
// heads of a key) takes, with gk > 1, w/gk heads of gk keys, while at
// least gk keys are left at the block's first head (then the rest go
// row by row).
func (g *scoresGen) keyLoop(w, gk int, lbl string) {
	s, e, mr := g.s, g.e, g.mr
	g.gk = gk
	end := lbl + "End"
	if w == 1 {
		end = "done"
	}
	Label(lbl)
	if gk > 1 {
		// Rows left >= gk·(heads − the block's first head).
		t := Load(Param("heads"), GP64())
		SUBQ(g.hCur, t)
		IMUL3Q(U8(gk), t, t)
		CMPQ(g.nLeft, t)
	} else {
		CMPQ(g.nLeft, U32(w))
	}
	JL(LabelRef(end))

	acc := make([][]VecVirtual, mr)
	for r := range acc {
		acc[r] = make([]VecVirtual, w)
		for jj := range acc[r] {
			acc[r][jj] = s.Vec()
			zero(s, acc[r][jj])
		}
	}
	var kld, kld3 GPVirtual
	if w > 1 {
		kld, kld3 = strides(g.ldk, max(e.Size, 1), w/gk)
	}
	// Row jj of the block (head jj/gk of key jj%gk): ks[jj%gk].mem(jj/gk).
	ks := []rowSet{newRowSet(g.kb, kld, kld3, w/gk)}
	if gk > 1 {
		kst := GP64() // bytes from a key to the next
		MOVQ(g.ldk, kst)
		IMULQ(slot(Param("heads")), kst)
		for kk := 1; kk < gk; kk++ {
			b := GP64()
			MOVQ(g.kb, b)
			for i := 0; i < kk; i++ {
				ADDQ(kst, b)
			}
			ks = append(ks, newRowSet(b, kld, kld3, w/gk))
		}
	}
	grp := scoresGroup(mr, w)
	for j0 := 0; j0 < w; j0 += grp {
		kl := fmt.Sprintf("%sK%d", lbl, j0)
		qRows := mr // the Q rows of the keys jjs: mr, or mr per head (group)
		if g.group {
			qRows = mr * grp / gk
		}
		var qld, qld3 GPVirtual
		if qRows > 1 {
			qld, qld3 = strides(slot(Param("d")), 4, qRows)
		}
		qRow := slot(Param("q").Base())
		if g.heads {
			qRow = g.qCur
		}
		qs := newRowSet(qRow, qld, qld3, qRows)
		var jjs []int
		var kps []Register
		for jj := j0; jj < j0+grp; jj++ {
			kp := GP64()
			LEAQ(ks[jj%gk].mem(jj/gk, 0), kp)
			jjs, kps = append(jjs, jj), append(kps, kp)
		}
		pfd := GP64() // bytes from a key row to the one it prefetches
		MOVQ(g.ldk, pfd)
		SHLQ(Imm(uint64(log2(max(e.Size, 1))+log2(scoresPrefetchRows(e)))), pfd)
		steps := GP64()
		MOVQ(g.steps, steps)
		TESTQ(steps, steps)
		JZ(LabelRef(kl + "Tail"))
		Label(kl + "Step")
		for _, kp := range kps {
			PREFETCHT1(Mem{Base: kp, Index: pfd, Scale: 1})
		}
		g.step(acc, w, jjs, qs, kps, nil, false)
		qs.add(U32(4 * g.stepElems()))
		for _, kp := range kps {
			ADDQ(U32(g.stepKBytes()), kp)
		}
		DECQ(steps)
		JNZ(LabelRef(kl + "Step"))

		Label(kl + "Tail")
		if !e.quant() {
			if s.EVEX {
				KORTESTW(g.kmask, g.kmask)
				JZ(LabelRef(kl + "Done"))
				g.step(acc, w, jjs, qs, kps, g.kmask, false)
			} else {
				rk := GP64()
				MOVQ(g.rewK, rk)
				TESTQ(rk, rk)
				JZ(LabelRef(kl + "Done"))
				for _, kp := range kps {
					SUBQ(rk, kp)
				}
				qs.sub(g.rewQ)
				g.step(acc, w, jjs, qs, kps, nil, true)
			}
		}
		Label(kl + "Done")
		if g.heads {
			g.nextHead(grp / gk)
		}
	}

	v := foldTile(s, acc, w)
	switch {
	case g.group:
		g.scatterGroup(v, w)
	case g.heads:
		g.scatter(v, w)
	default:
		sp := GP64()
		MOVQ(g.sp, sp)
		row := func(int) Mem { return Mem{Base: sp} }
		if mr > 1 {
			lds := GP64()
			MOVQ(slot(Param("lds")), lds)
			SHLQ(Imm(2), lds)
			row = rowMems(sp, lds)
		}
		storeTile(s, v, mr, w, row)
		ADDQ(U32(4*w), g.sp)
	}
	kb := GP64()
	MOVQ(g.kb, kb)
	kst := GP64()
	MOVQ(g.ldk, kst)
	SHLQ(Imm(uint64(log2(max(e.Size, 1))+log2(w/gk))), kst)
	ADDQ(kst, kb)
	if gk > 1 {
		// After the last head (nextHead went back to head 0), past the
		// other gk−1 keys of the block.
		skip, z := GP64(), GP64()
		MOVQ(g.ldk, skip)
		IMULQ(slot(Param("heads")), skip)
		IMUL3Q(U8(gk-1), skip, skip)
		XORQ(z, z)
		CMPQ(g.hCur, U8(0))
		CMOVQNE(z, skip)
		ADDQ(skip, kb)
	}
	MOVQ(kb, g.kb)
	SUBQ(U32(w), g.nLeft)
	JMP(LabelRef(lbl))
	if w > 1 {
		Label(end)
	}
}

// nextHead moves the Q rows of a multi-head kernel on by nh heads (mr
// rows each), back to the first head after the last.
func (g *scoresGen) nextHead(nh int) {
	qc, hc := ldMem(g.qCur), ldMem(g.hCur)
	d := Load(Param("d"), GP64())
	if rows := nh * g.mr; rows == 1 {
		LEAQ(Mem{Base: qc, Index: d, Scale: 4}, qc)
	} else {
		SHLQ(Imm(uint64(2+log2(rows))), d)
		ADDQ(d, qc)
	}
	if nh == 1 {
		INCQ(hc)
	} else {
		ADDQ(U32(nh), hc)
	}
	q0, z := Load(Param("q").Base(), GP64()), GP64()
	XORQ(z, z)
	CMPQ(hc, slot(Param("heads")))
	CMOVQEQ(q0, qc)
	CMOVQEQ(z, hc)
	MOVQ(qc, g.qCur)
	MOVQ(hc, g.hCur)
}

// scoresGroup is the number of keys whose rows a scores kernel for mr
// rows and w keys per block reads side by side: one for a single row (the
// kernel is memory-bound and rows read one after the other stream best),
// else up to 4, so that each Q vector loaded into a register serves
// several keys (a step of one key would load mr Q vectors per mr FMAs and
// be bound by the loads).
func scoresGroup(mr, w int) int {
	if mr == 1 {
		return 1
	}
	return min(w, 4)
}

// groupScoresKeys is the number of keys of a block of the main loop of
// the scores kernel of mr rows (group: the grouped-query form) for the
// cache elements e on s: 2 for the AVX-512 q8_0 group kernels, whose step
// then loads each Q vector of a head once for both keys instead of once
// per FMA (w/2 heads of 2 keys a block), else 1. Measured on Zen 4
// (flashattn bench -mode decode, 32k keys, d = 128, 2 workers, medians of
// series of 5-6 alternated pairs under load): 1.05-1.09× the GB/s at 4
// rows per KV head (32/8), 1.10× at 2 (16/8). The sums are the same bit for bit: each
// accumulator gets the same FMAs in the same order.
func groupScoresKeys(s isa, e decodeElem, mr int, group bool) int {
	if group && s.EVEX && e.Bits == 8 && mr > 1 {
		return 2
	}
	return 1
}

// step emits one step of the p loop of the keys jjs, whose rows are at
// kps: the products of one vector of each row (one q8_0 or q4_0 block: several
// vectors) with the same part of Q's rows. With k set (AVX-512) it is the
// masked tail; with window (AVX2) the tail read as the window of the last 8
// elements, the lanes the full vectors covered cleared in both operands.
func (g *scoresGen) step(acc [][]VecVirtual, w int, jjs []int, qs rowSet, kps []Register, k Register, window bool) {
	s, e, mr := g.s, g.e, g.mr
	regs := numRegs(s)
	tail := k != nil || window
	qload := func(r, disp int) VecVirtual {
		q := s.Vec()
		switch {
		case k != nil:
			VMOVUPS_Z(qs.mem(r, disp), k, q)
		case window:
			VMASKMOVPS(qs.mem(r, disp), g.wmask, q)
		default:
			VMOVUPS(qs.mem(r, disp), q)
		}
		return q
	}
	if e.Bits == 8 && mr == 1 {
		// One row: the block's products summed unscaled, then one FMA
		// by the scale (a multiply per vector fewer).
		for x, jj := range jjs {
			blk := newQuantBlock(s, e, Mem{Base: kps[x]}, g.qc, x)
			if blk.slot != nil {
				blk.scaleMem()
			} else {
				blk.scale()
			}
			t := s.Vec()
			for i := 0; i < quantValues/s.Lanes; i++ {
				kv := blk.raw(i)
				if i == 0 {
					VMULPS(qs.mem(0, 0), kv, t)
				} else {
					VFMADD231PS(qs.mem(0, i*s.Bytes()), kv, t)
				}
			}
			blk.fmaScale(t, acc[0][jj])
		}
		return
	}
	qr := func(jj, r int) int { return r } // the row of qs of key slot jj's row r
	if g.group {
		// qs starts at the Q rows of head jjs[0]/gk (nextHead moves it on
		// after each group of keys).
		qr = func(jj, r int) int { return (jj-jjs[0])/g.gk*mr + r }
	}
	if e.quant() && g.gk > 1 {
		// Each head's Q vectors loaded once, for its gk keys.
		nv := quantValues / s.Lanes
		for x0 := 0; x0 < len(jjs); x0 += g.gk {
			qv := make([][]VecVirtual, mr)
			for r := range qv {
				for i := 0; i < nv; i++ {
					qv[r] = append(qv[r], qload(qr(jjs[x0], r), i*s.Bytes()))
				}
			}
			for x := x0; x < x0+g.gk; x++ {
				blk := newQuantBlock(s, e, Mem{Base: kps[x]}, g.qc, x)
				for i := 0; i < nv; i++ {
					kv := blk.vec(i)
					for r := 0; r < mr; r++ {
						VFMADD231PS(qv[r][i], kv, acc[r][jjs[x]])
					}
				}
			}
		}
		return
	}
	if e.quant() {
		nv := quantValues / s.Lanes
		var qv [][]VecVirtual
		if !g.group && len(jjs) > 1 && mr*nv+mr*w+4 <= regs {
			qv = make([][]VecVirtual, mr)
			for r := range qv {
				for i := 0; i < nv; i++ {
					qv[r] = append(qv[r], qload(r, i*s.Bytes()))
				}
			}
		}
		for x, jj := range jjs {
			blk := newQuantBlock(s, e, Mem{Base: kps[x]}, g.qc, x)
			for i := 0; i < nv; i++ {
				kv := blk.vec(i)
				for r := 0; r < mr; r++ {
					if qv != nil {
						VFMADD231PS(qv[r][i], kv, acc[r][jj])
					} else {
						VFMADD231PS(qs.mem(qr(jj, r), i*s.Bytes()), kv, acc[r][jj])
					}
				}
			}
		}
		return
	}
	if e.Size == 4 && mr == 1 && !tail {
		q := qload(0, 0)
		for x, jj := range jjs {
			VFMADD231PS(Mem{Base: kps[x]}, q, acc[0][jj])
		}
		return
	}
	var qv []VecVirtual
	if !g.group && (len(jjs) > 1 || tail) && mr+mr*w+3 <= regs {
		for r := 0; r < mr; r++ {
			qv = append(qv, qload(r, 0))
		}
	}
	for x, jj := range jjs {
		kv := widen(s, e, Mem{Base: kps[x]}, k)
		if window {
			VANDPS(g.wmask, kv, kv)
		}
		for r := 0; r < mr; r++ {
			switch {
			case qv != nil:
				VFMADD231PS(qv[r], kv, acc[r][jj])
			case tail:
				VFMADD231PS(qload(qr(jj, r), 0), kv, acc[r][jj])
			default:
				VFMADD231PS(qs.mem(qr(jj, r), 0), kv, acc[r][jj])
			}
		}
	}
}
