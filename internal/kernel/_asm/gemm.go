package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// GEMM register blocking. The microkernel keeps an mr × (nv·Lanes) block of
// C in mr·nv accumulator registers:
//
//	AVX-512: 6 rows × 2 zmm = 6 × 32 floats, 12 accumulators
//	AVX2:    6 rows × 2 ymm = 6 × 16 floats, 12 accumulators
//
// Per step p of the k loop it loads the nv vectors B[p, j:j+nv·Lanes],
// broadcasts each of the mr scalars A[i, p] and issues mr·nv independent
// VFMADD231PS. 12 independent chains cover the FMA latency (4 cycles)
// times its throughput (1 zmm or 2 ymm per cycle on Zen 4) with room to
// spare.
//
// Every kind fuses, A·Bᵀ included: each element of the scores S = Q·Kᵀ
// (and of dP = dO·Vᵀ) is the chain s = fma(A[i, p], B[j, p], s) from zero
// in the order p = 0, 1, …, the arithmetic of mulABtFused
// (Impl.FusedScores), whose results it gives bit for bit. Its baseline is
// the plain algorithm with fused products in that order (SPEC §4,
// reference.Params.FusedScores): at large logits (|S| ~ 1e4) the softmax
// amplifies the rounding of S, and against the unfused baseline O and the
// gradients came out up to 40× over the rule's bound (the reliability
// report's finding 9). The scores used a VMULPS and a VADDPS per product
// before, which on cores that add on the FMA ports (Intel's, Zen 5's
// 512-bit pipes as the mca-kit's proxy models them) ran at half the FMA
// rate.
const mr = 6

// Matrix products.

type gemmKind int

const (
	kindABt gemmKind = iota // C = A·Bᵀ, Bᵀ packed in strips of 16 columns
	kindAB                  // C += A·B, A·B summed from zero then added
	kindAtB                 // C += Aᵀ·B, likewise
)

// gemm holds the state of one matrix-product function being generated.
type gemm struct {
	s    isa
	kind gemmKind
	set  bool // kindAB only: C = A·B, the tile's sum stored instead of added
	name string
	blocks
}

func genGemm(s isa, kind gemmKind, set bool) {
	g := &gemm{s: s, kind: kind, set: set && kind == kindAB}
	switch {
	case g.set:
		g.name = "mulAB" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)")
		Doc(g.name+" sets C = A·B (see Impl.MulAB): mulAddAB"+s.Suffix+" storing its sums.",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	case kind == kindABt:
		g.name = "mulABt" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int)")
		Doc(g.name+" sets C = A·Bᵀ (see Impl.MulABt); bt is packed by PackBt.",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	case kind == kindAB:
		g.name = "mulAddAB" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)")
		Doc(g.name+" adds A·B to C (see Impl.MulAddAB).",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	case kind == kindAtB:
		g.name = "mulAddAtB" + s.Suffix
		TEXT(g.name, NOSPLIT, "func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)")
		Doc(g.name+" adds Aᵀ·B to C (see Impl.MulAddAtB).",
			"The caller guarantees n%16 == 0 and that all accesses are in bounds.")
	}
	Pragma("noescape")

	g.cCol = Load(Param("c").Base(), GP64()).(GPVirtual)
	if kind == kindABt {
		g.bCol = Load(Param("bt").Base(), GP64()).(GPVirtual)
	} else {
		g.bCol = Load(Param("b").Base(), GP64()).(GPVirtual)
	}
	g.nLeft = Load(Param("n"), GP64()).(GPVirtual)

	// Column blocks of the full microkernel width, then (AVX-512 only) one
	// block of 16 columns when n%32 == 16.
	width := 2 * s.Lanes
	g.columnLoop(2, width)
	if width > 16 {
		g.columnLoop(1, s.Lanes)
	}
	VZEROUPPER()
	RET()
}

// columnLoop emits: for nLeft >= width { all rows of C[:, j0:j0+width]; advance }.
func (g *gemm) columnLoop(nv, width int) {
	g.blocks.columnLoop(width, func() { g.rowPass(nv) }, func() {
		if g.kind == kindABt {
			// width/16 packed strips of k·16 floats each.
			t := Load(Param("k"), GP64())
			SHLQ(Imm(uint64(log2(4*16*width/16))), t)
			ADDQ(t, g.bCol)
		} else {
			ADDQ(U32(4*width), g.bCol)
		}
	})
}

// rowPass emits the row loop over one column block of nv vectors: full
// tiles of mr rows, then one tile of the remaining m%mr rows.
func (g *gemm) rowPass(nv int) {
	g.blocks.rowPass(fmt.Sprintf("v%d", nv), func(r int) { g.tile(r, nv) }, func() {
		// Advance A by mr rows.
		if g.kind == kindAtB {
			ADDQ(Imm(4*mr), g.aRow) // row i of Aᵀ is column i of A
		} else {
			addScaled(g.aRow, "lda", 4*mr)
		}
	})
}

// rowLoop emits a loop over the rows of one column block, its labels
// tagged with tag: while mLeft >= mr, tile(mr) then advance (which moves A
// and C on by mr rows); then one tile(r) of the remaining r = mLeft < mr
// rows, if any.
func rowLoop(tag string, mLeft Register, tile func(r int), advance func()) {
	Label("rows" + tag)
	CMPQ(mLeft, Imm(mr))
	JL(LabelRef("rows" + tag + "Tail"))
	tile(mr)
	advance()
	SUBQ(Imm(mr), mLeft)
	JMP(LabelRef("rows" + tag))

	// Row tail: one tile with exactly mLeft (< mr) rows.
	Label("rows" + tag + "Tail")
	for r := mr - 1; r >= 1; r-- {
		next := fmt.Sprintf("rows%sTail%d", tag, r)
		CMPQ(mLeft, U32(r))
		JNE(LabelRef(next))
		tile(r)
		JMP(LabelRef("rows" + tag + "Done"))
		Label(next)
	}
	Label("rows" + tag + "Done")
}

// tile emits the microkernel for an r × (nv·Lanes) block of C at cRow,
// reading A from aRow and B from bCol.
func (g *gemm) tile(r, nv int) {
	s := g.s
	tag := fmt.Sprintf("r%dv%d", r, nv)
	Commentf("Microkernel: %d rows × %d columns, %d accumulators.", r, nv*s.Lanes, r*nv)

	// acc[i][v] holds C[i0+i, j0+v·Lanes : j0+(v+1)·Lanes].
	acc := make([][]VecVirtual, r)
	for i := range acc {
		acc[i] = make([]VecVirtual, nv)
		for v := range acc[i] {
			acc[i][v] = s.Vec()
		}
	}
	// Every kind sums from zero: A·Bᵀ (and A·B with set) overwrites C;
	// A·B and Aᵀ·B add the tile's sum to C once, at the store (see
	// Impl.MulAddAB). A sum from +0 is never −0, so storing it gives the
	// bits that adding it to a cleared C gives.
	for i := range acc {
		for v := range acc[i] {
			zero(s, acc[i][v])
		}
	}

	// Pointers that walk along k.
	lda := Load(Param("lda"), GP64())
	SHLQ(Imm(2), lda)
	// A[i0+i, p] (A[p, i0] for Aᵀ·B); rows 3..5 addressed from a.a3.
	a := newATile(g.aRow, lda, g.kind != kindAtB && r > 3)
	bp := GP64() // B[p, j0]
	MOVQ(g.bCol, bp)
	var bs GPVirtual // ABt: bytes per packed strip; AB/AtB: bytes per row of B
	switch {
	case g.kind == kindABt && nv*s.Lanes > 16:
		bs = Load(Param("k"), GP64()).(GPVirtual)
		SHLQ(Imm(6), bs)
	case g.kind != kindABt:
		bs = Load(Param("ldb"), GP64()).(GPVirtual)
		SHLQ(Imm(2), bs)
	}

	// aAddr(i) is the address of the scalar A[i0+i, p].
	aAddr := func(i int) Mem {
		if g.kind == kindAtB {
			return Mem{Base: a.ap, Disp: 4 * i}
		}
		return a.addr(i)
	}
	// bAddr(v) is the address of the vector B[p, j0+v·Lanes : +Lanes].
	bAddr := func(v int) Mem {
		col := v * s.Lanes
		if g.kind == kindABt {
			m := Mem{Base: bp, Disp: 4 * (col % 16)}
			if col >= 16 { // second packed strip (col/16 == 1)
				m.Index, m.Scale = bs, 1
			}
			return m
		}
		return Mem{Base: bp, Disp: 4 * col}
	}

	pc := Load(Param("k"), GP64())
	TESTQ(pc, pc)
	JE(LabelRef(tag + "store"))
	Label(tag + "loop")
	bv := make([]VecVirtual, nv)
	for v := range bv {
		bv[v] = s.Vec()
		VMOVUPS(bAddr(v), bv[v])
	}
	for i := 0; i < r; i++ {
		// A fresh virtual register per broadcast; its live range is short,
		// so the allocator reuses one physical register for all of them.
		bc := s.Vec()
		VBROADCASTSS(aAddr(i), bc)
		for v := range bv {
			VFMADD231PS(bv[v], bc, acc[i][v])
		}
	}
	// Step p → p+1.
	switch g.kind {
	case kindABt:
		ADDQ(Imm(4*16), bp)
	default:
		ADDQ(bs, bp)
	}
	if g.kind == kindAtB {
		ADDQ(lda, a.ap)
	} else {
		a.step(4)
	}
	DECQ(pc)
	JNE(LabelRef(tag + "loop"))

	Label(tag + "store")
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	storeAcc(g.cRow, ldc, r, nv, s.Bytes(), g.kind != kindABt && !g.set, func(i, v int) Op { return acc[i][v] })
}

// ---------------------------------------------------------------------------
// Few-row products for decoding.

// genDot4T generates dot4TAVX2: Sᵀ for four query rows against n key rows
// read in place (see Impl.Dot4T). It is AVX2 only; AVX-512 CPUs run it too.
// Two keys per step share the four A vectors: 8 independent FMA chains,
// 6 loads per 8 FMAs, then one horizontal-add tree per key.
func genDot4T() {
	TEXT("dot4TAVX2", NOSPLIT, "func(c []float32, ldc int, a []float32, b []float32, ldb, n, k int)")
	Pragma("noescape")
	Doc("dot4TAVX2 sets c[j*ldc+r] = Σ_p a[r*k+p]·b[j*ldb+p] for r < 4, j < n (see Impl.Dot4T).",
		"k must be a positive multiple of 8.")
	cp := Load(Param("c").Base(), GP64())
	ldc := Load(Param("ldc"), GP64())
	SHLQ(Imm(2), ldc)
	a0 := Load(Param("a").Base(), GP64())
	bp := Load(Param("b").Base(), GP64())
	ldb := Load(Param("ldb"), GP64())
	SHLQ(Imm(2), ldb)
	n := Load(Param("n"), GP64())
	kb := Load(Param("k"), GP64())
	SHLQ(Imm(2), kb) // bytes per row of a
	a1, a2, a3 := GP64(), GP64(), GP64()
	LEAQ(Mem{Base: a0, Index: kb, Scale: 1}, a1)
	LEAQ(Mem{Base: a1, Index: kb, Scale: 1}, a2)
	LEAQ(Mem{Base: a2, Index: kb, Scale: 1}, a3)
	rows := []Register{a0, a1, a2, a3}

	// store4 reduces the four accumulators of one key (rows 0..3) and
	// stores the four sums at dst.
	store4 := func(acc []VecVirtual, dst Mem) {
		t0, t1 := YMM(), YMM()
		VHADDPS(acc[1], acc[0], t0) // pairs of rows 0,1
		VHADDPS(acc[3], acc[2], t1) // pairs of rows 2,3
		VHADDPS(t1, t0, t0)         // [s0 s1 s2 s3 | s0' s1' s2' s3']
		x := XMM()
		VEXTRACTF128(Imm(1), t0, x)
		VADDPS(x, t0.AsX(), x)
		VMOVUPS(x, dst)
	}

	// dot emits the loop over k of the dot products of the four rows with
	// the key rows at keys, and returns the accumulators acc[key*4 + row].
	// One key reads the rows as FMA memory operands; more keys load each
	// row once and share it.
	dot := func(label string, keys ...Register) []VecVirtual {
		acc := make([]VecVirtual, 4*len(keys))
		for i := range acc {
			acc[i] = YMM()
			VXORPS(acc[i], acc[i], acc[i])
		}
		off := GP64()
		XORQ(off, off)
		Label(label)
		bv := make([]VecVirtual, len(keys))
		for j := range bv {
			bv[j] = YMM()
		}
		for j, key := range keys {
			VMOVUPS(Mem{Base: key, Index: off, Scale: 1}, bv[j])
		}
		for r, ar := range rows {
			if len(keys) == 1 {
				VFMADD231PS(Mem{Base: ar, Index: off, Scale: 1}, bv[0], acc[r])
				continue
			}
			av := YMM()
			VMOVUPS(Mem{Base: ar, Index: off, Scale: 1}, av)
			for j := range bv {
				VFMADD231PS(av, bv[j], acc[4*j+r])
			}
		}
		ADDQ(Imm(32), off)
		CMPQ(off, kb)
		JL(LabelRef(label))
		return acc
	}

	b1 := GP64()
	Label("pair")
	CMPQ(n, Imm(2))
	JL(LabelRef("single"))
	MOVQ(bp, b1)
	ADDQ(ldb, b1)
	acc := dot("pairDot", bp, b1)
	store4(acc[:4], Mem{Base: cp})
	store4(acc[4:], Mem{Base: cp, Index: ldc, Scale: 1})
	LEAQ(Mem{Base: cp, Index: ldc, Scale: 2}, cp)
	LEAQ(Mem{Base: bp, Index: ldb, Scale: 2}, bp)
	SUBQ(Imm(2), n)
	JMP(LabelRef("pair"))

	Label("single")
	CMPQ(n, Imm(0))
	JE(LabelRef("done"))
	store4(dot("singleDot", bp), Mem{Base: cp})
	Label("done")
	VZEROUPPER()
	RET()
}
