//go:build amd64 && !purego

package kernel

import (
	"math"
	"testing"
)

// TestDecodeScoresRows16 pins the arithmetic of the AVX-512 float32 and
// fp16 scores tiles of 16 rows (the rows in the vector lanes,
// scoresF32T16AVX512; fp16, from scoresTMinWidenKeys keys, widened to a
// float32 tile first):
// each S[r][j] is two FMA chains, the even and the odd elements p below
// d&^15, the rest of d on the even chain, then the two added, bit for bit,
// on keys that are and are not a multiple of the kernel's block of 16 (the
// wrapper's padded last block), strided rows (the heads of a key side by
// side), head dimensions with a tail, and the tile inside 31 rows
// (16+8+4+2+1), where the other tiles keep their own order.
func TestDecodeScoresRows16(t *testing.T) {
	dk, ok := find(archDecode(), decodeName, "avx512")
	if !ok {
		t.Skip("no AVX-512 decode kernels on this CPU")
	}
	model := func(q, k []float32) float32 {
		var c [2]float32
		d16 := len(q) &^ 15
		for p := range q {
			ch := p % 2
			if p >= d16 {
				ch = 0
			}
			c[ch] = FMA32(q[p], k[p], c[ch])
		}
		return c[0] + c[1]
	}
	for _, tc := range []struct{ m, n, d, ldk int }{
		{16, 64, 128, 128},
		{16, 37, 128, 4 * 128},
		{16, 5, 45, 50},
		{16, 100, 256, 256},
		{31, 53, 64, 3 * 64},
		{16, scoresTMinWidenKeys + 5, 64, 2 * 64},
	} {
		q := make([]float32, tc.m*tc.d)
		for i := range q {
			q[i] = float32(math.Sin(float64(i)*0.37)) * 4
		}
		k := make([]float32, tc.n*tc.ldk)
		for i := range k {
			k[i] = F16ToF32(F32ToF16(float32(math.Cos(float64(i) * 1.3))))
		}
		h := make([]uint16, len(k))
		for i, x := range k {
			h[i] = F32ToF16(x)
		}
		for _, f := range []Format{FormatF32, FormatF16} {
			if f == FormatF16 && tc.n < scoresTMinWidenKeys {
				continue // the row kernel
			}
			lds := tc.n + 3
			s := make([]float32, tc.m*lds)
			call := func() { dk.Scores[f](s, lds, q, tc.m, Bytes(k), 4*tc.ldk, tc.n, tc.d) }
			if f == FormatF16 {
				call = func() { dk.Scores[f](s, lds, q, tc.m, Bytes(h), 2*tc.ldk, tc.n, tc.d) }
			}
			if a := testing.AllocsPerRun(2, call); a != 0 && !raceEnabled {
				t.Errorf("%v m=%d n=%d: %v allocations per call", f, tc.m, tc.n, a)
			}
			bad := 0
			for r := range 16 { // the first tile
				for j := range tc.n {
					want := model(q[r*tc.d:(r+1)*tc.d], k[j*tc.ldk:j*tc.ldk+tc.d])
					if got := s[r*lds+j]; got != want && bad < 5 {
						bad++
						t.Errorf("%v m=%d n=%d d=%d ldk=%d: S[%d][%d] = %v, want %v (diff %g)", f, tc.m, tc.n, tc.d, tc.ldk, r, j, got, want, got-want)
					}
				}
			}
		}
	}
}
