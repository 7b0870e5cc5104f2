//go:build !amd64 && (purego || !arm64)

package kernel

// archFMAPeakLoop: only the generic loop exists off amd64.
func archFMAPeakLoop(name string) (func(iters int) int, bool) { return nil, false }
