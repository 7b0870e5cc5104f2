package kernel

// archFMAPeakLoop returns the assembly peak loop for name, if this CPU
// runs it.
func archFMAPeakLoop(name string) (func(iters int) int, bool) {
	switch {
	case name == "avx512" && hasAVX512:
		return func(iters int) int { FMAPeakAVX512(iters); return 12 * 16 * 2 }, true
	case name == "avx2" && hasAVX2:
		return func(iters int) int { FMAPeakAVX2(iters); return 12 * 8 * 2 }, true
	}
	return nil, false
}
