package kernel

// The VNNI pair layout of the B operand of Half (see Half): strips of 16
// columns, ldb elements apart; in each strip pair row q (rows 2q and 2q+1
// of B) is 32 elements, the 16 pairs (B[2q, j], B[2q+1, j]):
//
//	B[p, j] is at (j/16)·ldb + (p/2)·32 + (j%16)·2 + p%2
//
// A packed long matrix (V of a sequence: k = keys) is filled in chunks of
// rows by PackVNNIInto with a fixed ldb, and any even-aligned range of its
// rows [p0, p0+k) is itself a packed k×n matrix: b[p0·16:] with the same
// ldb.

// VNNILen is the number of elements PackVNNI writes for a k×n matrix:
// Pad(n) columns times k rounded up to even (strip stride 16·(k+k%2)).
func VNNILen(k, n int) int { return Pad(n) * (k + k%2) }

// VNNIIntoLen is the length dst must have for PackVNNIInto(dst, ldb, p0,
// …, k, n, …): (Pad(n)/16 − 1)·ldb + 16·(p0 + k + k%2), or 0 when there is
// nothing to write (k or n zero).
func VNNIIntoLen(ldb, p0, k, n int) int {
	if k <= 0 || n <= 0 {
		return 0
	}
	return (Pad(n)/W-1)*ldb + W*(p0+k+k%2)
}

// PackVNNI packs the k×n matrix B, given as float32, into dst in the VNNI
// pair layout with strip stride 16·(k+k%2), rounding each element to type e
// (to nearest even). With transposed false src holds the rows of B
// (element (p, j) at src[p*ld+j]); with transposed true it holds the rows
// of Bᵀ (element (p, j) at src[j*ld+p]: the n×k matrix of keys for
// S = Q·Kᵀ). An odd k is padded with a zero row, n with zero columns up to
// Pad(n); dst must hold VNNILen(k, n) elements. It is PackVNNIInto with
// ldb = 16·(k+k%2) and p0 = 0.
func PackVNNI(dst []uint16, src []float32, ld, k, n int, transposed bool, e Elem) {
	PackVNNIInto(dst, W*(k+k%2), 0, src, ld, k, n, transposed, e)
}

// PackVNNI16 is PackVNNI for a source already in a 16-bit type, which is
// copied unchanged.
func PackVNNI16(dst []uint16, src []uint16, ld, k, n int, transposed bool) {
	PackVNNI16Into(dst, W*(k+k%2), 0, src, ld, k, n, transposed)
}

// PackVNNIInto packs the k×n matrix B, given as float32 and rounded to
// type e (to nearest even), as rows [p0, p0+k) of a larger packed matrix
// with strip stride ldb held in dst: element (p, j) of B goes to
//
//	dst[(j/16)·ldb + ((p0+p)/2)·32 + (j%16)·2 + (p0+p)%2]
//
// src is as for PackVNNI (transposed false: element (p, j) at src[p*ld+j],
// the rows of V; true: at src[j*ld+p], the rows of K). p0 is even; an odd
// k gets a zero row p0+k, and columns n … Pad(n)−1 are zero. It writes
// exactly pair rows p0/2 … (p0+k+1)/2 − 1 of strips 0 … Pad(n)/16 − 1 and
// nothing else, so disjoint chunks of rows can be packed concurrently into
// one buffer; chunks of columns (keys, for transposed) are packed by
// offsetting dst by a multiple of ldb. ldb ≥ 16·(p0+k+k%2); dst holds at
// least VNNIIntoLen(ldb, p0, k, n) elements.
//
// This is the pure-Go reference; Impl.PackVNNIInto is the same function,
// vectorised where the CPU allows, with the same results bit for bit.
func PackVNNIInto(dst []uint16, ldb, p0 int, src []float32, ld, k, n int, transposed bool, e Elem) {
	checkPack("PackVNNIInto", len(dst), ldb, p0, len(src), ld, k, n, transposed)
	checkElem(e)
	if e == F16 {
		packVNNIGo(dst, ldb, p0, src, ld, k, n, transposed, F32ToF16)
	} else {
		packVNNIGo(dst, ldb, p0, src, ld, k, n, transposed, F32ToBF16)
	}
}

// PackVNNI16Into is PackVNNIInto for a source already in a 16-bit type,
// which is copied unchanged.
func PackVNNI16Into(dst []uint16, ldb, p0 int, src []uint16, ld, k, n int, transposed bool) {
	checkPack("PackVNNI16Into", len(dst), ldb, p0, len(src), ld, k, n, transposed)
	packVNNIGo(dst, ldb, p0, src, ld, k, n, transposed, copy16)
}

// copy16 is the conversion of a 16-bit source: none.
func copy16(h uint16) uint16 { return h }

// checkPack panics unless the arguments of a packer are consistent and
// every access stays inside dst and src.
func checkPack(name string, dstLen, ldb, p0, srcLen, ld, k, n int, transposed bool) {
	if k < 0 || n < 0 || p0 < 0 || p0%2 != 0 {
		bad(name + ": bad dimensions or odd p0")
	}
	if ldb < W*(p0+k+k%2) {
		bad(name + ": strip stride below 16·(p0+k)")
	}
	if dstLen < VNNIIntoLen(ldb, p0, k, n) {
		bad(name + ": dst too short")
	}
	if transposed {
		checkMatrix(name+" src", srcLen, n, k, ld)
	} else {
		checkMatrix(name+" src", srcLen, k, n, ld)
	}
}

// packVNNIGo is the one Go packer behind every pure-Go packing function;
// the arguments are checked.
func packVNNIGo[T float32 | uint16](dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool, conv func(T) uint16) {
	kp := k + k%2
	if kp == 0 {
		return
	}
	for s := 0; s < Pad(n); s += W {
		strip := dst[s/W*ldb+W*p0 : s/W*ldb+W*(p0+kp)]
		for jj := 0; jj < W; jj++ {
			j := s + jj
			for p := 0; p < kp; p++ {
				var h uint16
				if j < n && p < k {
					if transposed {
						h = conv(src[j*ld+p])
					} else {
						h = conv(src[p*ld+j])
					}
				}
				strip[(p/2)*2*W+jj*2+p%2] = h
			}
		}
	}
}

// UnpackVNNI writes the k×Pad(n) float32 matrix held in b (pair layout,
// strip stride ldb) into dst (row-major, leading dimension ldd), widening
// from type e.
func UnpackVNNI(dst []float32, ldd int, b []uint16, ldb, k, n int, e Elem) {
	for s := 0; s < Pad(n); s += W {
		strip := b[s/W*ldb:]
		for p := 0; p < k; p++ {
			row := dst[p*ldd+s : p*ldd+s+W]
			for jj := range row {
				row[jj] = e.ToF32(strip[(p/2)*2*W+jj*2+p%2])
			}
		}
	}
}
