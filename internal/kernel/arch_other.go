//go:build !amd64

package kernel

func archImpls() []Impl { return nil }
