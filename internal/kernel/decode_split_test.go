//go:build amd64 && !purego

package kernel

import (
	"math"
	"testing"
)

// rowTileModel is the sum order of the AVX-512 float32 row tiles of 1 to
// 8 rows (and of 16 beyond scoresTMaxD): lane l of a 16-lane accumulator
// chains the FMAs of the elements p ≡ l (mod 16) below d&^15, the tail
// p = d&^15+l after them, and the fold adds the lanes as
// ((a_0+a_8)+(a_4+a_12)) … : C_w = (a_w+a_{w+8}) + (a_{w+4}+a_{w+12}),
// S = (C_0+C_2) + (C_1+C_3).
func rowTileModel(q, k []float32) float32 {
	var a [16]float32
	for p := range q {
		a[p%16] = FMA32(q[p], k[p], a[p%16])
	}
	var c [4]float32
	for w := range c {
		c[w] = (a[w] + a[w+8]) + (a[w+4] + a[w+12])
	}
	return (c[0] + c[2]) + (c[1] + c[3])
}

// TestDecodeScoresRows8 pins the arithmetic of the AVX-512 float32 scores
// tiles of 8 rows (two tiles of 4 rows over blocks of keys,
// withScoresSplit8) and of 4, alone and inside 12 (8+4) and 24 (16+8)
// rows, bit for bit to rowTileModel, on keys that do and do not fill the
// tiles' blocks and the 64 KiB blocks of the split, strided rows and head
// dimensions with a tail.
func TestDecodeScoresRows8(t *testing.T) {
	dk, ok := find(archDecode(), decodeName, "avx512")
	if !ok {
		t.Skip("no AVX-512 decode kernels on this CPU")
	}
	for _, tc := range []struct{ m, r0, n, d, ldk int }{
		{8, 0, 64, 128, 128},
		{8, 0, 301, 128, 4 * 128},
		{8, 0, 37, 45, 50},
		{4, 0, 131, 128, 128},
		{12, 0, 97, 64, 64},
		{24, 16, 53, 128, 2 * 128},
	} {
		q := make([]float32, tc.m*tc.d)
		for i := range q {
			q[i] = float32(math.Sin(float64(i)*0.37)) * 4
		}
		k := make([]float32, tc.n*tc.ldk)
		for i := range k {
			k[i] = float32(math.Cos(float64(i) * 1.3))
		}
		lds := tc.n + 3
		s := make([]float32, tc.m*lds)
		dk.Scores[FormatF32](s, lds, q, tc.m, Bytes(k), 4*tc.ldk, tc.n, tc.d)
		bad := 0
		for r := tc.r0; r < tc.m; r++ {
			for j := range tc.n {
				want := rowTileModel(q[r*tc.d:(r+1)*tc.d], k[j*tc.ldk:j*tc.ldk+tc.d])
				if got := s[r*lds+j]; got != want && bad < 5 {
					bad++
					t.Errorf("m=%d n=%d d=%d ldk=%d: S[%d][%d] = %v, want %v (diff %g)", tc.m, tc.n, tc.d, tc.ldk, r, j, got, want, got-want)
				}
			}
		}
	}
}
