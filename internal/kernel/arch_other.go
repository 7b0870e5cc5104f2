//go:build purego || (!amd64 && !arm64)

package kernel

// The architecture hooks (see arch_amd64.go and the package doc) where
// there is no assembly: on architectures without any, and everywhere
// with -tags purego. Only the pure-Go implementations are registered.
//
// An architecture that adds assembly (arm64: arch_arm64.go, built with
// "arm64 && !purego") defines these six functions itself and adds
// "&& !arm64" to this file's constraint.

func archImpls() []Impl { return nil }

func archDecode() []Decode { return nil }

func archHalf(e Elem) []Half { return nil }

func archFMAPeak(iters int) int { return fmaPeakGeneric(iters) }

func archFMAPeakLoop(name string) (func(iters int) int, bool) { return nil, false }

func archPhilox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) bool { return false }

// archCacheSizes: no portable way; the caller falls back to defaults.
func archCacheSizes() (l1, l2, l3 int, ok bool) { return 0, 0, 0, false }
