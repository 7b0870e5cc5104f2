//go:build amd64 && !purego

package kernel

// wrapSoftcap and wrapALiBi check the arguments of the AVX2 softcap and
// ALiBi kernels (see wrap_asm.go for the other wrappers).

func wrapSoftcap(x, g []float32, c float32) {
	checkWidth(len(x))
	if g != nil && len(g) != len(x) {
		bad("Softcap: g and x differ in length")
	}
	softcapAVX2(x, g, c)
}

func wrapALiBi(x []float32, slope, pos float32) {
	checkWidth(len(x))
	alibiAVX2(x, slope, pos)
}
