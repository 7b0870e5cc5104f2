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

func wrapMulAddAB(f func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)) func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	return func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
		checkWidth(n)
		checkMatrix("MulAddAB C", len(c), m, n, ldc)
		checkMatrix("MulAddAB A", len(a), m, k, lda)
		checkMatrix("MulAddAB B", len(b), k, n, ldb)
		if m == 0 || n == 0 || k == 0 {
			return
		}
		f(c, ldc, a, lda, b, ldb, m, n, k)
	}
}

func wrapMulAddAtB(f func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)) func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	return func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
		checkWidth(n)
		checkMatrix("MulAddAtB C", len(c), m, n, ldc)
		checkMatrix("MulAddAtB A", len(a), k, m, lda)
		checkMatrix("MulAddAtB B", len(b), k, n, ldb)
		if m == 0 || n == 0 || k == 0 {
			return
		}
		f(c, ldc, a, lda, b, ldb, m, n, k)
	}
}

func wrapExpSum(f func(x []float32, scale, sub float32) float32) func(x []float32, scale, sub float32) float32 {
	return func(x []float32, scale, sub float32) float32 {
		checkWidth(len(x))
		return f(x, scale, sub)
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
