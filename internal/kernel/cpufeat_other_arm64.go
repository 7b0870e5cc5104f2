//go:build !purego && !linux && !darwin

package kernel

// Elsewhere (Windows, the BSDs) the 16-bit features are not detected, so
// the NEON 16-bit paths are not offered; the float32 NEON kernels are.
func detectBF16() bool { return false }

func detectFHM() bool { return false }
