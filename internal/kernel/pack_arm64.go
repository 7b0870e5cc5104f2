//go:build !purego

package kernel

// The Go side of the NEON packers and TransposeRound (see the generator's
// pack.go; packKernels in pack_asm.go): the assembly packs the full blocks
// (k of Bᵀ in steps of 8), the reference Go code the edges, so the results
// equal the reference bit for bit (as the AVX2 path of pack_amd64.go does).

var (
	neonPackBF16 = packKernels[float32]{packTBF16NEON, packNBF16NEON, 8}
	neonPackF16  = packKernels[float32]{packTF16NEON, packNF16NEON, 8}
	neonPack16   = packKernels[uint16]{packT16NEON, packN16NEON, 8}
)

// setPackersNEON fills the packing and rounding kernels of im.
func setPackersNEON(im *Impl) {
	setPackVNNI(im, neonPack16, neonPackBF16, neonPackF16)
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
