//go:build !amd64 && (purego || !arm64)

package kernel

// archDecode: there are no assembly decode kernels on this architecture.
func archDecode() []Decode { return nil }
