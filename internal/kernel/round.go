package kernel

// Rounding float32 tiles to a 16-bit type for the products that take
// 16-bit operands: TransposeRound (the transposed A operands Pᵀ and dSᵀ of
// the backward pass) and RoundF32 (a tile rounded in place, for paths that
// keep the rounded values in float32). The Go versions are the reference;
// the Impl fields hold the vectorised ones.

// transposeRoundGeneric is the Go TransposeRound.
func transposeRoundGeneric(dst []uint16, ldd int, src []float32, lds, rows, cols int, e Elem) {
	checkTransposeRound(len(dst), ldd, len(src), lds, rows, cols, e)
	for i := 0; i < rows; i++ {
		for j, v := range src[i*lds : i*lds+cols] {
			dst[j*ldd+i] = e.FromF32(v)
		}
	}
}

func checkTransposeRound(dstLen, ldd, srcLen, lds, rows, cols int, e Elem) {
	checkElem(e)
	checkMatrix("TransposeRound src", srcLen, rows, cols, lds)
	checkMatrix("TransposeRound dst", dstLen, cols, rows, ldd)
}

// roundF32Generic is the Go RoundF32.
func roundF32Generic(x []float32, e Elem) {
	checkElem(e)
	for i, v := range x {
		x[i] = e.ToF32(e.FromF32(v))
	}
}
