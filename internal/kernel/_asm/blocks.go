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
