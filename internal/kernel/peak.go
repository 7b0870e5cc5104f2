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
