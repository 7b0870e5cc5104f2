//go:build !amd64 && (purego || !arm64)

package kernel

func archFMAPeak(iters int) int { return fmaPeakGeneric(iters) }
