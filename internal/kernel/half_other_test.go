//go:build !amd64 || purego

package kernel

func expectedHalfPaths() []string { return nil }
