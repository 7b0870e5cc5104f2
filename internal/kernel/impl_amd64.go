package kernel

import "golang.org/x/sys/cpu"

// The assembly in kernel_amd64.s trusts its arguments. The wrappers below
// check, cheaply and before any memory is touched, every precondition that
// keeps the assembly inside the slices it is given; a violation is a bug in
// the caller (an internal invariant), so they panic.

// hasAVX2 reports AVX2 and FMA; hasAVX512 reports AVX512F and AVX512VL (the
// only AVX-512 subsets the kernels use). golang.org/x/sys/cpu also checks
// that the OS saves the registers.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL
)

// archImpls returns the assembly implementations this CPU supports, best first.
func archImpls() []Impl {
	var impls []Impl
	if hasAVX512 {
		im := Impl{
			Name:      "avx512",
			MulABt:    wrapMulABt(mulABtAVX512),
			MulAddAB:  wrapMulAddAB(mulAddABAVX512),
			MulAddAtB: wrapMulAddAtB(mulAddAtBAVX512),
			ExpSum:    wrapExpSum(expSumAVX512),
			Max:       wrapMax(maxAVX512),
			Scale:     wrapScale(scaleAVX512),
			DsFromDp:  wrapDsFromDp(dsFromDpAVX512),
			Dot:       dotFMA,
			Dot4T:     wrapDot4T(dot4TAVX2),
			Softcap:   wrapSoftcap,
			ALiBi:     wrapALiBi,
		}
		setConverters(&im, true)
		setPackers(&im, true)
		impls = append(impls, im)
	}
	if hasAVX2 {
		im := Impl{
			Name:      "avx2",
			MulABt:    wrapMulABt(mulABtAVX2),
			MulAddAB:  wrapMulAddAB(mulAddABAVX2),
			MulAddAtB: wrapMulAddAtB(mulAddAtBAVX2),
			ExpSum:    wrapExpSum(expSumAVX2),
			Max:       wrapMax(maxAVX2),
			Scale:     wrapScale(scaleAVX2),
			DsFromDp:  wrapDsFromDp(dsFromDpAVX2),
			Dot:       dotFMA,
			Dot4T:     wrapDot4T(dot4TAVX2),
			Softcap:   wrapSoftcap,
			ALiBi:     wrapALiBi,
		}
		setConverters(&im, false)
		setPackers(&im, false)
		impls = append(impls, im)
	}
	return impls
}

// archFMAPeak runs the best FMA peak loop and returns its FLOPs per iteration.
func archFMAPeak(iters int) int {
	switch {
	case hasAVX512:
		return fmaPeakLoopAVX512(iters)
	case hasAVX2:
		return fmaPeakLoopAVX2(iters)
	}
	return fmaPeakGeneric(iters)
}

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

// archPhilox8 runs the AVX2 Philox8 if the CPU has AVX2.
func archPhilox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) bool {
	if !hasAVX2 {
		return false
	}
	philox8AVX2(out, c0, c1, c2, c3, k0, k1)
	return true
}

func wrapSoftcap(x, g []float32, c float32) {
	checkWidth(len(x))
	if g != nil && len(g) != len(x) {
		bad("Softcap: g and x differ in length")
	}
	softcapAVX2(x, g, c)
}

func wrapALiBi(x []float32, slope, pos float32) {
	checkWidth(len(x))
	alibiAVX2(x, slope, pos)
}
