package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The decode kernels (see decode.go): accum<T>M<mr><ISA>, O += P·V.

// accumGen holds the state of one accum function being generated.
type accumGen struct {
	s     isa
	e     decodeElem
	mr, w int
	vpb   int // vectors per q8_0 or q4_0 block (1 for the other types)
	passN int // passes emitted so far (label names)

	kmask Register     // AVX-512: opmask of the first t lanes (t = d mod 16)
	qc    *quantConsts // AVX-512 q8_0, q4_0: the scale slot, the q4_0 table

	// Frame slots: &O[0][c0] and &V[j0][c0] of the current chunk, &P[0][j0]
	// and &V[j0][0] of the current key block, the keys in it, the keys
	// left (this block included) and the vectors of d left in the sweep.
	oCur, vCur, pBlk, vBlk, jn, nLeft, vecLeft Mem
	// The block of P (mr rows of accumKeyBlock keys, zero beyond the
	// block's keys), copied so that the broadcasts of the key loop read
	// 128-byte rows whatever P's stride (rows 4 KiB apart would all fall
	// in one L1 set).
	pLoc Mem
}

// copyP copies the mr×jn block of P at pBlk into pLoc.
func (g *accumGen) copyP(jn Register) {
	s := g.s
	pb := ldMem(g.pBlk)
	ldp := loadStride("ldp", 4)
	row := rowMems(pb, ldp)
	if g.mr == 1 {
		row = func(int) Mem { return Mem{Base: pb} }
	}
	nv := accumKeyBlock / s.Lanes
	var masks []Register
	for v := 0; v < nv; v++ {
		// Lanes of vector v: clamp(jn - v·L, 0, L).
		t, z, l := GP64(), GP64(), GP64()
		MOVQ(jn, t)
		SUBQ(U32(v*s.Lanes), t)
		XORQ(z, z)
		CMPQ(t, z)
		CMOVQLT(z, t)
		MOVQ(U32(s.Lanes), l)
		CMPQ(t, l)
		CMOVQGT(l, t)
		if s.EVEX {
			masks = append(masks, tailMask(t))
		} else {
			masks = append(masks, firstMask(t))
		}
	}
	for r := 0; r < g.mr; r++ {
		m := row(r)
		for v := 0; v < nv; v++ {
			x := s.Vec()
			if s.EVEX {
				VMOVUPS_Z(m.Offset(v*s.Bytes()), masks[v], x)
			} else {
				VMASKMOVPS(m.Offset(v*s.Bytes()), masks[v], x)
			}
			VMOVUPS(x, g.pLoc.Offset(r*accumKeyBlock*4+v*s.Bytes()))
		}
	}
}

func genAccum(s isa, e decodeElem, mr int) {
	name := fmt.Sprintf("accum%sM%d%s", e.Name, mr, s.Suffix)
	// Not NOSPLIT: the frame holds a copy of a block of P (up to 2 KiB).
	TEXT(name, 0, fmt.Sprintf("func(o []float32, ldo int, p []float32, ldp int, v []%s, ldv, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds Σ_j p[r*ldp+j]·v[j*ldv+c] to o[r*ldo+c] for r < %d, c < d, j < n;", name, mr),
		cacheDoc(s, e, "ldv", "value"))

	g := &accumGen{s: s, e: e, mr: mr, w: s.Lanes / mr, vpb: 1}
	if e.quant() {
		g.vpb = quantValues / s.Lanes
	}
	g.oCur, g.vCur, g.pBlk, g.vBlk = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.jn, g.nLeft, g.vecLeft = AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.pLoc = AllocLocal(mr * accumKeyBlock * 4)
	MOVQ(Load(Param("p").Base(), GP64()), g.pBlk)
	MOVQ(Load(Param("v").Base(), GP64()), g.vBlk)
	MOVQ(Load(Param("n"), GP64()), g.nLeft)
	if s.EVEX && !e.quant() {
		g.kmask = tailMask(dTail(15))
	}
	g.qc = newQuantConsts(s, e, mr, 1)

	Label("block")
	{
		n := keyBlock(g.nLeft, g.jn, accumKeyBlock)
		g.copyP(n)
		MOVQ(Load(Param("o").Base(), GP64()), g.oCur)
		MOVQ(ldMem(g.vBlk), g.vCur)
		d := Load(Param("d"), GP64())
		SHRQ(Imm(uint64(log2(s.Lanes))), d)
		MOVQ(d, g.vecLeft)
	}
	unit := max(g.w, g.vpb)
	Label("full")
	CMPQ(g.vecLeft, U32(unit))
	JL(LabelRef(fmt.Sprintf("chunk%d", unit/2)))
	g.chunk(unit)
	JMP(LabelRef("full"))
	for c := unit / 2; c >= g.vpb; c /= 2 {
		Label(fmt.Sprintf("chunk%d", c))
		CMPQ(g.vecLeft, U32(c))
		JL(LabelRef(fmt.Sprintf("chunk%d", c/2)))
		g.chunk(c)
	}
	Label(fmt.Sprintf("chunk%d", g.vpb/2))
	if !e.quant() {
		dTail(s.Lanes - 1) // ANDQ sets ZF when d has no tail
		JZ(LabelRef("next"))
		g.pass(0, 1, true)
	}

	Label("next")
	{
		jn := GP64()
		MOVQ(g.jn, jn)
		SUBQ(jn, g.nLeft)
		pb := GP64()
		MOVQ(g.pBlk, pb)
		LEAQ(Mem{Base: pb, Index: jn, Scale: 4}, pb)
		MOVQ(pb, g.pBlk)
		ldv := loadStride("ldv", e.Size)
		IMULQ(jn, ldv)
		ADDQ(ldv, g.vBlk)
	}
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// vecBytesV is the number of bytes of a V row that c vectors cover (for
// q8_0 and q4_0, c is a multiple of the vectors per block).
func (g *accumGen) vecBytesV(c int) int {
	if g.e.quant() {
		return c / g.vpb * g.e.blockBytes()
	}
	return c * g.s.Lanes * g.e.Size
}

// prefetchOffsets returns the offsets in a value row of one byte per
// cache line of the columns that a pass over vectors first..first+c-1
// reads (the d tail: its first vector).
func (g *accumGen) prefetchOffsets(first, c int, tail bool) []int {
	var lo, hi int
	switch {
	case g.e.quant():
		bb := g.e.blockBytes()
		lo, hi = first/g.vpb*bb, ((first+c-1)/g.vpb+1)*bb
	case tail:
		lo, hi = 0, g.s.Lanes*g.e.Size
	default:
		lo, hi = first*g.s.Lanes*g.e.Size, (first+c)*g.s.Lanes*g.e.Size
	}
	var offs []int
	for off := lo; off < hi; off += 64 {
		offs = append(offs, off)
	}
	return offs
}

// chunk emits the passes over c vectors of O's columns (for q8_0 and q4_0 with fewer
// vectors per tile than per block, one pass per part of the block) and
// advances the chunk pointers.
func (g *accumGen) chunk(c int) {
	if c > g.w {
		for first := 0; first < c; first += g.w {
			g.pass(first, g.w, false)
		}
	} else {
		g.pass(0, c, false)
	}
	ADDQ(U32(c*g.s.Lanes*4), g.oCur)
	ADDQ(U32(g.vecBytesV(c)), g.vCur)
	SUBQ(U32(c), g.vecLeft)
}

// oRows returns the memory operands of the O tile's rows at the current
// chunk (rewound to the window on the AVX2 tail).
func (g *accumGen) oRows(window bool) func(r int) Mem {
	op := GP64()
	MOVQ(g.oCur, op)
	if window {
		SUBQ(windowRewindD(4), op)
	}
	if g.mr == 1 {
		return func(int) Mem { return Mem{Base: op} }
	}
	ldo := loadStride("ldo", 4)
	return rowMems(op, ldo)
}

// dTail returns d & mask in a new register: with mask = lanes−1, the
// elements of d beyond its last full vector.
func dTail(mask int) GPVirtual {
	t := Load(Param("d"), GP64()).(GPVirtual)
	ANDQ(Imm(uint64(mask)), t)
	return t
}

// windowMaskD loads the AVX2 window mask of the d tail.
func windowMaskD() VecVirtual { return windowMask(dTail(7)) }

// windowRewindD returns the bytes (elements of size bytes) that the AVX2
// window of the d tail starts before the tail.
func windowRewindD(size int) GPVirtual {
	rw := windowRewind(dTail(7))
	SHLQ(Imm(uint64(log2(size))), rw)
	return rw
}

// pass emits one sweep over the keys of the block for vectors
// first..first+c-1 of the current chunk: load the mr×c tile of O, add the
// products of every key, store it. tail: the one masked vector of the d
// tail (AVX-512: opmask; AVX2: the window of the last 8 columns).
func (g *accumGen) pass(first, c int, tail bool) {
	s, e, mr := g.s, g.e, g.mr
	L := s.Lanes
	g.passN++
	lbl := fmt.Sprintf("keys%d", g.passN)
	window := tail && !s.EVEX

	// Load the O tile.
	acc := make([][]VecVirtual, mr)
	g.oTile(acc, first, c, tail, window, true)

	// The keys.
	pl := GP64()
	LEAQ(g.pLoc, pl)
	vr := ldMem(g.vCur)
	if window {
		SUBQ(windowRewindD(e.Size), vr)
	}
	ldv := loadStride("ldv", e.Size)
	pfd := GP64() // bytes from a value row to the one in the next block
	MOVQ(ldv, pfd)
	SHLQ(Imm(uint64(log2(accumKeyBlock))), pfd)
	jc := ldMem(g.jn)
	Label(lbl)
	for _, off := range g.prefetchOffsets(first, c, tail) {
		PREFETCHT1(Mem{Base: vr, Index: pfd, Scale: 1, Disp: off})
	}
	var pv []VecVirtual
	if mr+mr*c+3 <= numRegs(s) {
		for r := 0; r < mr; r++ {
			p := s.Vec()
			VBROADCASTSS(Mem{Base: pl, Disp: r * accumKeyBlock * 4}, p)
			pv = append(pv, p)
		}
	}
	var sc VecVirtual
	var blk *quantBlock
	for i := 0; i < c; i++ {
		x := first + i
		if e.Size == 4 && mr == 1 && !tail {
			VFMADD231PS(Mem{Base: vr, Disp: x * L * 4}, pv[0], acc[0][i])
			continue
		}
		var vv VecVirtual
		if e.quant() && (i == 0 || x%g.vpb == 0) {
			blk = newQuantBlock(s, e, Mem{Base: vr, Disp: x / g.vpb * e.blockBytes()}, g.qc, 0)
		}
		switch {
		case e.Bits == 8 && mr == 1:
			// One row: p times the block's scale once, then the raw
			// values (a multiply per vector fewer).
			if i == 0 || x%g.vpb == 0 {
				if blk.slot != nil {
					sc = s.Vec()
					blk.mulScale(pv[0], sc)
				} else {
					sc = blk.scale()
					VMULPS(pv[0], sc, sc)
				}
			}
			VFMADD231PS(sc, blk.raw(x%g.vpb), acc[0][i])
			continue
		case e.quant():
			vv = blk.vec(x % g.vpb)
		case tail && !window:
			vv = widen(s, e, Mem{Base: vr}, g.kmask)
		default:
			vv = widen(s, e, Mem{Base: vr, Disp: x * L * e.Size}, nil)
		}
		for r := 0; r < mr; r++ {
			switch {
			case pv != nil:
				VFMADD231PS(pv[r], vv, acc[r][i])
			case s.EVEX:
				VFMADD231PS_BCST(Mem{Base: pl, Disp: r * accumKeyBlock * 4}, vv, acc[r][i])
			default:
				p := s.Vec()
				VBROADCASTSS(Mem{Base: pl, Disp: r * accumKeyBlock * 4}, p)
				VFMADD231PS(p, vv, acc[r][i])
			}
		}
	}
	ADDQ(U32(4), pl)
	ADDQ(ldv, vr)
	DECQ(jc)
	JNZ(LabelRef(lbl))

	// Store the O tile.
	g.oTile(acc, first, c, tail, window, false)
}

// oTile loads (load: into new registers appended to acc) or stores the O
// tile of pass: len(acc) rows of c vectors from vector first on, through
// the window mask (window: the AVX2 tail), g.kmask (the EVEX tail) or
// whole.
func (g *accumGen) oTile(acc [][]VecVirtual, first, c int, tail, window, load bool) {
	s := g.s
	L := s.Lanes
	var wm VecVirtual
	if window {
		wm = windowMaskD()
	}
	row := g.oRows(window)
	for r := range acc {
		m := row(r)
		for i := 0; i < c; i++ {
			if load {
				acc[r] = append(acc[r], s.Vec())
			}
			a := acc[r][i]
			switch {
			case window && load:
				VMASKMOVPS(m, wm, a)
			case window:
				VMASKMOVPS(a, wm, m)
			case tail && load:
				VMOVUPS_Z(m, g.kmask, a)
			case tail:
				VMOVUPS(a, g.kmask, m)
			case load:
				VMOVUPS(m.Offset((first+i)*L*4), a)
			default:
				VMOVUPS(a, m.Offset((first+i)*L*4))
			}
		}
	}
}

// genAccumHeads generates accumHeads<T><ISA>, the multi-head form of the
// one-row kernel: n rows at v, hs apart (row r is key r/heads of head
// h = r%heads, as in genScoresGroup of one row), each added to O row h with its
// probability p[h*ldp + r/heads]:
//
//	o[h*ldo+c] += p[h*ldp+j]·v[r*hs+c]    r < n, h = r%heads, j = r/heads, c < d
//
// reading the cache in address order. O rows stay in L1 (loaded, updated
// and stored per row of the cache: the rows of a key belong to different
// heads) and get exactly the operations of accum<T>M1<ISA>, in key order,
// so the results are the same bit for bit. d is a multiple of 16 (the
// wrapper sends other head dimensions to the one-head kernels). Taking a
// head's rows of two keys together for q8_0 (O loaded and stored once for
// both) lost end to end: on Zen 4, flashattn bench -mode decode, 32 heads,
// 32k keys, d = 128, q8_0, alternated under load, 12.2-13.4 GB/s against
// 14.5-15.3 (heads-accum of BenchmarkDecode, one thread: 0.80 against 0.70
// of ReadSum).
func genAccumHeads(s isa, e decodeElem) {
	name := fmt.Sprintf("accumHeads%s%s", e.Name, s.Suffix)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(o []float32, ldo int, p []float32, ldp, heads int, v []%s, hs, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds p[h*ldp+r/heads]·v[r*hs+c] to o[h*ldo+c], h = r%%heads, for r < n, c < d, bit for bit as accum%sM1%s;", name, e.Name, s.Suffix),
		"hs is the value row stride in "+map[bool]string{true: "bytes", false: "elements"}[e.quant()]+"; d is a positive multiple of 16, n >= 1, heads >= 1, and all accesses are in bounds.")

	L := s.Lanes
	qc := newQuantConsts(s, e, 1, 1)
	vpb := 1
	if e.quant() {
		vpb = quantValues / L
	}
	// Per row of the cache: steps of one vector (one block for q8_0 and
	// q4_0) of d.
	stepVals := L * vpb
	stepBytes := L * e.Size
	if e.quant() {
		stepBytes = e.blockBytes()
	}
	nLeft, oh, ph, pj, hc := AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	MOVQ(Load(Param("n"), GP64()), nLeft)
	o0 := Load(Param("o").Base(), GP64())
	MOVQ(o0, oh)
	p0 := Load(Param("p").Base(), GP64())
	MOVQ(p0, ph)
	MOVQ(p0, pj)
	z := GP64()
	XORQ(z, z)
	MOVQ(z, hc)
	vr := Load(Param("v").Base(), GP64())
	hs := Load(Param("hs"), GP64())
	if e.Size > 1 {
		SHLQ(Imm(uint64(log2(e.Size))), hs)
	}
	pfd := GP64() // bytes to the row the prefetches read
	MOVQ(hs, pfd)
	SHLQ(Imm(uint64(log2(scoresPrefetchRows(e)))), pfd)

	Label("row")
	{
		pv := s.Vec()
		pp := ldMem(ph)
		VBROADCASTSS(Mem{Base: pp}, pv)
		op := ldMem(oh)
		steps := Load(Param("d"), GP64())
		SHRQ(Imm(uint64(log2(stepVals))), steps)
		vp := GP64()
		MOVQ(vr, vp)
		Label("step")
		PREFETCHT1(Mem{Base: vp, Index: pfd, Scale: 1})
		var blk *quantBlock
		var sc VecVirtual
		if e.quant() {
			blk = newQuantBlock(s, e, Mem{Base: vp}, qc, 0)
		}
		for i := 0; i < vpb; i++ {
			a := s.Vec()
			om := Mem{Base: op, Disp: i * s.Bytes()}
			VMOVUPS(om, a)
			switch {
			case e.Size == 4:
				VFMADD231PS(Mem{Base: vp}, pv, a)
			case e.Bits == 8:
				if i == 0 {
					if blk.slot != nil {
						sc = s.Vec()
						blk.mulScale(pv, sc)
					} else {
						sc = blk.scale()
						VMULPS(pv, sc, sc)
					}
				}
				VFMADD231PS(sc, blk.raw(i), a)
			case e.quant():
				VFMADD231PS(pv, blk.vec(i), a)
			default:
				VFMADD231PS(pv, widen(s, e, Mem{Base: vp}, nil), a)
			}
			VMOVUPS(a, om)
		}
		ADDQ(U32(stepBytes), vp)
		ADDQ(U32(4*stepVals), op)
		DECQ(steps)
		JNZ(LabelRef("step"))
	}
	// Next row: the next head, or the first head of the next key.
	{
		ADDQ(hs, vr)
		h, o, p := ldMem(hc), ldMem(oh), ldMem(ph)
		INCQ(h)
		ldo := Load(Param("ldo"), GP64())
		LEAQ(Mem{Base: o, Index: ldo, Scale: 4}, o)
		ldp := Load(Param("ldp"), GP64())
		LEAQ(Mem{Base: p, Index: ldp, Scale: 4}, p)
		CMPQ(h, slot(Param("heads")))
		JNE(LabelRef("store"))
		XORQ(h, h)
		MOVQ(Load(Param("o").Base(), GP64()), o)
		pn := ldMem(pj)
		ADDQ(Imm(4), pn)
		MOVQ(pn, pj)
		MOVQ(pn, p)
		Label("store")
		MOVQ(h, hc)
		MOVQ(o, oh)
		MOVQ(p, ph)
	}
	DECQ(nLeft)
	JNZ(LabelRef("row"))
	VZEROUPPER()
	RET()
}

// groupKeys is the number of keys whose value rows of one head the
// grouped-query accum kernels take together (O loaded and stored once for
// them). 8 for q8_0 (the 16 widened V vectors of a step leave no
// registers for P, so the FMAs read it by embedded broadcast) loads and
// stores O half as often but lost: on Zen 4, group-accum of
// BenchmarkDecode, 8 KV heads, d = 128, one thread, alternated under
// load, medians of the ratio to ReadSum 0.49 against 0.56 at m = 4 and
// 0.71 against 0.75 at m = 2 (at m = 8 the registers do not suffice).
const groupKeys = 4

// genAccumGroup generates accumGroup<T>M<mr><ISA>, the multi-head form of
// the mr-row kernel (grouped-query attention: mr query rows per KV head),
// as genAccumHeads is of the one-row kernel: value row j of head h (at
// j·heads·hs + h·hs) is added to O rows h·mr … h·mr+mr-1 with their
// probabilities,
//
//	o[(h*mr+r)*ldo+c] += p[(h*mr+r)*ldp+j]·v[(j*heads+h)*hs+c]    r < mr, j < n, c < d
//
// by blocks of groupKeys keys, every head of a block before the next
// block (the cache read in address order a few rows at a time): each O
// row is loaded, gets its groupKeys FMAs in key order and is stored, the
// operations of accum<T>M<mr><ISA>, so the results are the same bit for
// bit. For q8_0 a step is one block of each of the groupKeys rows (the
// same widening as the mr-row kernel, one scale slot per key); not for
// q4_0.
//
// Folding the block scale into P instead (issue 29: o += (p·d)·v_int, per
// step of 4 rows × 4 keys the 16 products p·d — the 4 keys' fp16 scales
// gathered in a GP register, one VCVTPH2PS, VMULPS by the rows' P —
// stored to the frame and read back by broadcast, the FMAs taking the
// unscaled widened values; accum<T>M4 computing the same products by
// VMULSS, for the same bits) takes the 8 VMULPS of a step off the FMA
// pipes (llvm-mca znver4: 40 → 35 cycles per step with FMAs by embedded
// broadcast; the Zen 5 proxy, ymm on znver4, 24 → 30) but lost on Zen 4:
// group-accum of BenchmarkDecode, m = 4, 8 KV heads, 32k keys, d = 128,
// one thread, alternated under load, medians of the ratio to ReadSum
// 0.42 against 0.51 with the FMAs reading p·d by embedded broadcast,
// 0.40 and 0.38 against 0.51 and 0.40 with the 16 broadcast into
// registers from one zmm store, 0.34 and 0.43 against 0.40 and 0.54 with
// four xmm products and stores; flashattn bench -mode decode, 32/8 heads,
// 32k keys, q8_0, 7 rounds: 0.35 of the read bandwidth against 0.42.
// Not the scales' load latency: read from a constant in the frame
// instead of V, it lost as much (0.43 against 0.54).
func genAccumGroup(s isa, e decodeElem, mr int) {
	name := fmt.Sprintf("accumGroup%sM%d%s", e.Name, mr, s.Suffix)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(o []float32, ldo int, p []float32, ldp, heads int, v []%s, hs, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds p[(h*%d+r)*ldp+j]·v[(j*heads+h)*hs+c] to o[(h*%d+r)*ldo+c] for h < heads, r < %d, j < n, c < d, bit for bit as accum%sM%d%s;", name, mr, mr, mr, e.Name, mr, s.Suffix),
		fmt.Sprintf("hs is the value row stride of a head in %s; d is a positive multiple of 16, n a positive multiple of %d, heads >= 1, and all accesses are in bounds.", map[bool]string{true: "bytes", false: "elements"}[e.quant()], groupKeys))
	kb := groupKeys
	L := s.Lanes
	// A step: vpb vectors of each key's row (one block for q8_0), stepBytes
	// of it.
	vpb, stepBytes := 1, L*e.Size
	if e.quant() {
		vpb, stepBytes = quantValues/L, e.blockBytes()
	}
	qc := newQuantConsts(s, e, mr, kb) // with slots: 1.07× the speed in a register (group-accum, q8_0, Zen 4)
	nLeft, oh, ph, pj, hc := AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	// Rows left: heads per block of keys.
	n := Load(Param("n"), GP64())
	SHRQ(Imm(uint64(log2(kb))), n)
	IMULQ(slot(Param("heads")), n)
	MOVQ(n, nLeft)
	o0 := Load(Param("o").Base(), GP64())
	MOVQ(o0, oh)
	p0 := Load(Param("p").Base(), GP64())
	MOVQ(p0, ph)
	MOVQ(p0, pj)
	z := GP64()
	XORQ(z, z)
	MOVQ(z, hc)
	vr := Load(Param("v").Base(), GP64()) // head h's row of the block's first key
	hs := Load(Param("hs"), GP64())
	if e.Size > 1 {
		SHLQ(Imm(uint64(log2(e.Size))), hs)
	}
	ldv := GP64() // bytes from a key to the next
	MOVQ(hs, ldv)
	IMULQ(slot(Param("heads")), ldv)

	Label("row")
	{
		ldp, ldp3 := strides(slot(Param("ldp")), 4, mr)
		ps := newRowSet(ph, ldp, ldp3, mr)
		// The probabilities, broadcast into registers once per row of
		// heads when they fit (mr·kb of them beside the kb·vpb V vectors
		// of a step and an O vector), else read by each FMA as an
		// embedded broadcast (AVX-512) or broadcast before it (AVX2).
		var pv [][]VecVirtual
		if mr*kb+kb*vpb+1 <= numRegs(s) {
			pv = make([][]VecVirtual, mr)
			for r := range pv {
				for t := 0; t < kb; t++ {
					x := s.Vec()
					VBROADCASTSS(ps.mem(r, 4*t), x)
					pv[r] = append(pv[r], x)
				}
			}
		}
		ldo, ldo3 := strides(slot(Param("ldo")), 4, mr)
		os := newRowSet(oh, ldo, ldo3, mr)
		ld3 := GP64()
		LEAQ(Mem{Base: ldv, Index: ldv, Scale: 2}, ld3)
		vs := newRowSet(vr, ldv, ld3, kb)
		pf := GP64() // the same rows of the next block
		LEAQ(Mem{Base: vr, Index: ldv, Scale: uint8(kb)}, pf)
		pfs := rowSet{bases: []GPVirtual{pf}, ld: ldv, ld3: ld3}
		steps := Load(Param("d"), GP64())
		SHRQ(Imm(uint64(log2(L*vpb))), steps)
		Label("step")
		for t := 0; t < kb; t++ {
			PREFETCHT1(pfs.mem(t, 0))
		}
		vv := make([][]VecVirtual, kb) // vector i of key t's step: vv[t][i]
		for t := range vv {
			if !e.quant() {
				vv[t] = []VecVirtual{widen(s, e, vs.mem(t, 0), nil)}
				continue
			}
			blk := newQuantBlock(s, e, vs.mem(t, 0), qc, t)
			for i := 0; i < vpb; i++ {
				vv[t] = append(vv[t], blk.vec(i))
			}
		}
		for r := 0; r < mr; r++ {
			for i := 0; i < vpb; i++ {
				a := s.Vec()
				om := os.mem(r, i*s.Bytes())
				VMOVUPS(om, a)
				for t := 0; t < kb; t++ {
					if pv != nil {
						VFMADD231PS(pv[r][t], vv[t][i], a)
					} else if s.EVEX {
						VFMADD231PS_BCST(ps.mem(r, 4*t), vv[t][i], a)
					} else {
						x := s.Vec()
						VBROADCASTSS(ps.mem(r, 4*t), x)
						VFMADD231PS(x, vv[t][i], a)
					}
				}
				VMOVUPS(a, om)
			}
		}
		vs.add(U32(stepBytes))
		pfs.add(U32(stepBytes))
		os.add(U32(4 * L * vpb))
		DECQ(steps)
		JNZ(LabelRef("step"))
	}
	// Next row: the next head, or the first head of the next block.
	{
		ADDQ(hs, vr)
		h, o, p := ldMem(hc), ldMem(oh), ldMem(ph)
		INCQ(h)
		ldo := Load(Param("ldo"), GP64())
		SHLQ(Imm(uint64(2+log2(mr))), ldo)
		ADDQ(ldo, o)
		ldp := Load(Param("ldp"), GP64())
		SHLQ(Imm(uint64(2+log2(mr))), ldp)
		ADDQ(ldp, p)
		CMPQ(h, slot(Param("heads")))
		JNE(LabelRef("store"))
		XORQ(h, h)
		MOVQ(Load(Param("o").Base(), GP64()), o)
		pn := ldMem(pj)
		ADDQ(Imm(uint64(4*kb)), pn)
		MOVQ(pn, pj)
		MOVQ(pn, p)
		// vr is at the next key's first head: on to the block's end.
		for t := 1; t < kb; t++ {
			ADDQ(ldv, vr)
		}
		Label("store")
		MOVQ(h, hc)
		MOVQ(o, oh)
		MOVQ(p, ph)
	}
	DECQ(nLeft)
	JNZ(LabelRef("row"))
	VZEROUPPER()
	RET()
}
