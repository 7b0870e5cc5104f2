//go:build !amd64

package kernel

func expectedHalfPaths() []string { return nil }
