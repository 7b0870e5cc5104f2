package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// scoresHeads and accumHeads call the multi-head kernel of dk for the
// cache's format.
func (c testCache) scoresHeads(dk Decode, s []float32, lds int, q []float32, heads, ldk, hs, n, d int) {
	dk.ScoresHeads[c.typ](s, lds, q, heads, c.data, ldk, hs, n, d)
}

func (c testCache) accumHeads(dk Decode, o []float32, ldo int, p []float32, ldp, heads, ldv, hs, n, d int) {
	dk.AccumHeads[c.typ](o, ldo, p, ldp, heads, c.data, ldv, hs, n, d)
}

// scoresGroup and accumGroup call the grouped-query kernel of dk for the
// cache's format, m rows per head (the multi-head kernel for m = 1).
func (c testCache) scoresGroup(dk Decode, s []float32, lds int, q []float32, m, heads, ldk, hs, n, d int) {
	if m == 1 {
		c.scoresHeads(dk, s, lds, q, heads, ldk, hs, n, d)
		return
	}
	dk.ScoresGroup[c.typ](s, lds, q, m, heads, c.data, ldk, hs, n, d)
}

func (c testCache) accumGroup(dk Decode, o []float32, ldo int, p []float32, ldp, m, heads, ldv, hs, n, d int) {
	if m == 1 {
		c.accumHeads(dk, o, ldo, p, ldp, heads, ldv, hs, n, d)
		return
	}
	dk.AccumGroup[c.typ](o, ldo, p, ldp, m, heads, c.data, ldv, hs, n, d)
}

// sub returns the cache data from byte off on.
func (c testCache) sub(off int) testCache {
	c.data = c.data[off:]
	return c
}

// TestDecodeHeads: the multi-head kernels of every set give, bit for bit,
// what the same set's one-head kernels give head by head, with the heads
// of a key side by side (the assembly's layout: ldk = heads·hs, with and
// without padding between heads) and not (ldk = heads·hs + 5, and the
// heads one after the other), on a cache that ends (starts) at a guard
// page, for head counts around the stack chunk (1024 rows) and every
// type.
func TestDecodeHeads(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	type shape struct{ heads, n, d int }
	shapes := []shape{{1, 37, 64}, {2, 33, 32}, {3, 17, 128}, {8, 200, 64}, {8, 300, 96}, {12, 5, 64}, {5, 700, 32}, {40, 30, 32}, {2, 1, 160}, {4, 0, 64}}
	for _, dk := range decodeSets() {
		for _, typ := range cacheTypes {
			ds := shapes
			if !quant(typ) {
				ds = append(ds, shape{3, 21, 24}, shape{8, 50, 8}, shape{2, 9, 45})
			}
			for _, sh := range ds {
				for _, layout := range []string{"side", "side-padded", "strided", "headwise"} {
					for _, after := range []bool{true, false} {
						name := fmt.Sprintf("%s %s heads=%d n=%d d=%d %s after=%v", dk.Name, typ, sh.heads, sh.n, sh.d, layout, after)
						checkHeadsCase(t, r, dk, typ, 1, sh.heads, sh.n, sh.d, layout, after, name)
					}
				}
			}
		}
	}
}

// TestDecodeGroup: the grouped-query kernels (m rows per KV head) of
// every set that has them give, bit for bit, what the same set's one-head
// kernels give head by head, in the layouts of TestDecodeHeads, for the
// table's rows (m = 1, 2, 4, 8; and 12, 15 and 16) and head counts that
// are multiples of a scores block's (16/m), and for the calls it sends
// head by head (other row and head counts).
func TestDecodeGroup(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	type shape struct{ m, heads, n, d int }
	shapes := []shape{{4, 8, 200, 128}, {4, 4, 37, 64}, {4, 8, 33, 96}, {4, 16, 5, 32}, {4, 4, 1, 160}, {4, 8, 0, 64},
		{4, 8, 21, 24}, {4, 6, 17, 64}, {2, 8, 19, 64}, {8, 4, 23, 64}, {3, 4, 9, 32},
		// Every m of the kernel table (1, 2, 8), odd n, n < 16, heads
		// multiples of a block's (16/m) and not.
		{1, 8, 37, 64}, {1, 5, 9, 128}, {2, 16, 45, 128}, {2, 8, 7, 64}, {2, 24, 13, 48}, {2, 4, 19, 64}, {2, 6, 5, 64},
		{8, 2, 51, 128}, {8, 8, 9, 64}, {8, 6, 3, 32}, {8, 2, 17, 80}, {8, 3, 11, 64}, {8, 1, 13, 64},
		// q8_0's scores kernels take two keys a block (w/2 heads each):
		// several blocks per pair of keys, exactly one pair, a last odd
		// key row by row.
		{4, 12, 6, 64}, {2, 8, 2, 32}, {4, 4, 3, 32},
		// Scores of 8 rows by tiles of groupTileKeys keys: several
		// tiles, the last odd.
		{8, 4, 2*groupTileKeys + 21, 64}, {8, 2, groupTileKeys + 3, 128},
		// More rows per KV head (avx512bf16: bf16 Scores of 8 to 15 rows
		// by tiles of keys, natively in tiles of 4, 8 and 16 rows, and
		// 16 rows head by head): several tiles, tails of rows and keys.
		{12, 4, 2*groupTileKeys + 37, 128}, {8, 8, 5*groupTileKeys + 3, 256}, {15, 2, 3*groupTileKeys + 9, 32},
		{16, 2, 2*groupTileKeys + 5, 64}}
	for _, dk := range decodeSets() {
		for _, typ := range cacheTypes {
			if dk.ScoresGroup[typ] == nil {
				continue
			}
			for _, sh := range shapes {
				if sh.d%typ.Block() != 0 {
					continue // q8_0: whole blocks of 32 values only
				}
				for _, layout := range []string{"side", "side-padded", "strided", "headwise"} {
					for _, after := range []bool{true, false} {
						name := fmt.Sprintf("%s %s m=%d heads=%d n=%d d=%d %s after=%v", dk.Name, typ, sh.m, sh.heads, sh.n, sh.d, layout, after)
						checkHeadsCase(t, r, dk, typ, sh.m, sh.heads, sh.n, sh.d, layout, after, name)
					}
				}
			}
		}
	}
}

// TestDecodeGroupFormats: the AVX-512 decode sets have grouped-query
// assembly (Decode.ScoresGroup, AccumGroup) for the float32, bf16, fp16
// and q8_0 caches, the formats whose group kernels _asm/decode.go
// generates (TestDecodeGroup checks them bit for bit against the one-head
// kernels), and avx512's table has each of them for every m of the
// generator: 2 and 4 rows per KV head (Scores), 2, 4 and 8 (Accum).
func TestDecodeGroupFormats(t *testing.T) {
	for _, dk := range archDecode() {
		if !strings.HasPrefix(dk.Name, "avx512") {
			continue
		}
		for _, f := range []Format{FormatF32, FormatBF16, FormatF16, FormatQ8} {
			if dk.ScoresGroup[f] == nil || dk.AccumGroup[f] == nil {
				t.Errorf("%s: no grouped-query kernels for %v", dk.Name, f)
			}
			if dk.Name != "avx512" {
				continue // avx512bf16: bf16's m = 8 goes to its native kernels
			}
			for _, m := range []int{2, 4, 8} {
				if got, want := dk.GroupFast(true, f, m, 16/m), m <= 4; got != want {
					t.Errorf("%s: GroupFast(scores, %v, m = %d) = %v, want %v", dk.Name, f, m, got, want)
				}
				if !dk.GroupFast(false, f, m, 16/m) {
					t.Errorf("%s: no grouped-query Accum kernel for %v, m = %d", dk.Name, f, m)
				}
			}
		}
	}
}

// checkHeadsCase checks the multi-head (m = 1) or grouped-query kernels of
// dk on one case against the one-head kernels, head by head.
func checkHeadsCase(t *testing.T, r *rand.Rand, dk Decode, typ cacheType, m, heads, n, d int, layout string, after bool, name string) {
	t.Helper()
	defer func() {
		if e := recover(); e != nil {
			t.Fatalf("%s: %v", name, e)
		}
	}()
	// The cache: rows = heads·n rows of d values, stride ld (row length +
	// pad units) in bytes.
	pad := 0
	if layout == "side-padded" {
		pad = 3
	}
	rows := heads * n
	if layout == "strided" {
		rows = heads*n + 5*max(n-1, 0) // room for ldk = heads·hs + 5 units
	}
	c := newTestCache(t, r, typ, max(rows, 1), d, pad, after)
	hs, ldk := c.ld, heads*c.ld
	switch layout {
	case "strided":
		ldk += 5 * formatTable[typ].unit
	case "headwise": // head h's rows one after the other: key j of head h is row h·n + j
		hs, ldk = n*c.ld, c.ld
	}
	if n > 0 && (n-1)*ldk+(heads-1)*hs+typ.RowBytes(d) > len(c.data) {
		t.Fatalf("%s: test setup: cache too short", name)
	}
	q := make([]float32, heads*m*d)
	for i := range q {
		q[i] = r.Float32()*2 - 1
	}
	lds := n + 3
	got, want := make([]float32, heads*m*lds), make([]float32, heads*m*lds)
	for i := range got {
		got[i], want[i] = canaryF32, canaryF32
	}
	c.scoresGroup(dk, got, lds, q, m, heads, ldk, hs, n, d)
	for h := 0; h < heads && n > 0; h++ {
		oneScores(dk, c.sub(h*hs), want[h*m*lds:], lds, q[h*m*d:], m, ldk, n, d)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: S[%d][%d] = %v, head by head %v", name, i/lds, i%lds, got[i], want[i])
		}
	}

	ldp, ldo := n+2, d+5
	p := make([]float32, heads*m*ldp)
	for i := range p {
		p[i] = r.Float32()*2 - 1
	}
	o1, o2 := make([]float32, heads*m*ldo), make([]float32, heads*m*ldo)
	for i := range o1 {
		o1[i] = float32(math.Cos(float64(i)))
		if i%ldo >= d {
			o1[i] = canaryF32
		}
		o2[i] = o1[i]
	}
	c.accumGroup(dk, o1, ldo, p, ldp, m, heads, ldk, hs, n, d)
	for h := 0; h < heads && n > 0; h++ {
		oneAccum(dk, c.sub(h*hs), o2[h*m*ldo:], ldo, p[h*m*ldp:], ldp, m, ldk, n, d)
	}
	for i := range o1 {
		if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
			t.Fatalf("%s: O[%d][%d] = %v, head by head %v", name, i/ldo, i%ldo, o1[i], o2[i])
		}
	}
}

// oneScores and oneAccum call the one-head kernels for m rows with key
// stride ld.
func oneScores(dk Decode, c testCache, s []float32, lds int, q []float32, m, ld, n, d int) {
	c.ld = ld
	c.scores(dk, s, lds, q, m, n, d)
}

func oneAccum(dk Decode, c testCache, o []float32, ldo int, p []float32, ldp, m, ld, n, d int) {
	c.ld = ld
	c.accum(dk, o, ldo, p, ldp, m, n, d)
}

// TestDecodeHeadsPreconditions: the multi-head kernels refuse a cache too
// short for the last head, and negative counts.
func TestDecodeHeadsPreconditions(t *testing.T) {
	for _, dk := range decodeSets() {
		k := make([]byte, 4*4*64*10)
		f32s, f32a := dk.ScoresHeads[FormatF32], dk.AccumHeads[FormatF32]
		s, q := make([]float32, 4*10), make([]float32, 4*64)
		for _, c := range []struct {
			name string
			call func()
		}{
			{"negative heads", func() { f32s(s, 10, q, -1, k, 1024, 256, 10, 64) }},
			{"negative hs", func() { f32s(s, 10, q, 4, k, 1024, -256, 10, 64) }},
			{"cache short by one element", func() { f32s(s, 10, q, 4, k[:len(k)-4], 1024, 256, 10, 64) }},
			{"last head beyond the cache", func() { f32a(q, 64, s, 10, 4, k[:400], 1024, 256, 1, 64) }},
			{"head stride not whole float32s", func() { f32s(s, 10, q, 4, k, 1024, 254, 10, 64) }},
			{"S too short", func() { f32s(s[:39], 10, q, 4, k, 1024, 256, 10, 64) }},
			{"q4 d not a multiple of 32", func() { dk.ScoresHeads[FormatQ4](s, 10, q, 2, make([]byte, 1000), 36, 18, 10, 16) }},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: %s: no panic", dk.Name, c.name)
					}
				}()
				c.call()
			}()
		}
	}
}
