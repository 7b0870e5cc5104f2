package kernel

// FMAPeakLoop returns the FMA peak loop of the instruction set that the
// implementation named name uses, so that a benchmark can divide by the
// peak of the path that actually ran rather than the widest one the CPU
// has: "avx512" runs FMAPeakAVX512, "avx2" runs FMAPeakAVX2, and "generic"
// runs a plain Go loop of 12 independent multiply-add chains (scalar, as
// the generic kernels are). loop(iters) runs iters iterations and returns
// the float32 FLOPs of one iteration. ok is false for a name this CPU
// cannot run or that has no peak loop.
func FMAPeakLoop(name string) (loop func(iters int) (flopsPerIter int), ok bool) {
	if name == Generic.Name {
		return fmaPeakGeneric, true
	}
	return archFMAPeakLoop(name)
}

// FMAPeak runs iters iterations of a loop of independent fused multiply-add
// chains with the widest vector instructions this CPU supports (see
// FMAPeakAVX512 and FMAPeakAVX2; elsewhere a plain Go loop) and returns how
// many float32 FLOPs one iteration performs. Timing it gives the machine's
// single-core peak, the yardstick for the matrix-product benchmarks.
func FMAPeak(iters int) (flopsPerIter int) {
	return archFMAPeak(iters)
}

// fmaPeakGeneric is a Go loop of 12 independent multiply-add chains: 24
// FLOPs per iteration.
func fmaPeakGeneric(iters int) int {
	var a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11 float32
	x, y := float32(iters%3)+0.5, float32(iters%5)+0.25
	for i := 0; i < iters; i++ {
		a0 = a0*x + y
		a1 = a1*x + y
		a2 = a2*x + y
		a3 = a3*x + y
		a4 = a4*x + y
		a5 = a5*x + y
		a6 = a6*x + y
		a7 = a7*x + y
		a8 = a8*x + y
		a9 = a9*x + y
		a10 = a10*x + y
		a11 = a11*x + y
	}
	if a0+a1+a2+a3+a4+a5+a6+a7+a8+a9+a10+a11 == 1 { // keeps the loop alive
		return 25
	}
	return 24
}
