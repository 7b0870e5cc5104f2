package kernel

import "math/bits"

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011), the counter-based generator of flash-attn's and
// PyTorch's dropout.
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9
	philoxW1 = 0xBB67AE85
)

// Philox4x32 returns the Philox-4x32-10 output block for counter ctr and
// key.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for r := 0; r < 10; r++ {
		if r > 0 {
			k0 += philoxW0
			k1 += philoxW1
		}
		hi0, lo0 := bits.Mul32(philoxM0, c0)
		hi1, lo1 := bits.Mul32(philoxM1, c2)
		c0, c1, c2, c3 = hi1^c1^k0, lo1, hi0^c3^k1, lo0
	}
	return [4]uint32{c0, c1, c2, c3}
}

// Philox8 computes Philox4x32 for the eight counters (c0+g, c1, c2, c3),
// g = 0..7, under key (k0, k1), and stores word r of counter g in
// out[4g+r]. With AVX2 the eight run in parallel vector lanes, unless the
// active set's float32 kernels are the generic ones (FLASHATTN_KERNEL=generic
// means pure Go everywhere); the results are the same either way.
func Philox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) {
	if Active().Impl.Name != Generic.Name && archPhilox8(out, c0, c1, c2, c3, k0, k1) {
		return
	}
	philox8Generic(out, c0, c1, c2, c3, k0, k1)
}

func philox8Generic(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) {
	for g := uint32(0); g < 8; g++ {
		w := Philox4x32([4]uint32{c0 + g, c1, c2, c3}, [2]uint32{k0, k1})
		copy(out[4*g:4*g+4], w[:])
	}
}
