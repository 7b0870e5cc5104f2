//go:build (amd64 || arm64) && !purego

package kernel

import (
	"fmt"
	"testing"
)

// TestScoresGroupTiles: a grouped-query Scores with no group kernel for
// its rows per KV head (8 on AVX-512) takes a cache of heads side by side
// by tiles of groupTileKeys keys, every head of a tile before the next
// tile (not one pass over all the keys per head), and gives the bits of
// the one-head Scores over all the keys head by head; 16 rows, whose
// kernels change form with the keys of a call, and heads not side by side
// go head by head over all the keys.
func TestScoresGroupTiles(t *testing.T) {
	const heads, d = 4, 32
	isa := decodeISA{name: "test", lanes: 16}
	g := &GenericDecode
	for _, c := range []struct {
		m, n       int
		sideBySide bool
		tiled      bool
	}{
		{8, 3*groupTileKeys + 5, true, true},
		{8, groupTileKeys, true, true},
		{2, 2*groupTileKeys + 1, true, true},
		{16, 2*groupTileKeys + 3, true, false},
		{8, 2*groupTileKeys + 3, false, false},
	} {
		t.Run(fmt.Sprintf("m=%d/n=%d/sideBySide=%v", c.m, c.n, c.sideBySide), func(t *testing.T) {
			f := FormatF32
			rb := f.RowBytes(d)
			ldk, hs := heads*rb, rb
			if !c.sideBySide {
				ldk, hs = rb, c.n*rb
			}
			k := make([]byte, heads*c.n*rb)
			vals := make([]float32, d)
			for v := 0; v < heads*c.n; v++ {
				for i := range vals {
					vals[i] = float32((v*7+i*3)%11) - 5
				}
				if err := f.Quantize(k[v*rb:(v+1)*rb], vals); err != nil {
					t.Fatal(err)
				}
			}
			q := make([]float32, heads*c.m*d)
			for i := range q {
				q[i] = float32(i%13)/4 - 1.5
			}
			type call struct{ j0, h, n int }
			var calls []call
			one := func(s []float32, lds int, qq []float32, m int, kk []byte, ldk, n, d int) {
				off := len(k) - len(kk)
				calls = append(calls, call{off / ldk, off % ldk / hs, n})
				g.Scores[f](s, lds, qq, m, kk, ldk, n, d)
			}
			if !c.sideBySide {
				one = func(s []float32, lds int, qq []float32, m int, kk []byte, ldk, n, d int) {
					calls = append(calls, call{0, (len(k) - len(kk)) / hs, n})
					g.Scores[f](s, lds, qq, m, kk, ldk, n, d)
				}
			}
			lds := c.n + 3
			got := make([]float32, heads*c.m*lds)
			wrapScoresGroup(isa, f, one, nil)(got, lds, q, c.m, heads, k, ldk, hs, c.n, d)
			want := make([]float32, len(got))
			for h := 0; h < heads; h++ {
				g.Scores[f](want[h*c.m*lds:], lds, q[h*c.m*d:], c.m, k[h*hs:], ldk, c.n, d)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("s[%d] = %v, want %v (head by head)", i, got[i], want[i])
				}
			}
			var wantCalls []call
			tile := c.n
			if c.tiled {
				tile = groupTileKeys
			}
			for j0 := 0; j0 < c.n; j0 += tile {
				for h := 0; h < heads; h++ {
					wantCalls = append(wantCalls, call{j0, h, min(tile, c.n-j0)})
				}
			}
			if fmt.Sprint(calls) != fmt.Sprint(wantCalls) {
				t.Errorf("calls {key, head, keys} = %v, want %v", calls, wantCalls)
			}
		})
	}
}
