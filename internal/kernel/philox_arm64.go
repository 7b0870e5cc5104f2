//go:build !purego

package kernel

// archPhilox8 runs the NEON Philox8 (Advanced SIMD is always there).
func archPhilox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) bool {
	philox8NEON(out, c0, c1, c2, c3, k0, k1)
	return true
}

// archCacheSizes: arm64 has no CPUID; Linux's sysfs answers first, and
// the caller falls back to defaults.
func archCacheSizes() (l1, l2, l3 int, ok bool) { return 0, 0, 0, false }
