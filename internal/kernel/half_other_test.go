//go:build purego || (!amd64 && !arm64)

package kernel

func expectedHalfPaths() []string { return nil }
