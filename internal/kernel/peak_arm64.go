//go:build !purego

package kernel

// archFMAPeakLoop returns the NEON peak loop for "neon".
func archFMAPeakLoop(name string) (func(iters int) int, bool) {
	if name == "neon" {
		return fmaPeakLoopNEON, true
	}
	return nil, false
}
