//go:build !purego

package kernel

func archPhilox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) bool { return false }
func archHalf(e Elem) []Half                                          { return nil }

var hasBF16 = false

func archFMAPeakLoop(name string) (func(iters int) int, bool) {
	if name == "neon" {
		return fmaPeakLoopNEON, true
	}
	return nil, false
}
