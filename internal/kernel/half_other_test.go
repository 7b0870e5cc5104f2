//go:build !amd64 && (purego || !arm64)

package kernel

func expectedHalfPaths() []string { return nil }
