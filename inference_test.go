package flashattn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// rope64 rotates row x (in place, float64 arithmetic) as Rotary documents:
// r.Dim channels from channel r.Offset.
func rope64(x []float32, r *Rotary, pos int) {
	x = x[r.Offset:]
	half := r.Dim / 2
	for t := 0; t < half; t++ {
		i, j := t, t+half
		if r.Interleaved {
			i, j = 2*t, 2*t+1
		}
		c, s := float64(r.Cos[pos*half+t]), float64(r.Sin[pos*half+t])
		a, b := float64(x[i]), float64(x[j])
		x[i], x[j] = float32(a*c-b*s), float32(a*s+b*c)
	}
}

// flashRopeAdvances reports whether a KV-cache call with these options rotates
// its query row i at SeqLens + i rather than at SeqLens: flash-attn's rule,
// "causal or local", local meaning a window other than (-1, -1).
func flashRopeAdvances(causal bool, w *Window) bool {
	return causal || w != nil && (w.Left >= 0 || w.Right >= 0)
}

func ropeTables(maxPos, dim int) *Rotary {
	r := &Rotary{Dim: dim, Cos: make([]float32, maxPos*dim/2), Sin: make([]float32, maxPos*dim/2)}
	for p := 0; p < maxPos; p++ {
		for t := 0; t < dim/2; t++ {
			theta := float64(p) * math.Pow(10000, -2*float64(t)/float64(dim))
			r.Cos[p*dim/2+t], r.Sin[p*dim/2+t] = float32(math.Cos(theta)), float32(math.Sin(theta))
		}
	}
	return r
}

// withOffset sets r.Offset and returns r.
func withOffset(r *Rotary, offset int) *Rotary {
	r.Offset = offset
	return r
}

// kvCase is one flash_attn_with_kvcache call.
type kvCase struct {
	name        string
	b, hq, hk   int
	d, capacity int
	ends, pads  []int32 // SeqLens and LeftPad (nil: none)
	batchIdx    []int32 // nil: identity
	snew, sq    int
	paged       int // block size (0: contiguous)
	rotary      int // rotary dim (0: none)
	rotOffset   int // Rotary.Offset
	interleaved bool
	causal      bool
	window      *Window
	softcap     float32
	alibi       bool
	slopeMax    float32 // with alibi: 0, slopes [hq] of |N(0,1)|·0.1; > 0, flash-attn's [b, hq] uniform in [0, slopeMax)
	splits      int
	dt          DType // the cache's type (zero: Float32); the reference reads the cache as it holds it
	workers     int   // Options.Workers
}

// TestKVCacheAppendRotary: new keys appended in place (rotated), queries
// rotated, left padding, cache batch indexes, paged and contiguous caches,
// against the reference on the expected cache contents, per sequence.
func TestKVCacheAppendRotary(t *testing.T) {
	for _, tc := range []kvCase{
		{name: "decode", b: 3, hq: 8, hk: 2, d: 64, capacity: 300, ends: []int32{0, 77, 250}, snew: 1, sq: 1, rotary: 32, interleaved: true, causal: true},
		{name: "neox", b: 2, hq: 4, hk: 4, d: 40, capacity: 200, ends: []int32{50, 120}, snew: 1, sq: 1, rotary: 40},
		{name: "prefill-causal", b: 2, hq: 6, hk: 3, d: 32, capacity: 180, ends: []int32{10, 60}, snew: 37, sq: 37, rotary: 16, causal: true},
		{name: "noncausal-q-at-end", b: 2, hq: 4, hk: 2, d: 32, capacity: 160, ends: []int32{30, 99}, snew: 5, sq: 5, rotary: 32},
		{name: "leftpad+batchidx", b: 3, hq: 4, hk: 2, d: 48, capacity: 128, ends: []int32{40, 100, 64}, pads: []int32{7, 0, 64}, batchIdx: []int32{4, 0, 2}, snew: 3, sq: 3, rotary: 24, causal: true},
		{name: "paged", b: 2, hq: 8, hk: 2, d: 64, capacity: 256, ends: []int32{100, 200}, snew: 2, sq: 2, paged: 32, rotary: 64, interleaved: true, causal: true},
		{name: "paged-leftpad", b: 2, hq: 4, hk: 4, d: 32, capacity: 192, ends: []int32{70, 130}, pads: []int32{33, 5}, snew: 4, sq: 4, paged: 16, rotary: 32},
		{name: "window+softcap+alibi", b: 2, hq: 4, hk: 2, d: 32, capacity: 200, ends: []int32{80, 150}, snew: 6, sq: 6, rotary: 32, causal: true, window: &Window{Left: 40, Right: 0}, softcap: 5, alibi: true},
		{name: "no-new-keys", b: 2, hq: 4, hk: 2, d: 32, capacity: 100, ends: []int32{40, 99}, sq: 1},
		// Rotary without new keys (a verification step): the queries still
		// rotate, at SeqLens (+ i when causal), LeftPad included.
		{name: "no-new-keys-rotary", b: 2, hq: 4, hk: 2, d: 32, capacity: 100, ends: []int32{40, 95}, sq: 3, rotary: 32, causal: true},
		{name: "no-new-keys-rotary-leftpad-causal", b: 3, hq: 4, hk: 2, d: 32, capacity: 100, ends: []int32{40, 95, 12}, pads: []int32{9, 0, 12}, sq: 4, rotary: 16, rotOffset: 16, interleaved: true, causal: true},
		{name: "no-new-keys-rotary-noncausal-paged", b: 2, hq: 4, hk: 2, d: 32, capacity: 128, ends: []int32{40, 99}, pads: []int32{5, 0}, sq: 2, paged: 16, rotary: 16, rotOffset: 8},
		{name: "splits", b: 1, hq: 8, hk: 2, d: 64, capacity: 1000, ends: []int32{999}, snew: 1, sq: 1, rotary: 64, splits: 7},
		// Rotary.Offset: MLA rotates the last channels; a middle range.
		{name: "offset-last", b: 2, hq: 8, hk: 1, d: 96, capacity: 128, ends: []int32{20, 90}, snew: 2, sq: 2, rotary: 32, rotOffset: 64, causal: true},
		{name: "offset-last-interleaved", b: 2, hq: 4, hk: 2, d: 48, capacity: 96, ends: []int32{0, 50}, snew: 1, sq: 1, rotary: 16, rotOffset: 32, interleaved: true},
		// Window{-1, -1} hides nothing and is not local (flash-attn's
		// window_size (-1, -1)): the queries rotate at SeqLens, as without
		// a window; a window bounded on one side is local.
		{name: "window-unbounded-rotary", b: 2, hq: 4, hk: 2, d: 32, capacity: 96, ends: []int32{20, 60}, snew: 3, sq: 3, rotary: 32, window: &Window{Left: -1, Right: -1}},
		{name: "window-unbounded-rotary-no-new-keys", b: 2, hq: 4, hk: 2, d: 32, capacity: 96, ends: []int32{20, 60}, pads: []int32{3, 0}, sq: 4, rotary: 16, window: &Window{Left: -1, Right: -1}},
		{name: "window-left-only-rotary", b: 2, hq: 4, hk: 2, d: 32, capacity: 96, ends: []int32{20, 60}, snew: 3, sq: 3, rotary: 32, window: &Window{Left: -1, Right: 1}},
		{name: "offset-middle-paged", b: 2, hq: 4, hk: 2, d: 64, capacity: 128, ends: []int32{30, 77}, snew: 3, sq: 3, paged: 32, rotary: 24, rotOffset: 10, causal: true},
	} {
		t.Run(tc.name, func(t *testing.T) { checkKVCase(t, tc) })
	}
}

func checkKVCase(t *testing.T, tc kvCase) {
	r := rand.New(rand.NewPCG(uint64(len(tc.name)), 3))
	cacheRows := tc.b
	for _, i := range tc.batchIdx {
		cacheRows = max(cacheRows, int(i)+1)
	}
	// The logical cache of each cache row: [capacity, hk, d].
	logical := make([][]float32, cacheRows)
	for i := range logical {
		logical[i] = randSlice(r, tc.capacity*tc.hk*tc.d)
	}
	logicalV := make([][]float32, cacheRows)
	for i := range logicalV {
		logicalV[i] = randSlice(r, tc.capacity*tc.hk*tc.d)
	}
	if tc.dt != Float32 { // the values a cache of type dt holds: stored and read back
		for _, l := range [][][]float32{logical, logicalV} {
			for i := range l {
				c := newCache(tc.dt, 1, tc.capacity, tc.hk, tc.d)
				if err := Convert(c, Dense(l[i], 1, tc.capacity, tc.hk, tc.d)); err != nil {
					t.Fatal(err)
				}
				l[i] = asFloat32(t, c).Data
			}
		}
	}
	row := func(b int) int {
		if tc.batchIdx != nil {
			return int(tc.batchIdx[b])
		}
		return b
	}
	// Physical layout: contiguous [rows, capacity, hk, d], or shuffled pages.
	var k, v Tensor
	var table []int32
	perSeq := 0
	if tc.paged == 0 {
		k, v = NewTensor(cacheRows, tc.capacity, tc.hk, tc.d), NewTensor(cacheRows, tc.capacity, tc.hk, tc.d)
		for i := range logical {
			copy(k.Data[i*tc.capacity*tc.hk*tc.d:], logical[i])
			copy(v.Data[i*tc.capacity*tc.hk*tc.d:], logicalV[i])
		}
	} else {
		perSeq = tc.capacity / tc.paged
		nblocks := tc.b*perSeq + 3
		k, v = NewTensor(nblocks, tc.paged, tc.hk, tc.d), NewTensor(nblocks, tc.paged, tc.hk, tc.d)
		perm := r.Perm(nblocks)
		table = make([]int32, tc.b*perSeq)
		rowSize := tc.paged * tc.hk * tc.d
		for b := 0; b < tc.b; b++ {
			for j := 0; j < perSeq; j++ {
				blk := perm[b*perSeq+j]
				table[b*perSeq+j] = int32(blk)
				copy(k.Data[blk*rowSize:(blk+1)*rowSize], logical[b][j*rowSize:])
				copy(v.Data[blk*rowSize:(blk+1)*rowSize], logicalV[b][j*rowSize:])
			}
		}
	}
	q := randSlice(r, tc.b*tc.sq*tc.hq*tc.d)
	c := &KVCache{SeqLens: append([]int32(nil), tc.ends...), LeftPad: tc.pads, BatchIdx: tc.batchIdx,
		BlockTable: table, BlocksPerSeq: perSeq, NumSplits: tc.splits}
	var knew, vnew []float32
	if tc.snew > 0 {
		knew, vnew = randSlice(r, tc.b*tc.snew*tc.hk*tc.d), randSlice(r, tc.b*tc.snew*tc.hk*tc.d)
		c.KNew, c.VNew = Dense(append([]float32(nil), knew...), tc.b, tc.snew, tc.hk, tc.d), Dense(append([]float32(nil), vnew...), tc.b, tc.snew, tc.hk, tc.d)
	}
	var rot *Rotary
	if tc.rotary > 0 {
		rot = ropeTables(tc.capacity+tc.sq, tc.rotary)
		rot.Interleaved, rot.Offset = tc.interleaved, tc.rotOffset
		c.Rotary = rot
	}
	var slopes []float32
	switch {
	case tc.alibi && tc.slopeMax > 0:
		slopes = make([]float32, tc.b*tc.hq)
		for i := range slopes {
			slopes[i] = float32(r.Float64()) * tc.slopeMax
		}
	case tc.alibi:
		slopes = randSlice(r, tc.hq)
		for i := range slopes {
			slopes[i] = float32(math.Abs(float64(slopes[i]))) * 0.1
		}
	}
	if tc.dt != Float32 {
		kt, vt := newCache(tc.dt, k.Batch, k.Seq, k.Heads, k.Dim), newCache(tc.dt, v.Batch, v.Seq, v.Heads, v.Dim)
		if err := Convert(kt, k); err != nil {
			t.Fatal(err)
		}
		if err := Convert(vt, v); err != nil {
			t.Fatal(err)
		}
		k, v = kt, vt
	}
	opt := &Options{KVCache: c, Causal: tc.causal, Window: tc.window, Softcap: tc.softcap, ALiBi: slopes, Workers: tc.workers}
	out, lse, err := Forward(Dense(q, tc.b, tc.sq, tc.hq, tc.d), k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	kf, vf := k, v
	if tc.dt != Float32 {
		kf, vf = asFloat32(t, k), asFloat32(t, v)
	}
	// stored returns the key and value rows of KV head hk that the cache
	// holds at position pos of sequence b.
	stored := func(b, lr, pos, hk int) (sk, sv []float32) {
		tb, r := lr, pos
		if tc.paged > 0 {
			tb, r = int(table[b*perSeq+pos/tc.paged]), pos%tc.paged
		}
		off := ((tb*kf.Seq+r)*tc.hk + hk) * tc.d
		return kf.Data[off:][:tc.d], vf.Data[off:][:tc.d]
	}
	for b := 0; b < tc.b; b++ {
		end, pad := int(tc.ends[b]), 0
		if tc.pads != nil {
			pad = int(tc.pads[b])
		}
		nk := end + tc.snew - pad
		ek := make([]float32, 0, nk*tc.hk*tc.d)
		ev := make([]float32, 0, nk*tc.hk*tc.d)
		lr := row(b)
		ek = append(ek, logical[lr][pad*tc.hk*tc.d:end*tc.hk*tc.d]...)
		ev = append(ev, logicalV[lr][pad*tc.hk*tc.d:end*tc.hk*tc.d]...)
		for i := 0; i < tc.snew; i++ {
			for hk := 0; hk < tc.hk; hk++ {
				kr := append([]float32(nil), knew[((b*tc.snew+i)*tc.hk+hk)*tc.d:][:tc.d]...)
				if rot != nil {
					rope64(kr, rot, end+i) // flash-attn's absolute cache position
				}
				vr := vnew[((b*tc.snew+i)*tc.hk+hk)*tc.d:][:tc.d]
				if tc.dt != Float32 { // as stored, within one step of the type
					gk, gv := stored(b, lr, end+i, hk)
					if err := withinStep(tc.dt, gk, kr); err != nil {
						t.Fatalf("sequence %d new key %d head %d: %v", b, i, hk, err)
					}
					if err := withinStep(tc.dt, gv, vr); err != nil {
						t.Fatalf("sequence %d new value %d head %d: %v", b, i, hk, err)
					}
					kr, vr = gk, gv
				}
				ek = append(ek, kr...)
				ev = append(ev, vr...)
			}
		}
		qb := append([]float32(nil), q[b*tc.sq*tc.hq*tc.d:(b+1)*tc.sq*tc.hq*tc.d]...)
		if rot != nil {
			for i := 0; i < tc.sq; i++ {
				pos := end
				if flashRopeAdvances(tc.causal, tc.window) {
					pos += i
				}
				for h := 0; h < tc.hq; h++ {
					rope64(qb[(i*tc.hq+h)*tc.d:][:tc.d], rot, pos)
				}
			}
		}
		par := reference.Params{Batch: 1, SeqQ: tc.sq, SeqK: nk, Heads: tc.hq, KVHeads: tc.hk, HeadDim: tc.d,
			Causal: tc.causal, Softcap: float64(tc.softcap)}
		if tc.window != nil {
			par.Window, par.WindowLeft, par.WindowRight = true, tc.window.Left, tc.window.Right
		}
		if slopes != nil {
			par.ALiBi = to64(slopes[:tc.hq])
			if len(slopes) > tc.hq { // [b, hq]
				par.ALiBi = to64(slopes[b*tc.hq:][:tc.hq])
			}
		}
		gotO := out.Data[b*tc.sq*tc.hq*tc.d : (b+1)*tc.sq*tc.hq*tc.d]
		gotL := lse[b*tc.hq*tc.sq : (b+1)*tc.hq*tc.sq]
		if err := checkOverCache(tc.dt, plainPar(par), qb, ek, ev, gotO, gotL); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
		if tc.dt != Float32 {
			continue // the stored new rows were checked above
		}
		// The cache now holds the rotated new keys and the new values.
		for i := 0; i < tc.snew; i++ {
			pos := end + i
			for hk := 0; hk < tc.hk; hk++ {
				for dd := 0; dd < tc.d; dd++ {
					sk, sv := stored(b, lr, pos, hk)
					gk, gv := sk[dd], sv[dd]
					wk := ek[((end-pad+i)*tc.hk+hk)*tc.d+dd]
					wv := ev[((end-pad+i)*tc.hk+hk)*tc.d+dd]
					if math.Abs(float64(gk-wk)) > 1e-6 || gv != wv {
						t.Fatalf("sequence %d: cache position %d head %d dim %d holds k %v v %v, want %v %v", b, pos, hk, dd, gk, gv, wk, wv)
					}
				}
			}
		}
	}
}

// TestNumSplitsMerge: forcing the key split (1, 3, 7 parts) changes the
// result by at most 2e-6, including sequences whose parts are empty.
func TestNumSplitsMerge(t *testing.T) {
	const b, hq, hk, d, capacity = 3, 8, 2, 64, 700
	r := rand.New(rand.NewPCG(8, 8))
	k, v := Dense(randSlice(r, b*capacity*hk*d), b, capacity, hk, d), Dense(randSlice(r, b*capacity*hk*d), b, capacity, hk, d)
	q := Dense(randSlice(r, b*hq*d), b, 1, hq, d)
	lens := []int32{700, 5, 0}
	var ref []float32
	for _, splits := range []int{1, 3, 7, 60} {
		out, lse, err := Forward(q, k, v, &Options{KVCache: &KVCache{SeqLens: lens, NumSplits: splits}})
		if err != nil {
			t.Fatal(err)
		}
		res := append(out.Data, lse...)
		if ref == nil {
			ref = res
			continue
		}
		for i := range ref {
			if d := math.Abs(float64(res[i] - ref[i])); !(d <= 2e-6) && !(math.IsInf(float64(ref[i]), -1) && ref[i] == res[i]) {
				t.Fatalf("%d splits: element %d is %v, unsplit %v", splits, i, res[i], ref[i])
			}
		}
	}
}

// TestMergeStates: attention over keys split into disjoint ranges, merged,
// equals attention over all keys; a range empty for a sequence merges too;
// the merge works in place.
func TestMergeStates(t *testing.T) {
	const b, sq, sk, h, d = 2, 5, 300, 4, 32
	r := rand.New(rand.NewPCG(9, 1))
	qd, kd, vd := randSlice(r, b*sq*h*d), randSlice(r, b*sk*h*d), randSlice(r, b*sk*h*d)
	q := Dense(qd, b, sq, h, d)
	full, fullLSE, err := Forward(q, Dense(kd, b, sk, h, d), Dense(vd, b, sk, h, d), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Three ranges per sequence through the KV cache (LeftPad..SeqLens);
	// the middle range is empty for sequence 1.
	ranges := [][2][]int32{
		{{0, 0}, {50, 120}},
		{{50, 120}, {100, 120}}, // empty for sequence 1
		{{100, 120}, {300, 300}},
	}
	var parts []Tensor
	var lses [][]float32
	for _, rg := range ranges {
		lo, hi := rg[0], rg[1]
		out, lse, err := Forward(q, Dense(kd, b, sk, h, d), Dense(vd, b, sk, h, d),
			&Options{KVCache: &KVCache{SeqLens: hi, LeftPad: lo}})
		if err != nil {
			t.Fatal(err)
		}
		parts, lses = append(parts, out), append(lses, lse)
	}
	merged, mergedLSE := NewTensor(b, sq, h, d), make([]float32, b*h*sq)
	if err := MergeStates(merged, mergedLSE, parts, lses); err != nil {
		t.Fatal(err)
	}
	for i := range full.Data {
		if diff := math.Abs(float64(merged.Data[i] - full.Data[i])); diff > 2e-6 {
			t.Fatalf("O element %d: merged %v, full %v", i, merged.Data[i], full.Data[i])
		}
	}
	for i := range fullLSE {
		if diff := math.Abs(float64(mergedLSE[i] - fullLSE[i])); diff > 2e-6 {
			t.Fatalf("LSE %d: merged %v, full %v", i, mergedLSE[i], fullLSE[i])
		}
	}
	// In place into the first part.
	if err := MergeStates(parts[0], lses[0], parts, lses); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(parts[0].Data[:8]) != fmt.Sprint(merged.Data[:8]) {
		t.Error("in-place merge differs")
	}
	// A row that no part saw.
	neg := float32(math.Inf(-1))
	o := NewTensor(1, 1, 1, 4)
	l := []float32{0}
	if err := MergeStates(o, l, []Tensor{Dense([]float32{1, 2, 3, 4}, 1, 1, 1, 4)}, [][]float32{{neg}}); err != nil || l[0] != neg || o.Data[0] != 0 {
		t.Errorf("all parts empty: %v %v %v", err, l, o.Data)
	}
}

// TestKVCacheErrors: bad cache options are argument errors.
func TestKVCacheErrors(t *testing.T) {
	k, v := NewTensor(2, 64, 2, 16), NewTensor(2, 64, 2, 16)
	q := NewTensor(2, 1, 4, 16)
	nw := NewTensor(2, 1, 2, 16)
	for _, c := range []*KVCache{
		{SeqLens: []int32{64, 3}, KNew: nw, VNew: nw},                       // no room for the new key
		{SeqLens: []int32{3, 3}, LeftPad: []int32{4, 0}},                    // pad past the end
		{SeqLens: []int32{3, 3}, BatchIdx: []int32{0, 2}},                   // no cache row 2
		{SeqLens: []int32{3, 3}, KNew: nw},                                  // KNew without VNew (v is not a view of k)
		{SeqLens: []int32{60, 3}, Rotary: ropeTables(10, 8)},                // query positions past the table, no new keys
		{SeqLens: []int32{3, 3}, Rotary: withOffset(ropeTables(100, 8), 3)}, // odd offset, no new keys
		{SeqLens: []int32{3, 3}, KNew: nw, VNew: nw, Rotary: &Rotary{Dim: 3, Cos: make([]float32, 9), Sin: make([]float32, 9)}},
		{SeqLens: []int32{60, 3}, KNew: nw, VNew: nw, Rotary: ropeTables(10, 8)},                 // positions past the table
		{SeqLens: []int32{3, 3}, KNew: nw, VNew: nw, Rotary: withOffset(ropeTables(100, 8), 10)}, // channels past the head dim
		{SeqLens: []int32{3, 3}, KNew: nw, VNew: nw, Rotary: withOffset(ropeTables(100, 8), 3)},  // odd offset
		{SeqLens: []int32{3, 3}, KNew: nw, VNew: nw, Rotary: withOffset(ropeTables(100, 8), -2)}, // negative offset
		{SeqLens: []int32{3, 3}, KNew: nw, VNew: nw, Rotary: withOffset(ropeTables(100, 8), 16)}, // offset at the head dim
		{SeqLens: []int32{3, 3}, NumSplits: -1},
		{SeqLens: []int32{3, 3}, NumSplits: 129},
		{SeqLens: []int32{3, 3}, KNew: nw, VNew: nw, Rotary: func() *Rotary {
			r := ropeTables(100, 8)
			r.Sin[3*4+1] = float32(math.NaN())
			return r
		}()}, // a NaN in a row the call uses
	} {
		var ae *ArgError
		if _, _, err := Forward(q, k, v, &Options{KVCache: c}); !errors.As(err, &ae) {
			t.Errorf("%+v: %v, want an *ArgError", c, err)
		}
	}
}
