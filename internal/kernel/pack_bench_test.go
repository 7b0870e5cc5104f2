package kernel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkPackVNNI times the packers of every implementation at the
// attention core's shapes, in bytes read plus written per second:
//
//	K: the rows of K (keys × head dim, transposed) into the B of S = Q·Kᵀ
//	V: the rows of V (keys × head dim) into the B of O += P·V
//
// from float32 (rounded to bf16 or f16) or from 16-bit rows (copied).
func BenchmarkPackVNNI(b *testing.B) {
	requireSets(b)
	r := rand.New(rand.NewPCG(31, 32))
	const keys, dim = 512, 128
	src := randSlice(r, keys*dim)
	src16 := make([]uint16, len(src))
	for i, v := range src {
		src16[i] = F32ToBF16(v)
	}
	for _, im := range Available() {
		for _, c := range []struct {
			name string
			tr   bool
			e    Elem // 0: 16-bit source
		}{
			{"K/f32-bf16", true, BF16}, {"K/f32-f16", true, F16}, {"K/16bit", true, 0},
			{"V/f32-bf16", false, BF16}, {"V/f32-f16", false, F16}, {"V/16bit", false, 0},
		} {
			k, n := keys, dim // V: k = keys
			if c.tr {
				k, n = dim, keys // K: n = keys
			}
			ldb := W * k
			dst := make([]uint16, Pad(n)/W*ldb)
			b.Run(fmt.Sprintf("%s/%s/keys=%d/dim=%d", c.name, im.Name, keys, dim), func(b *testing.B) {
				in := 4
				if c.e == 0 {
					in = 2
				}
				b.SetBytes(int64(keys * dim * (in + 2)))
				for b.Loop() {
					if c.e == 0 {
						im.PackVNNI16Into(dst, ldb, 0, src16, dim, k, n, c.tr)
					} else {
						im.PackVNNIInto(dst, ldb, 0, src, dim, k, n, c.tr, c.e)
					}
				}
			})
		}
	}
}

// BenchmarkTransposeRound times TransposeRound of every implementation on
// a 64×64 float32 tile (a block of P or dS), bytes read plus written per
// second, and RoundF32 on the same tile in place.
func BenchmarkTransposeRound(b *testing.B) {
	requireSets(b)
	r := rand.New(rand.NewPCG(33, 34))
	const rows, cols = 64, 64
	src := randSlice(r, rows*cols)
	dst := make([]uint16, rows*cols)
	for _, im := range Available() {
		for _, e := range []Elem{BF16, F16} {
			b.Run(fmt.Sprintf("TransposeRound/%s/%s", e, im.Name), func(b *testing.B) {
				b.SetBytes(rows * cols * 6)
				for b.Loop() {
					im.TransposeRound(dst, rows, src, cols, rows, cols, e)
				}
			})
			b.Run(fmt.Sprintf("RoundF32/%s/%s", e, im.Name), func(b *testing.B) {
				x := append([]float32(nil), src...)
				b.SetBytes(rows * cols * 8)
				for b.Loop() {
					im.RoundF32(x, e)
				}
			})
		}
	}
}
