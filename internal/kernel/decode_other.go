//go:build !amd64

package kernel

// archDecode: there are no assembly decode kernels on this architecture.
func archDecode() []Decode { return nil }
