//go:build (amd64 || arm64) && !purego

package kernel

// The assembly (kernel_amd64.s, kernel_arm64.s) trusts its arguments. The
// wrappers below check, cheaply and before any memory is touched, every
// precondition that keeps the assembly inside the slices it is given; a
// violation is a bug in the caller (an internal invariant), so they panic.
// Both architectures' implementation tables wrap their assembly with them.

func wrapMulABt(f func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int)) func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int) {
	return func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int) {
		checkWidth(n)
		checkMatrix("MulABt C", len(c), m, n, ldc)
		checkMatrix("MulABt A", len(a), m, k, lda)
		checkMatrix("MulABt Bt", len(bt), 1, n*k, n*k)
		if m == 0 || n == 0 {
			return
		}
		f(c, ldc, a, lda, bt, m, n, k)
	}
}

// wrapMulAdd wraps a MulAddAB (transA false: A is m×k) or MulAddAtB
// (transA true: A is stored k×m) kernel; both multiply into C (m×n) with
// B (k×n), and only A's stored shape differs.
func wrapMulAdd(transA bool, f func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)) func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	name := "MulAddAB"
	if transA {
		name = "MulAddAtB"
	}
	// The operands' names are built here, once: a concatenation in the
	// closure ran on every call (about 0.6% of a causal forward's time).
	nameC, nameA, nameB := name+" C", name+" A", name+" B"
	return func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
		checkWidth(n)
		checkMatrix(nameC, len(c), m, n, ldc)
		rowsA, colsA := m, k
		if transA {
			rowsA, colsA = k, m
		}
		checkMatrix(nameA, len(a), rowsA, colsA, lda)
		checkMatrix(nameB, len(b), k, n, ldb)
		if m == 0 || n == 0 || k == 0 {
			return
		}
		f(c, ldc, a, lda, b, ldb, m, n, k)
	}
}

// wrapMulAB wraps a MulAB kernel as wrapMulAdd does MulAddAB; with k = 0
// it clears C, which the kernel is not called for.
func wrapMulAB(f func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)) func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	g := wrapMulAdd(false, f)
	return func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
		g(c, ldc, a, lda, b, ldb, m, n, k)
		if k == 0 {
			clearRows(c, ldc, m, n)
		}
	}
}

func wrapExpSum(f func(x []float32, scale, sub float32) float32) func(x []float32, scale, sub float32) float32 {
	return func(x []float32, scale, sub float32) float32 {
		checkWidth(len(x))
		return f(x, scale, sub)
	}
}

// wrapExpSumBF16 checks the preconditions of Impl.ExpSumBF16 (len(x) a
// multiple of W, dst at least as long) before the assembly f runs.
func wrapExpSumBF16(f func(dst []uint16, x []float32, scale, sub float32) float32) func(dst []uint16, x []float32, scale, sub float32) float32 {
	return func(dst []uint16, x []float32, scale, sub float32) float32 {
		checkWidth(len(x))
		if len(dst) < len(x) {
			bad("ExpSumBF16: dst shorter than x")
		}
		return f(dst, x, scale, sub)
	}
}

func wrapMax(f func(x []float32) float32) func(x []float32) float32 {
	return func(x []float32) float32 {
		if len(x) == 0 {
			bad("Max of an empty slice")
		}
		checkWidth(len(x))
		return f(x)
	}
}

func wrapScale(f func(x []float32, a float32)) func(x []float32, a float32) {
	return func(x []float32, a float32) {
		checkWidth(len(x))
		f(x, a)
	}
}

func wrapDsFromDp(f func(dp, p []float32, d float32)) func(dp, p []float32, d float32) {
	return func(dp, p []float32, d float32) {
		checkWidth(len(dp))
		if len(p) < len(dp) {
			bad("DsFromDp: p shorter than dp")
		}
		f(dp, p, d)
	}
}

func wrapSoftcap(f func(x, g []float32, c float32)) func(x, g []float32, c float32) {
	return func(x, g []float32, c float32) {
		checkWidth(len(x))
		if g != nil && len(g) != len(x) {
			bad("Softcap: g and x differ in length")
		}
		f(x, g, c)
	}
}

func wrapALiBi(f func(x []float32, slope, pos float32)) func(x []float32, slope, pos float32) {
	return func(x []float32, slope, pos float32) {
		checkWidth(len(x))
		f(x, slope, pos)
	}
}

func wrapDot4T(f func(c []float32, ldc int, a, b []float32, ldb, n, k int)) func(c []float32, ldc int, a, b []float32, ldb, n, k int) {
	return func(c []float32, ldc int, a, b []float32, ldb, n, k int) {
		if k <= 0 || k%8 != 0 || ldc < 4 || n < 0 {
			bad("Dot4T: bad dimensions")
		}
		if len(a) < 4*k {
			bad("Dot4T: a too short")
		}
		checkMatrix("Dot4T C", len(c), n, 4, ldc)
		checkMatrix("Dot4T B", len(b), n, k, ldb)
		if n == 0 {
			return
		}
		f(c, ldc, a, b, ldb, n, k)
	}
}

// wrapConv returns a converter that checks that dst is at least as long as
// src, then runs f on the largest multiple of 16 elements and tail on the
// rest.
func wrapConv[D, S any](f, tail func(dst []D, src []S)) func(dst []D, src []S) {
	return func(dst []D, src []S) {
		if len(dst) < len(src) {
			bad("conversion: dst shorter than src")
		}
		n := len(src) &^ 15
		if n > 0 {
			f(dst[:n], src[:n])
		}
		tail(dst[n:], src[n:])
	}
}

// packFullBlocks packs checked arguments with block packers that take only
// full blocks — kt from the rows of Bᵀ (full strips, k a multiple of kStep),
// kn from the rows of B (pairs of rows, full strips) — and packs the edges
// with the reference packer (conv the scalar conversion), so the result
// equals the reference bit for bit. The AVX2 packers (kStep 16) and the NEON
// ones (kStep 8) run through it.
func packFullBlocks[T float32 | uint16](kt, kn func(dst []uint16, ldb int, src []T, ld, a, b int), kStep int,
	conv func(T) uint16, dst []uint16, ldb, p0 int, src []T, ld, k, n int, transposed bool) {
	if k == 0 || n == 0 {
		return
	}
	d := dst[W*p0:]
	strips := n / W
	if transposed {
		kFull := k / kStep * kStep
		if strips > 0 && kFull > 0 {
			kt(d, ldb, src, ld, strips, kFull)
		}
		if strips > 0 && kFull < k {
			packVNNIGo(d, ldb, kFull, src[kFull:], ld, k-kFull, strips*W, true, conv)
		}
		if n > strips*W {
			packVNNIGo(d[strips*ldb:], ldb, 0, src[strips*W*ld:], ld, k, n-strips*W, true, conv)
		}
		return
	}
	if pairs := k / 2; pairs > 0 && strips > 0 {
		kn(d, ldb, src, ld, pairs, strips)
	}
	if k%2 == 1 && strips > 0 {
		packVNNIGo(d, ldb, k-1, src[(k-1)*ld:], ld, 1, strips*W, false, conv)
	}
	if n > strips*W {
		packVNNIGo(d[strips*ldb:], ldb, 0, src[strips*W:], ld, k, n-strips*W, false, conv)
	}
}
