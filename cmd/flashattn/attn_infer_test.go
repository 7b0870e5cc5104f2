package main

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/reference"
)

// atRope rotates row x in place in float64 arithmetic, as flash-attn's
// rotary embedding does: pairs (2t, 2t+1) when interleaved, else
// (t, t+rd/2), with cos and sin [max_pos, rd/2].
func atRope(x, cos, sin []float32, rd int, interleaved bool, pos int) {
	h := rd / 2
	for t := 0; t < h; t++ {
		i, j := t, t+h
		if interleaved {
			i, j = 2*t, 2*t+1
		}
		c, s := float64(cos[pos*h+t]), float64(sin[pos*h+t])
		a, b := float64(x[i]), float64(x[j])
		x[i], x[j] = float32(a*c-b*s), float32(a*s+b*c)
	}
}

// atRopeTables are the usual RoPE tables (base 10000) for maxPos
// positions and rotary dim rd.
func atRopeTables(maxPos, rd int) (cos, sin []float32) {
	cos, sin = make([]float32, maxPos*rd/2), make([]float32, maxPos*rd/2)
	for p := 0; p < maxPos; p++ {
		for t := 0; t < rd/2; t++ {
			th := float64(p) * math.Pow(10000, -2*float64(t)/float64(rd))
			cos[p*rd/2+t], sin[p*rd/2+t] = float32(math.Cos(th)), float32(math.Sin(th))
		}
	}
	return cos, sin
}

// atStored returns x as a cache of type dt stores it ([n, d] rows; q8_0
// quantises each row's blocks of 32).
func atStored(t testing.TB, x []float32, d int, dt flashattn.DType, scale float32) []float32 {
	t.Helper()
	if dt == flashattn.Float32 {
		return slices.Clone(x)
	}
	src := flashattn.Dense(x, 1, len(x)/d, 1, d)
	c := flashattn.NewTensorOf(dt, 1, len(x)/d, 1, d)
	c.Scale = scale
	if err := flashattn.Convert(c, src); err != nil {
		t.Fatal(err)
	}
	w := flashattn.NewTensor(1, len(x)/d, 1, d)
	if err := flashattn.Convert(w, c); err != nil {
		t.Fatal(err)
	}
	return w.Data
}

// kvCLICase is one "attn -cache-seqlens" call with the decoding flags.
type kvCLICase struct {
	name              string
	b, hq, hk, d, cap int
	ends, pads        []int32
	batchIdx          []int32 // nil: none; else rows = cacheRows
	cacheRows         int
	snew, sq          int
	paged             int // block size (0: contiguous)
	rotary            int // rotary dim (0: none)
	rotOffset         int // -rotary-offset: the first rotated channel
	interleaved       bool
	causal            bool
	window            []int
	splits            int
	kScale, vScale    float32 // fp8: -k-scale, -v-scale (0: not given)
	dtype, kvDtype    flashattn.DType
	f2New             bool // -k-new, -v-new written as '<f2'
}

// TestAttnKVCacheDecoding: the decoding flags through the command against
// the reference per sequence, on the cache the run wrote (k_cache.npy,
// v_cache.npy), itself checked against the input cache as its type stores
// it plus the new keys rotated in float64 and the new values: contiguous
// and paged caches, cache_batch_idx, left padding (with paging), GPT-J and
// GPT-NeoX rotary, causal, windowed and non-causal queries, forced key
// splits, and f32, bf16, f16 and q8_0 caches under f32, bf16 and f16
// queries.
func TestAttnKVCacheDecoding(t *testing.T) {
	f32, bf16, f16, q8, e4m3, e5m2 := flashattn.Float32, flashattn.BFloat16, flashattn.Float16, flashattn.Q8_0, flashattn.FP8E4M3, flashattn.FP8E5M2
	for _, c := range []kvCLICase{
		{name: "contig-gptj-batchidx", b: 3, hq: 8, hk: 2, d: 64, cap: 90, cacheRows: 5, batchIdx: []int32{4, 0, 2}, ends: []int32{0, 37, 80},
			snew: 1, sq: 1, rotary: 32, interleaved: true, causal: true, dtype: f32, kvDtype: f32},
		{name: "paged-leftpad-neox", b: 2, hq: 4, hk: 4, d: 32, cap: 96, paged: 16, ends: []int32{50, 70}, pads: []int32{13, 0},
			snew: 4, sq: 4, rotary: 32, causal: true, dtype: f32, kvDtype: f32},
		{name: "paged-leftpad-bf16-cache-noncausal", b: 2, hq: 4, hk: 2, d: 48, cap: 64, paged: 32, ends: []int32{40, 3}, pads: []int32{7, 3},
			snew: 2, sq: 3, rotary: 16, dtype: f32, kvDtype: bf16},
		{name: "f16-window-splits-f2-new", b: 2, hq: 6, hk: 3, d: 24, cap: 70, ends: []int32{30, 60}, snew: 3, sq: 3, rotary: 24,
			interleaved: true, causal: true, window: []int{10, 0}, splits: 3, dtype: f16, kvDtype: f16, f2New: true},
		{name: "q8-paged-leftpad", b: 2, hq: 4, hk: 2, d: 64, cap: 128, paged: 32, ends: []int32{77, 20}, pads: []int32{5, 20},
			snew: 2, sq: 2, rotary: 64, causal: true, dtype: f32, kvDtype: q8},
		{name: "bf16-no-new-keys-splits", b: 2, hq: 4, hk: 1, d: 32, cap: 100, ends: []int32{99, 1}, sq: 1, splits: 7, dtype: bf16, kvDtype: bf16},
		{name: "q8-bf16-queries", b: 1, hq: 2, hk: 2, d: 32, cap: 50, ends: []int32{41}, pads: []int32{9}, sq: 2, causal: true, dtype: bf16, kvDtype: q8},
		{name: "fp8-e4m3-paged-scales", b: 2, hq: 4, hk: 2, d: 64, cap: 128, paged: 32, ends: []int32{77, 20}, pads: []int32{5, 20},
			snew: 2, sq: 2, rotary: 64, causal: true, dtype: f32, kvDtype: e4m3, kScale: 0.0123, vScale: 0.004},
		{name: "fp8-e5m2-splits", b: 2, hq: 4, hk: 2, d: 40, cap: 90, ends: []int32{60, 9}, snew: 1, sq: 1, splits: 3, dtype: f32, kvDtype: e5m2},
		// -rotary-offset: MLA rotates its last channels; a middle range.
		{name: "rotary-offset-last-paged", b: 2, hq: 8, hk: 1, d: 96, cap: 64, paged: 16, ends: []int32{20, 50}, snew: 2, sq: 2,
			rotary: 32, rotOffset: 64, causal: true, dtype: f32, kvDtype: f32},
		{name: "rotary-offset-middle-interleaved-bf16", b: 2, hq: 4, hk: 2, d: 48, cap: 60, ends: []int32{0, 33}, snew: 1, sq: 1,
			rotary: 16, rotOffset: 10, interleaved: true, dtype: f32, kvDtype: bf16},
		// Rotary without new keys (a verification step): the queries rotate.
		{name: "rotary-no-new-keys", b: 2, hq: 4, hk: 2, d: 32, cap: 80, ends: []int32{40, 77}, pads: []int32{3, 0}, sq: 3,
			rotary: 16, rotOffset: 16, causal: true, dtype: f32, kvDtype: f32},
	} {
		t.Run(c.name, func(t *testing.T) { checkKVCLICase(t, c) })
	}
}

func checkKVCLICase(t *testing.T, c kvCLICase) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	r := rand.New(rand.NewPCG(uint64(len(c.name)), 17))
	rows := c.b
	if c.batchIdx != nil {
		rows = c.cacheRows
	}
	row := func(b int) int {
		if c.batchIdx != nil {
			return int(c.batchIdx[b])
		}
		return b
	}
	rowLen := c.hk * c.d
	// The logical caches, [rows][cap, hk, d], and their physical layout.
	lk, lv := make([][]float32, rows), make([][]float32, rows)
	for i := range lk {
		lk[i], lv[i] = atRand(r, c.cap*rowLen), atRand(r, c.cap*rowLen)
	}
	var kd, vd []float32
	var kshape []int
	var table []int32
	perSeq := 0
	if c.paged == 0 {
		for i := range lk {
			kd, vd = append(kd, lk[i]...), append(vd, lv[i]...)
		}
		kshape = []int{rows, c.cap, c.hk, c.d}
	} else {
		perSeq = c.cap / c.paged
		nblocks := c.b*perSeq + 2
		kd, vd = atRand(r, nblocks*c.paged*rowLen), atRand(r, nblocks*c.paged*rowLen)
		perm := r.Perm(nblocks)
		table = make([]int32, c.b*perSeq)
		bs := c.paged * rowLen
		for b := 0; b < c.b; b++ {
			for j := 0; j < perSeq; j++ {
				blk := perm[b*perSeq+j]
				table[b*perSeq+j] = int32(blk)
				copy(kd[blk*bs:(blk+1)*bs], lk[b][j*bs:])
				copy(vd[blk*bs:(blk+1)*bs], lv[b][j*bs:])
			}
		}
		kshape = []int{nblocks, c.paged, c.hk, c.d}
		atWriteI32(t, p("table.npy"), table, c.b, perSeq)
	}
	// at maps (sequence b, logical position j) to the element offset of
	// its row in the physical cache.
	at := func(b, j int) int {
		if c.paged == 0 {
			return (row(b)*c.cap + j) * rowLen
		}
		return (int(table[b*perSeq+j/c.paged])*c.paged + j%c.paged) * rowLen
	}
	q := atRand(r, c.b*c.sq*c.hq*c.d)
	atWriteF32(t, p("q.npy"), q, c.b, c.sq, c.hq, c.d)
	atWriteF32(t, p("k.npy"), kd, kshape...)
	atWriteF32(t, p("v.npy"), vd, kshape...)
	atWriteI32(t, p("lens.npy"), c.ends, c.b)
	args := []string{"attn", "-q", p("q.npy"), "-k", p("k.npy"), "-v", p("v.npy"), "-o", p("out"), "-cache-seqlens", p("lens.npy"),
		"-dtype", dtypeName(c.dtype), "-kv-dtype", dtypeName(c.kvDtype)}
	if c.kScale != 0 {
		args = append(args, "-k-scale", strconv.FormatFloat(float64(c.kScale), 'g', -1, 32), "-v-scale", strconv.FormatFloat(float64(c.vScale), 'g', -1, 32))
	}
	if table != nil {
		args = append(args, "-block-table", p("table.npy"))
	}
	if c.batchIdx != nil {
		atWriteI32(t, p("idx.npy"), c.batchIdx, c.b)
		args = append(args, "-cache-batch-idx", p("idx.npy"))
	}
	if c.pads != nil {
		atWriteI32(t, p("pad.npy"), c.pads, c.b)
		args = append(args, "-cache-leftpad", p("pad.npy"))
	}
	var knew, vnew []float32
	if c.snew > 0 {
		n := c.b * c.snew * rowLen
		if c.f2New {
			knew = atWriteF16(t, p("knew.npy"), atRand(r, n), c.b, c.snew, c.hk, c.d)
			vnew = atWriteF16(t, p("vnew.npy"), atRand(r, n), c.b, c.snew, c.hk, c.d)
		} else {
			knew, vnew = atRand(r, n), atRand(r, n)
			atWriteF32(t, p("knew.npy"), knew, c.b, c.snew, c.hk, c.d)
			atWriteF32(t, p("vnew.npy"), vnew, c.b, c.snew, c.hk, c.d)
		}
		// New keys and values reach the cache in -dtype first.
		knew, vnew = atStored(t, knew, c.d, c.dtype, 0), atStored(t, vnew, c.d, c.dtype, 0)
		args = append(args, "-k-new", p("knew.npy"), "-v-new", p("vnew.npy"))
	}
	var cos, sin []float32
	if c.rotary > 0 {
		cos, sin = atRopeTables(c.cap+c.sq, c.rotary)
		atWriteF32(t, p("cos.npy"), cos, c.cap+c.sq, c.rotary/2)
		atWriteF32(t, p("sin.npy"), sin, c.cap+c.sq, c.rotary/2)
		args = append(args, "-rotary-cos", p("cos.npy"), "-rotary-sin", p("sin.npy"))
		if c.interleaved {
			args = append(args, "-rotary-interleaved")
		}
		if c.rotOffset != 0 {
			args = append(args, "-rotary-offset", strconv.Itoa(c.rotOffset))
		}
	}
	if c.causal {
		args = append(args, "-causal")
	}
	if c.window != nil {
		args = append(args, "-window-left", strconv.Itoa(c.window[0]), "-window-right", strconv.Itoa(c.window[1]))
	}
	if c.splits > 0 {
		args = append(args, "-num-splits", strconv.Itoa(c.splits))
	}
	if code, _, stderr := atRun(args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}

	// The caches the run wrote: in their type's file format, the input as
	// that type stores it except where the new keys went.
	descr := map[flashattn.DType]string{flashattn.Float32: "<f4", flashattn.BFloat16: "<f4", flashattn.Float16: "<f2", flashattn.Q8_0: "<f4", flashattn.FP8E4M3: "<f4", flashattn.FP8E5M2: "<f4"}
	want := []string{"lse.npy", "out.npy"}
	if c.snew > 0 {
		want = []string{"k_cache.npy", "lse.npy", "out.npy", "v_cache.npy"}
	}
	if names := atDirNames(t, p("out")); !slices.Equal(names, want) {
		t.Fatalf("out dir holds %v, want %v", names, want)
	}
	gk, gv := atStored(t, kd, c.d, c.kvDtype, c.kScale), atStored(t, vd, c.d, c.kvDtype, c.vScale)
	if c.snew > 0 {
		wk, wv := slices.Clone(gk), slices.Clone(gv)
		gk = atReadTyped(t, p("out/k_cache.npy"), descr[c.kvDtype], kshape...)
		gv = atReadTyped(t, p("out/v_cache.npy"), descr[c.kvDtype], kshape...)
		for b := 0; b < c.b; b++ {
			end := int(c.ends[b])
			for i := 0; i < c.snew; i++ {
				for h := 0; h < c.hk; h++ {
					src := ((b*c.snew+i)*c.hk + h) * c.d
					kr := slices.Clone(knew[src : src+c.d])
					if cos != nil {
						atRope(kr[c.rotOffset:], cos, sin, c.rotary, c.interleaved, end+i) // flash-attn: the absolute cache position
					}
					o := at(b, end+i) + h*c.d
					copy(wk[o:o+c.d], atStored(t, kr, c.d, c.kvDtype, c.kScale))
					copy(wv[o:o+c.d], atStored(t, vnew[src:src+c.d], c.d, c.kvDtype, c.vScale))
					// A rotated key may round differently after float32
					// and float64 rotation: allow one step of the type.
					step := 1e-6
					switch c.kvDtype {
					case flashattn.BFloat16:
						step = 1.0 / 128
					case flashattn.Float16:
						step = 1.0 / 1024
					case flashattn.FP8E4M3, flashattn.FP8E5M2:
						step = 0.25 // e5m2's relative step (flashattn.FP8E4M3's is 1/8), subnormals' times the scale
					case flashattn.Q8_0:
						step = 0
						for _, x := range kr {
							step = max(step, math.Abs(float64(x))/127*1.01)
						}
					}
					for dd := 0; dd < c.d; dd++ {
						tol := step
						switch c.kvDtype {
						case flashattn.BFloat16, flashattn.Float16:
							tol *= max(1, math.Abs(float64(kr[dd])))
						case flashattn.FP8E4M3, flashattn.FP8E5M2:
							tol *= max(float64(c.kScale), 1e-3, math.Abs(float64(kr[dd])))
						}
						if d := math.Abs(float64(gk[o+dd] - wk[o+dd])); !(d <= tol) {
							t.Fatalf("sequence %d new key %d head %d dim %d: k_cache holds %v, want %v", b, i, h, dd, gk[o+dd], wk[o+dd])
						}
						wk[o+dd] = gk[o+dd]
					}
				}
			}
		}
		for i := range wk {
			if math.Float32bits(gk[i]) != math.Float32bits(wk[i]) || math.Float32bits(gv[i]) != math.Float32bits(wv[i]) {
				t.Fatalf("cache element %d: k %v v %v, want %v %v", i, gk[i], gv[i], wk[i], wv[i])
			}
		}
	}

	// Attention, per sequence, against the reference on the cache's keys
	// LeftPad..SeqLens+Snew−1 and the queries rotated at their positions.
	oDescr := "<f4"
	if c.dtype == flashattn.Float16 {
		oDescr = "<f2"
	}
	out := atReadTyped(t, p("out/out.npy"), oDescr, c.b, c.sq, c.hq, c.d)
	lse := atReadTyped(t, p("out/lse.npy"), "<f4", c.b, c.hq, c.sq)
	prec := reference.Precision(0)
	for _, dt := range []flashattn.DType{c.dtype, c.kvDtype} {
		switch dt {
		case flashattn.BFloat16:
			prec = reference.BF16
		case flashattn.Float16:
			prec = reference.F16
		}
	}
	for b := 0; b < c.b; b++ {
		end, pad := int(c.ends[b]), 0
		if c.pads != nil {
			pad = int(c.pads[b])
		}
		nk := end + c.snew - pad
		var ek, ev []float32
		for j := pad; j < end+c.snew; j++ {
			o := at(b, j)
			ek, ev = append(ek, gk[o:o+rowLen]...), append(ev, gv[o:o+rowLen]...)
		}
		// The queries as loaded (in -dtype), then rotated.
		qb := atStored(t, q[b*c.sq*c.hq*c.d:(b+1)*c.sq*c.hq*c.d], c.d, c.dtype, 0)
		if cos != nil {
			for i := 0; i < c.sq; i++ {
				pos := end
				if c.causal || c.window != nil {
					pos += i
				}
				for h := 0; h < c.hq; h++ {
					atRope(qb[(i*c.hq+h)*c.d+c.rotOffset:][:c.d-c.rotOffset], cos, sin, c.rotary, c.interleaved, pos)
				}
			}
		}
		par := reference.Params{Batch: 1, SeqQ: c.sq, SeqK: nk, Heads: c.hq, KVHeads: c.hk, HeadDim: c.d, Causal: c.causal}
		if c.window != nil {
			par.Window, par.WindowLeft, par.WindowRight = true, c.window[0], c.window[1]
		}
		gotO := out[b*c.sq*c.hq*c.d : (b+1)*c.sq*c.hq*c.d]
		gotL := lse[b*c.hq*c.sq : (b+1)*c.hq*c.sq]
		var errs []error
		if prec == 0 {
			o64, l64 := reference.Forward64(par, atTo64(qb), atTo64(ek), atTo64(ev))
			o32, l32 := reference.Forward32(par, qb, ek, ev)
			errs = append(errs, reference.Check("O", gotO, o32, o64), reference.Check("LSE", gotL, l32, l64))
		} else {
			o64, l64 := reference.Forward64(par, atTo64(prec.RoundSlice(qb)), atTo64(prec.RoundSlice(ek)), atTo64(prec.RoundSlice(ev)))
			oh, lh := reference.ForwardHalf(par, prec, qb, ek, ev)
			errs = append(errs, reference.CheckHalf("O", prec, gotO, oh, o64), reference.CheckHalf("LSE", prec, gotL, lh, l64))
		}
		for _, err := range errs {
			if err != nil {
				t.Errorf("sequence %d: %v", b, err)
			}
		}
	}
}
