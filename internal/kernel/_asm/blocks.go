package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// blocks holds the pointer registers of a column-blocked matrix product
// (gemm, bfGemm): an outer loop over column blocks of C (columnLoop), an
// inner loop over tiles of mr rows of each block (rowPass).
type blocks struct {
	// Live across the whole function.
	cCol  GPVirtual // &C[0, j0] of the current column block
	bCol  GPVirtual // start of B for column j0 (packed strip or &B[0, j0])
	nLeft GPVirtual // columns still to do

	// Live across one pass over the rows of a column block.
	aRow  GPVirtual // &A[i0, 0] (&A[0, i0] for Aᵀ·B)
	cRow  GPVirtual // &C[i0, j0]
	mLeft GPVirtual // rows still to do
}

// columnLoop emits: for nLeft >= width { pass(); cCol += width floats;
// advanceB(); nLeft -= width }. pass emits all rows of C[:, j0:j0+width]
// and advanceB moves bCol on to column j0+width.
func (b *blocks) columnLoop(width int, pass, advanceB func()) {
	top, done := fmt.Sprintf("cols%d", width), fmt.Sprintf("cols%dDone", width)
	Label(top)
	CMPQ(b.nLeft, U32(width))
	JL(LabelRef(done))

	pass()

	// Advance C and B to the next column block.
	ADDQ(U32(4*width), b.cCol)
	advanceB()
	SUBQ(U32(width), b.nLeft)
	JMP(LabelRef(top))
	Label(done)
}

// rowPass emits the row loop over one column block (see rowLoop), its
// labels tagged with tag: aRow = &A[0, 0], cRow = cCol, mLeft = m, then
// per full tile advanceA() (which moves aRow on by mr rows) and
// cRow += mr·ldc floats.
func (b *blocks) rowPass(tag string, tile func(r int), advanceA func()) {
	b.aRow = Load(Param("a").Base(), GP64()).(GPVirtual)
	b.cRow = GP64()
	MOVQ(b.cCol, b.cRow)
	b.mLeft = Load(Param("m"), GP64()).(GPVirtual)

	rowLoop(tag, b.mLeft, tile, func() {
		advanceA()
		addScaled(b.cRow, "ldc", 4*mr)
	})
}

// addScaled emits dst += scale·param for the integer parameter param (a
// leading dimension times the bytes of mr rows).
func addScaled(dst GPVirtual, param string, scale int) {
	t := Load(Param(param), GP64())
	IMUL3Q(Imm(uint64(scale)), t, t)
	ADDQ(t, dst)
}

// aTile addresses the rows of an r-row tile of a row-major A whose rows
// are lda bytes apart: rows 0-2 from ap (index scales 1 and 2), rows 3-5
// from a3 = ap + 3·lda (a scale of 3 or 5 does not exist).
type aTile struct {
	ap, a3 GPVirtual // a3 is nil unless split
	lda    Register
}

// newATile emits ap = aRow and, if split, a3 = ap + 3·lda.
func newATile(aRow GPVirtual, lda Register, split bool) aTile {
	t := aTile{ap: GP64(), lda: lda}
	MOVQ(aRow, t.ap)
	if split {
		t.a3 = GP64()
		LEAQ(Mem{Base: t.ap, Index: lda, Scale: 2}, t.a3)
		ADDQ(lda, t.a3)
	}
	return t
}

// addr is the address of the current element of row i.
func (t aTile) addr(i int) Mem {
	base := Register(t.ap)
	if i >= 3 {
		base, i = t.a3, i-3
	}
	if i == 0 {
		return Mem{Base: base}
	}
	return Mem{Base: base, Index: t.lda, Scale: uint8(i)}
}

// step emits: move every row pointer on by bytes.
func (t aTile) step(bytes int) {
	ADDQ(Imm(uint64(bytes)), t.ap)
	if t.a3 != nil {
		ADDQ(Imm(uint64(bytes)), t.a3)
	}
}

// storeAcc emits the store of the r × nv accumulators acc(i, v) to the
// tile of C at cRow, rows ldc bytes apart, vectors vbytes apart: C = acc,
// or with add C += acc.
func storeAcc(cRow GPVirtual, ldc Register, r, nv, vbytes int, add bool, acc func(i, v int) Op) {
	cp := GP64()
	MOVQ(cRow, cp)
	for i := 0; i < r; i++ {
		for v := 0; v < nv; v++ {
			c := Mem{Base: cp, Disp: v * vbytes}
			if add {
				VADDPS(c, acc(i, v), acc(i, v))
			}
			VMOVUPS(acc(i, v), c)
		}
		if i < r-1 {
			ADDQ(ldc, cp)
		}
	}
}
