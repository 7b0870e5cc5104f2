//go:build !purego

package kernel

// The Go side of the NEON packers and TransposeRound (see the generator's
// pack.go): the assembly packs the full blocks, the reference Go code the
// edges, so the results equal the reference bit for bit (as the AVX2 path
// of pack_amd64.go does).

// neonPack are the assembly packers of one source kind: t from the rows
// of Bᵀ (full strips, k a multiple of 8), n from the rows of B (pairs of
// rows, full strips).
type neonPack[T float32 | uint16] struct {
	t func(dst []uint16, ldb int, src []T, ld, strips, k8 int)
	n func(dst []uint16, ldb int, src []T, ld, pairs, strips int)
}

// run packs checked arguments, conv (the scalar conversion) packing what
// the kernels leave.
func (ks neonPack[T]) run(conv func(T) uint16, dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool) {
	packFullBlocks(ks.t, ks.n, 8, conv, dst, ldb, p0, src, ld, k, n, transposed)
}

var (
	neonPackBF16 = neonPack[float32]{packTBF16NEON, packNBF16NEON}
	neonPackF16  = neonPack[float32]{packTF16NEON, packNF16NEON}
	neonPack16   = neonPack[uint16]{packT16NEON, packN16NEON}
)

// setPackersNEON fills the packing and rounding kernels of im.
func setPackersNEON(im *Impl) {
	im.PackVNNI16Into = func(dst []uint16, ldb, p0 int, src []uint16, ld, k, n int, transposed bool) {
		checkPack("PackVNNI16Into", len(dst), ldb, p0, len(src), ld, k, n, transposed)
		neonPack16.run(copy16, dst, ldb, p0, src, ld, k, n, transposed)
	}
	im.PackVNNIInto = func(dst []uint16, ldb, p0 int, src []float32, ld, k, n int, transposed bool, e Elem) {
		checkPack("PackVNNIInto", len(dst), ldb, p0, len(src), ld, k, n, transposed)
		checkElem(e)
		if e == BF16 {
			neonPackBF16.run(F32ToBF16, dst, ldb, p0, src, ld, k, n, transposed)
		} else {
			neonPackF16.run(F32ToF16, dst, ldb, p0, src, ld, k, n, transposed)
		}
	}
	im.TransposeRound = func(dst []uint16, ldd int, src []float32, lds, rows, cols int, e Elem) {
		checkTransposeRound(len(dst), ldd, len(src), lds, rows, cols, e)
		rows8, cols8 := rows&^7, cols&^7
		if rows8 > 0 && cols8 > 0 {
			if e == BF16 {
				transposeRoundBF16NEON(dst, ldd, src, lds, rows8, cols8)
			} else {
				transposeRoundF16NEON(dst, ldd, src, lds, rows8, cols8)
			}
		}
		// The edges: rows ≥ rows8 (all columns), and columns ≥ cols8 of
		// the rows below rows8.
		for i := 0; i < rows; i++ {
			j0 := cols8
			if i >= rows8 {
				j0 = 0
			}
			for j, v := range src[i*lds+j0 : i*lds+cols] {
				dst[(j0+j)*ldd+i] = e.FromF32(v)
			}
		}
	}
}
