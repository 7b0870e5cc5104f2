package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// bfloat16 matrix products with VDPBF16PS (AVX512_BF16), float32
// accumulation. B is packed in the VNNI pair layout with strip stride ldb
// (see Half in package kernel): element (p, j) of the k×n matrix B is word
//
//	(j/16)·ldb + (p/2)·32 + (j%16)·2 + p%2
//
// so pair row p/2 of a strip of 16 columns is one 64-byte zmm whose dword
// lane j holds (B[p, j], B[p+1, j]) — exactly the operand layout of
// VDPBF16PS. A is row-major bfloat16 with leading dimension lda; the dword
// A[i, p:p+2] broadcast to all lanes is the other operand. k is even.
//
// Register blocking as in the float32 AVX-512 kernel: 6 rows × 32 columns,
// 12 accumulators. The instruction is emitted as bytes, so the vector
// registers of the microkernel are fixed:
//
//	Z0-Z11   acc[i][v] = Z(2i+v): C[i0+i, j0+16v : +16]
//	Z12-Z13  the two B vectors of the current pair row
//	Z14-Z19  A[i0+i, p:p+2] broadcast, one register per row
//
// General-purpose registers stay virtual (the encoding uses none).
const (
	bfAcc   = 0
	bfB     = 12
	bfBcast = 14
)

func genBF16Gemm(accumulate bool) {
	name := "mulBF16AVX512BF16"
	doc := name + " sets C = A·B for bfloat16 A and VNNI-packed B (see Half.Mul)."
	if accumulate {
		name = "mulAddBF16AVX512BF16"
		doc = name + " adds A·B to C for bfloat16 A and VNNI-packed B (see Half.MulAdd)."
	}
	TEXT(name, NOSPLIT, "func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int)")
	Pragma("noescape")
	Doc(doc, "The caller guarantees n%16 == 0, k%2 == 0, ldb >= 16k and that all accesses are in bounds.")

	g := &bfGemm{acc: accumulate}
	g.cCol = Load(Param("c").Base(), GP64()).(GPVirtual)
	g.bCol = Load(Param("b").Base(), GP64()).(GPVirtual)
	g.nLeft = Load(Param("n"), GP64()).(GPVirtual)
	g.columnLoop(2)
	g.columnLoop(1)
	VZEROUPPER()
	RET()
}

type bfGemm struct {
	acc bool
	blocks
}

// columnLoop emits: for nLeft >= 16·nv { all rows of C[:, j0:j0+16nv]; advance }.
func (g *bfGemm) columnLoop(nv int) {
	g.blocks.columnLoop(16*nv, func() { g.rowPass(nv) }, func() {
		t := Load(Param("ldb"), GP64()) // nv strips of ldb words = 2nv·ldb bytes
		SHLQ(Imm(uint64(log2(2*nv))), t)
		ADDQ(t, g.bCol)
	})
}

// rowPass emits the row loop over one column block of nv strips (see
// rowLoop).
func (g *bfGemm) rowPass(nv int) {
	g.blocks.rowPass(fmt.Sprintf("v%d", nv), func(r int) { g.tile(r, nv) }, func() {
		addScaled(g.aRow, "lda", 2*mr)
	})
}

// tile emits the microkernel for an r × 16nv block of C at cRow.
func (g *bfGemm) tile(r, nv int) {
	tag := fmt.Sprintf("r%dv%d", r, nv)
	Commentf("Microkernel: %d rows × %d columns, %d accumulators.", r, 16*nv, r*nv)
	acc := func(i, v int) int { return bfAcc + 2*i + v }

	ldc := loadStride("ldc", 4)
	// The sum starts from zero; MulAdd adds it to C once, at the store
	// (see Impl.MulAddAB).
	for i := 0; i < r; i++ {
		for v := 0; v < nv; v++ {
			z := zmm(acc(i, v))
			VPSUBD(z, z, z)
		}
	}

	lda := loadStride("lda", 2)
	a := newATile(g.aRow, lda, r > 3)
	bp := GP64()
	MOVQ(g.bCol, bp)
	var bs GPVirtual // bytes from one packed strip to the next: 2·ldb
	if nv == 2 {
		bs = loadStride("ldb", 2).(GPVirtual)
	}

	pc := Load(Param("k"), GP64())
	SHRQ(Imm(1), pc) // pairs
	JE(LabelRef(tag + "store"))
	Label(tag + "loop")
	VMOVUPS(Mem{Base: bp}, zmm(bfB))
	if nv == 2 {
		VMOVUPS(Mem{Base: bp, Index: bs, Scale: 1}, zmm(bfB+1))
	}
	for i := 0; i < r; i++ {
		VPBROADCASTD(a.addr(i), zmm(bfBcast+i))
		for v := 0; v < nv; v++ {
			vdpbf16ps(acc(i, v), bfBcast+i, bfB+v)
		}
	}
	ADDQ(Imm(64), bp)
	a.step(4)
	DECQ(pc)
	JNE(LabelRef(tag + "loop"))

	Label(tag + "store")
	storeAcc(g.cRow, ldc, r, nv, 64, g.acc, func(i, v int) Op { return zmm(acc(i, v)) })
}

// genBF16Peak generates FMAPeakBF16AVX512: 12 independent VDPBF16PS chains.
func genBF16Peak() {
	TEXT("FMAPeakBF16AVX512", NOSPLIT, "func(iters int)")
	Doc("FMAPeakBF16AVX512 runs iters iterations of a loop of 12 independent",
		"register-only VDPBF16PS chains on 16-lane vectors: one iteration is",
		"12*16*2*2 = 768 FLOPs (a multiply and an add per bfloat16 pair",
		"element). It measures the machine's bfloat16 peak; AVX512_BF16 only.")
	n := Load(Param("iters"), GP64())
	for i := 0; i < 14; i++ {
		VPSUBD(zmm(i), zmm(i), zmm(i))
	}
	TESTQ(n, n)
	JLE(LabelRef("done"))
	Label("loop")
	for i := 0; i < 12; i++ {
		vdpbf16ps(i, 12, 13)
	}
	DECQ(n)
	JNE(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

func genBF16() {
	genBF16Gemm(false)
	genBF16Gemm(true)
	genBF16Peak()
}
