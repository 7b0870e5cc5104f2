package flashattn

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// tileSeen is one tile of a walk: keys [j0, j1) and its kind.
type tileSeen struct {
	j0, j1 int
	kind   BlockKind
}

func (t tileSeen) String() string { return fmt.Sprintf("[%d,%d)%v", t.j0, t.j1, t.kind) }

// walkTiles lists the tiles nextTile gives rows [i0, i1) of head 0 of s,
// as the forward walks them (from keySpan, maxLen keys at most).
func walkTiles(s *sequence, i0, i1, maxLen int) []tileSeen {
	rb := rowBlock{h0: 0, nh: 1, i0: i0, i1: i1}
	lo, hi := s.vis.keySpan(rb)
	var out []tileSeen
	for j := lo / 16 * 16; ; {
		j0, j1, kind := nextTile(s.vis, rb, j, hi, maxLen)
		if j0 >= hi {
			return out
		}
		out = append(out, tileSeen{j0, j1, kind})
		j = j1
	}
}

// TestTileGeometry pins the core geometry: the tiles (and their kinds) a
// row block walks along a causal diagonal, with bottom-right alignment, in
// a sliding window, under a block mask and their intersection, and the
// query rows a key block is seen by.
func TestTileGeometry(t *testing.T) {
	const F, P, E = BlockFull, BlockPartial, BlockEmpty
	diag, err := BlockMaskFromTable(BlockShape{Batch: 1, Heads: 1, SeqQ: 64, SeqK: 64, BlockQ: 32, BlockK: 32}, []uint8{1, 0, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	holes, err := BlockMaskFromTable(BlockShape{Batch: 1, Heads: 1, SeqQ: 16, SeqK: 96, BlockQ: 16, BlockK: 32}, []uint8{1, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		o             Options
		nq, nk        int
		i0, i1, block int
		want          []tileSeen
	}{
		{"causal first rows: the diagonal only", Options{Causal: true}, 64, 64, 0, 16, 64, []tileSeen{{0, 16, P}}},
		{"causal: full run, then the diagonal", Options{Causal: true}, 64, 64, 16, 32, 64, []tileSeen{{0, 16, F}, {16, 32, P}}},
		{"causal: full groups merge", Options{Causal: true}, 64, 64, 32, 48, 64, []tileSeen{{0, 32, F}, {32, 48, P}}},
		{"causal, maxLen cuts the full run", Options{Causal: true}, 64, 64, 48, 64, 32, []tileSeen{{0, 32, F}, {32, 48, F}, {48, 64, P}}},
		{"bottom-right: 4 queries, 100 keys", Options{Causal: true}, 4, 100, 0, 4, 64, []tileSeen{{0, 64, F}, {64, 96, F}, {96, 100, P}}},
		{"no key visible (Sq > Sk, causal)", Options{Causal: true}, 10, 3, 0, 4, 64, nil},
		{"window left 8", Options{Window: &Window{Left: 8, Right: 0}}, 64, 64, 32, 48, 64, []tileSeen{{16, 48, P}}},
		{"window both sides, inner full", Options{Window: &Window{Left: 40, Right: 40}}, 128, 128, 48, 64, 128, []tileSeen{{0, 32, P}, {32, 80, F}, {80, 104, P}}},
		{"block mask diagonal", Options{BlockMask: diag}, 64, 64, 32, 48, 64, []tileSeen{{32, 64, F}}},
		{"block mask ∧ causal", Options{BlockMask: diag, Causal: true}, 64, 64, 32, 48, 64, []tileSeen{{32, 48, P}}},
		{"empty block skipped", Options{BlockMask: holes}, 16, 96, 0, 16, 64, []tileSeen{{0, 32, F}, {64, 96, F}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.BlockQ, o.BlockK = 16, c.block
			var tl tiling
			if err := tl.build(Shape{Batch: 1, Heads: 1, KVHeads: 1, SeqQ: c.nq, SeqK: c.nk, Dim: 8, KVBatch: 1}, &o, tileParams{cacheBytes: 1 << 20}); err != nil {
				t.Fatal(err)
			}
			got := walkTiles(&tl.seqs[0], c.i0, c.i1, c.block)
			if !slices.Equal(got, c.want) {
				t.Errorf("tiles %v, want %v", got, c.want)
			}
			// Every tile's kind agrees with the elements it covers.
			s := &tl.seqs[0]
			for _, ts := range got {
				row := make([]float32, ts.j1-ts.j0)
				seen, hidden := 0, 0
				for i := c.i0; i < c.i1; i++ {
					clear(row)
					s.vis.hide(0, i, ts.j0, row, make([]bool, len(row)))
					for _, x := range row {
						if x == negInf {
							hidden++
						} else {
							seen++
						}
					}
				}
				if ts.kind == F && hidden > 0 || ts.kind == P && (seen == 0 || hidden == 0) {
					t.Errorf("tile %v: %d visible, %d hidden elements", ts, seen, hidden)
				}
			}
		})
	}
	// The transposed lists: which rows see a key block.
	var tl tiling
	if err := tl.build(Shape{Batch: 1, Heads: 1, SeqQ: 64, SeqK: 64, Dim: 8, KVHeads: 1, KVBatch: 1}, &Options{Causal: true, Window: &Window{Left: 8, Right: -1}}, tileParams{cacheBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if lo, hi := tl.seqs[0].vis.querySpan(0, 16, 32); lo != 16 || hi != 40 {
		t.Errorf("causal window 8: keys [16,32) seen by rows [%d,%d), want [16,40)", lo, hi)
	}
}

// ValidateShape gives the error Forward gives (the same rules), and
// builds no tensor-sized memory.
func TestValidateShape(t *testing.T) {
	good := Shape{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 30, SeqK: 40, Dim: 16}
	vl := &VarLen{CuSeqlensQ: []int32{0, 10, 30}, CuSeqlensK: []int32{0, 20, 40}}
	bad := []struct {
		s   Shape
		o   *Options
		arg string
	}{
		{Shape{Batch: 2, Heads: 3, KVHeads: 2, SeqQ: 30, SeqK: 40, Dim: 16}, nil, "k"},
		{good, &Options{Scale: -1}, "Options.Scale"},
		{good, &Options{ALiBi: []float32{1, 2, 3}}, "Options.ALiBi"},
		{good, &Options{VarLen: vl}, "q"}, // batch 2 with VarLen
		{Shape{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 30, SeqK: 41, Dim: 16}, &Options{VarLen: vl}, "Options.VarLen.CuSeqlensK"},
		{Shape{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 30, SeqK: 40, Dim: 16}, &Options{VarLen: &VarLen{CuSeqlensQ: []int32{0, 20, 10, 30}, CuSeqlensK: []int32{0, 1, 2, 40}}}, "Options.VarLen.CuSeqlensQ"},
		{Shape{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 1, SeqK: 40, Dim: 16}, &Options{KVCache: &KVCache{SeqLens: []int32{40, 41}}}, "Options.KVCache.SeqLens"},
		{Shape{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 1, SeqK: 40, Dim: 16, KVBatch: 3}, nil, "k"},
	}
	for i, c := range bad {
		err := ValidateShape(c.s, c.o)
		var ae *ArgError
		if !asArgError(err, &ae) || ae.Arg != c.arg {
			t.Errorf("case %d: ValidateShape: %v, want an *ArgError for %s", i, err, c.arg)
			continue
		}
		// Forward on tensors of that shape says the same.
		r := c.s.Resolved()
		q, k := NewTensor(r.Batch, r.SeqQ, r.Heads, r.Dim), NewTensor(r.KVBatch, r.SeqK, r.KVHeads, r.Dim)
		if _, _, ferr := Forward(q, k, k, c.o); ferr == nil || ferr.Error() != err.Error() {
			t.Errorf("case %d: Forward: %v, ValidateShape: %v", i, ferr, err)
		}
	}
	if err := ValidateShape(good, &Options{Causal: true}); err != nil {
		t.Error(err)
	}
	// A million-token shape: no tensor is built.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := ValidateShape(Shape{Batch: 1, Heads: 64, SeqQ: 1 << 20, SeqK: 1 << 20, Dim: 128}, &Options{Causal: true}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("ValidateShape of a 2^20-token shape allocated %d bytes", n)
	}
}

// CountTraffic counts a shape whose K alone would take 64 GiB without
// building any tensor: it allocates only its task lists (O(N / tile)).
func TestCountTrafficAllocatesNoTensor(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := TrafficShape{Batch: 1, Heads: 2, SeqQ: 96, SeqK: 1 << 26, Dim: 128}
	if _, err := CountTraffic(s, &Options{Causal: true}, 1<<20, PassForwardBackward); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 256<<20 {
		t.Errorf("CountTraffic allocated %d MiB (K alone would be %d MiB)", n>>20, 4*2*(1<<26)*128>>20)
	}
}

func asArgError(err error, ae **ArgError) bool { return errors.As(err, ae) }
