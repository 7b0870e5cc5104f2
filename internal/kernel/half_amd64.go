//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// amxUsable reports whether the CPU has the AMX tile instructions for e,
// the OS manages tile state, and this process was granted permission to
// use it (asked for once, at the first call).
func amxUsable(e Elem) bool {
	if !cpu.X86.HasAMXTile || !osAMX {
		return false
	}
	switch {
	case e == BF16 && !cpu.X86.HasAMXBF16:
		return false
	case e == F16 && !hasAMXFP16:
		return false
	}
	return amxPermitted()
}

// amxConfig returns the 64-byte tile configuration of the AMX kernels (see
// the generator's amx.go) for blocks of rows rows and depth k.
func amxConfig(rows, k int) *[64]byte {
	var cfg [64]byte
	cfg[0] = 1 // palette 1
	set := func(tile, r, colsb int) {
		cfg[16+2*tile] = byte(colsb)
		cfg[16+2*tile+1] = byte(colsb >> 8)
		cfg[48+tile] = byte(r)
	}
	set(0, rows, 64) // C
	set(1, rows, 64) // A: 32 elements of k
	set(2, 16, 64)   // B: 16 pair rows
	if kt := k % 32; kt > 0 {
		set(3, rows, 2*kt) // A tail
		set(4, kt/2, 64)   // B tail
	}
	return &cfg
}

// amxHalf returns the AMX path for e: the rows are done in blocks of 16 by
// one call, the remaining m%16 rows by a second call configured for them.
func amxHalf(e Elem) Half {
	kern := amxBF16
	if e == F16 {
		kern = amxF16
	}
	mul := func(acc bool) func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
		return func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
			if mb := m / 16; mb > 0 {
				kern(amxConfig(16, k), c, ldc, a, lda, b, ldb, mb, 16, n, k, acc)
			}
			if r := m % 16; r > 0 {
				i := m - r
				kern(amxConfig(r, k), c[i*ldc:], ldc, a[i*lda:], lda, b, ldb, 1, r, n, k, acc)
			}
		}
	}
	return Half{
		Name:   "amx",
		Elem:   e,
		Mul:    wrapHalf("amx Mul", mul(false)),
		MulAdd: wrapHalf("amx MulAdd", mul(true)),
		Peak: func(iters int) int {
			amxPeak(amxPeakConfig(), iters, e == F16)
			return 4 * 16 * 16 * 32 * 2
		},
	}
}

// amxPeakConfig configures tiles 0-7 as full 16×64-byte tiles.
func amxPeakConfig() *[64]byte {
	var cfg [64]byte
	cfg[0] = 1
	for t := 0; t < 8; t++ {
		cfg[16+2*t] = 64
		cfg[48+t] = 16
	}
	return &cfg
}
