package kernel

// The assembly in kernel_amd64.s trusts its arguments. The wrappers below
// check, cheaply and before any memory is touched, every precondition that
// keeps the assembly inside the slices it is given; a violation is a bug in
// the caller (an internal invariant), so they panic.

// hasAVX2 reports AVX2 and FMA; hasAVX512 reports AVX512F and AVX512VL (the
// only AVX-512 subsets the kernels use). Both include the OS saving the
// registers.
var hasAVX2, hasAVX512 = detectCPU()

// detectCPU reads the CPUID feature bits, as golang.org/x/sys/cpu does (that
// package is not used because x/sys v0.49.0 needs a go 1.26 go.mod). On
// darwin, which enables AVX-512 state lazily, AVX-512 may go undetected and
// avx2 is then used.
func detectCPU() (avx2, avx512 bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	fma := ecx1&(1<<12) != 0
	osxsave := ecx1&(1<<27) != 0
	avx := ecx1&(1<<28) != 0
	if !osxsave || !avx {
		return false, false
	}
	xcr0, _ := xgetbv()
	osYMM := xcr0&0x6 == 0x6   // XMM and YMM state
	osZMM := xcr0&0xe6 == 0xe6 // plus opmask, ZMM0-15 upper halves, ZMM16-31
	_, ebx7, _, _ := cpuid(7, 0)
	hasAVX2 := ebx7&(1<<5) != 0
	hasF := ebx7&(1<<16) != 0
	hasVL := ebx7&(1<<31) != 0
	avx2 = osYMM && hasAVX2 && fma
	avx512 = avx2 && osZMM && hasF && hasVL
	return avx2, avx512
}

// archImpls returns the assembly implementations this CPU supports, best first.
func archImpls() []Impl {
	var impls []Impl
	if hasAVX512 {
		impls = append(impls, Impl{
			Name:      "avx512",
			MulABt:    wrapMulABt(mulABtAVX512),
			MulAddAB:  wrapMulAddAB(mulAddABAVX512),
			MulAddAtB: wrapMulAddAtB(mulAddAtBAVX512),
			ExpSum:    wrapExpSum(expSumAVX512),
			Max:       wrapMax(maxAVX512),
			Scale:     wrapScale(scaleAVX512),
			DsFromDp:  wrapDsFromDp(dsFromDpAVX512),
		})
	}
	if hasAVX2 {
		impls = append(impls, Impl{
			Name:      "avx2",
			MulABt:    wrapMulABt(mulABtAVX2),
			MulAddAB:  wrapMulAddAB(mulAddABAVX2),
			MulAddAtB: wrapMulAddAtB(mulAddAtBAVX2),
			ExpSum:    wrapExpSum(expSumAVX2),
			Max:       wrapMax(maxAVX2),
			Scale:     wrapScale(scaleAVX2),
			DsFromDp:  wrapDsFromDp(dsFromDpAVX2),
		})
	}
	return impls
}

// archFMAPeak runs the best FMA peak loop and returns its FLOPs per iteration.
func archFMAPeak(iters int) int {
	switch {
	case hasAVX512:
		FMAPeakAVX512(iters)
		return 12 * 16 * 2
	case hasAVX2:
		FMAPeakAVX2(iters)
		return 12 * 8 * 2
	}
	return fmaPeakGeneric(iters)
}

func bad(what string) {
	panic("kernel: internal error: " + what)
}

// checkMatrix panics unless a rows×cols matrix with leading dimension ld
// fits in a slice of length n.
func checkMatrix(name string, n, rows, cols, ld int) {
	if rows < 0 || cols < 0 || ld < cols {
		bad(name + ": bad dimensions")
	}
	if rows > 0 && cols > 0 && (rows-1)*ld+cols > n {
		bad(name + ": slice too short")
	}
}

func checkWidth(n int) {
	if n%W != 0 {
		bad("matrix width not a multiple of 16")
	}
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
