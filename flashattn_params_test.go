package flashattn

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// flash-attn's own test parametrization (tests/test_flash_attn.py), through
// the public API, against the float64 reference under SPEC §4's rule, on
// every kernel path. The full product of flash-attn's axes is far too large
// for a CPU reference, so each axis is walked in turn against the others (a
// deterministic sample): every seqlen pair, head dim, type, head grouping
// and mask kind appears, and every kernel path runs (see each test for
// which cases run on which paths).

// faSeqlens are test_flash_attn_output's (seqlen_q, seqlen_k) pairs.
var faSeqlens = [][2]int{
	{113, 203}, {128, 217}, {113, 211}, {108, 256}, {256, 512}, {512, 256},
	{1, 239}, {3, 799}, {239, 1}, {1, 1},
	{1024, 1024}, {1023, 1024}, {1024, 1023}, {2048, 2048},
}

// faDims are flash-attn's head dims.
var faDims = []int{32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256}

// faHeads are flash-attn's mha, gqa and mqa: nheads 9 over nheads_k 9, 3, 1.
var faHeads = [][2]int{{9, 9}, {9, 3}, {9, 1}}

// faMasks are the mask kinds of flash-attn's tests: none, causal, local
// (random window sides), causal with ALiBi, softcap 50 (with and without
// causal).
var faMasks = []string{"none", "causal", "local", "alibi", "softcap", "softcap-causal"}

// faCase is one dense forward+backward case of the sweep.
type faCase struct {
	c  tcase
	dt DType
}

func (f faCase) String() string { return fmt.Sprintf("%v/%v", f.dt, f.c) }

// faDenseCases samples flash-attn's dense parametrization: case i takes
// head dim i mod 12, heads and mask (i + i/12) mod 3 and mod 6 (each round
// of the head dims shifts them), type (i + i/6) mod 3 (every mask meets
// every type), and the seqlen pairs in turn.
// Windows draw each side in [0, seqlen_k] as flash-attn's randint does,
// ALiBi slopes [0, 0.3) per head; batch 2, 1 and 4 workers alternating;
// every other pair of cases with dropout 0.17 (the reference applies the
// kernel's mask: makeCase sets the same Seed in both).
// To fit the CPU reference's time, a case keeps nheads 9 while
// sq·sk·d ≤ 113·203·64 and takes 3 (over 3, 1, 1) above; the big pairs
// (≥ 1023) take batch 1, one head and head dim 32…64 (TestFlashAttnParams
// runs each on one kernel path).
// Under -short: batch 1, the pairs up to 128×256, one round of the head
// dims, and 3 heads above sq·sk·d = 113·203·16.
func faDenseCases(short bool) []faCase {
	r := rand.New(rand.NewPCG(2024, 1))
	var pairs [][2]int
	for _, sz := range faSeqlens {
		if !short || sz[0]*sz[1] <= 128*256 {
			pairs = append(pairs, sz)
		}
	}
	n, b := 24, 2
	if short {
		n, b = 12, 1
	}
	var out []faCase
	for i := 0; i < n; i++ {
		sz := pairs[i%len(pairs)]
		hd := faHeads[(i+i/12)%len(faHeads)]
		c := tcase{b: b, sq: sz[0], sk: sz[1], h: hd[0], hk: hd[1], d: faDims[i%len(faDims)], workers: 1 + 3*(i%2)}
		if sz[0]*sz[1] > 128*256 {
			c.b = 1
		}
		if sz[0]*sz[1]*c.d > 113*203*64 || short && sz[0]*sz[1]*c.d > 113*203*16 {
			c.h, c.hk = 3, []int{3, 1, 1}[(i+i/12)%3]
		}
		if sz[0] >= 1023 {
			c.b, c.h, c.hk, c.d = 1, 1, 1, faDims[i%4] // the big pairs at d 32…64
		}
		switch faMasks[(i+i/12)%len(faMasks)] {
		case "causal":
			c.causal = true
		case "local":
			c.window = &Window{Left: r.IntN(sz[1] + 1), Right: r.IntN(sz[1] + 1)}
		case "alibi":
			c.causal, c.alibi, c.slopeMax = true, 2, 0.3
		case "softcap":
			c.softcap = 50
		case "softcap-causal":
			c.softcap, c.causal = 50, true
		}
		if i/2%2 == 1 { // flash-attn's dropout_p 0.17: cases 2, 3, 6, 7, … (each mask, type and worker count)
			c.dropout = 0.17
		}
		out = append(out, faCase{c: c, dt: []DType{Float32, BFloat16, Float16}[(i+i/6)%3]})
	}
	return out
}

// TestFlashAttnParams runs the sampled dense cases, forward (O, LSE) and
// backward (dQ, dK, dV with random dO): the float32 ones on every float32
// kernel path (forEachKernel: avx512, avx2, generic on Zen 4), the 16-bit
// ones on every 16-bit product path of their type, each under another
// float32 kernel set (forEachKernelHalf, paired). A big pair (≥ 1023) runs
// on one path, the next in turn for each big case.
// raceShare reports whether case i of a sweep runs: every case without the
// race detector, every third under it (its -short share took 131 s there).
func raceShare(i int) bool { return !raceEnabled || i%3 == 0 }

func TestFlashAttnParams(t *testing.T) {
	big := 0
	// Under the race detector (5-10× slower) a third of the -short share
	// runs (raceShare): the numerics are the plain run's job, and -race
	// looks for data races.
	for i, fc := range faDenseCases(testing.Short() || raceEnabled) {
		if !raceShare(i) {
			continue
		}
		t.Run(fc.String(), func(t *testing.T) {
			var visit, pick int
			if fc.c.sq >= 1023 {
				pick, big = big, big+1
			}
			each := func(t *testing.T, f func(t *testing.T)) {
				if fc.c.sq < 1023 || visit%kernelPathsOf(fc.dt) == pick%kernelPathsOf(fc.dt) {
					f(t)
				}
				visit++
			}
			if fc.dt == Float32 {
				forEachKernel(t, func(t *testing.T) { each(t, func(t *testing.T) { checkCase(t, fc.c) }) })
				return
			}
			forEachKernelHalf(t, fc.dt, true, func(t *testing.T) { each(t, func(t *testing.T) { checkHalfCase(t, fc.c, fc.dt) }) })
		})
	}
}

// kernelPathsOf is the number of paths TestFlashAttnParams visits for dt.
func kernelPathsOf(dt DType) int {
	if dt == Float32 {
		return kernelPaths()
	}
	return max(kernelPaths(), halfPaths(dt))
}

// forEachKernelHalf runs f on the 16-bit product paths of dt (forEachHalf)
// under the float32 and decode kernel sets (forEachKernel): every pair, or,
// paired, visit k of the float32 sets with 16-bit path k mod their number
// and the other way round (max of the two counts runs: each set and each
// path at least once).
func forEachKernelHalf(t *testing.T, dt DType, paired bool, f func(t *testing.T)) {
	nk, nh := kernelPaths(), halfPaths(dt)
	n := max(nk, nh)
	visit := 0
	forEachKernel(t, func(t *testing.T) {
		kv, hv := visit, 0
		visit++
		forEachHalf(t, dt, func(t *testing.T) {
			defer func() { hv++ }()
			if !paired {
				f(t)
				return
			}
			for r := 0; r < n; r++ { // run r pairs set r mod nk with path r mod nh
				if r%nk == kv && r%nh == hv {
					f(t)
				}
			}
		})
	})
}

// TestFlashAttnParamsLargeLogits: Q (and K) scaled by 1e3 on a few of
// flash-attn's shapes, and one key with q·k ≈ 1e4, float32 under the rule
// plus the documented FA2 bound for dQ and dK; bf16/fp16 under the
// same-type rule plus halfDBound.
func TestFlashAttnParamsLargeLogits(t *testing.T) {
	f32 := []precisionCase{
		{name: "x1e3 113x203 d64 causal", c: tcase{b: 1, sq: 113, sk: 203, h: 3, hk: 1, d: 64, causal: true}, mul: 1e3, fa2: true},
		{name: "x1e3 239x1 d111", c: tcase{b: 1, sq: 239, sk: 1, h: 3, hk: 3, d: 111}, mul: 1e3, fa2: true},
		{name: "x1e3 3x799 d256 gqa", c: tcase{b: 1, sq: 3, sk: 799, h: 9, hk: 3, d: 256}, mul: 1e3, fa2: true},
		{name: "spike 1e4 128x217 d128", c: tcase{b: 1, sq: 128, sk: 217, h: 3, hk: 1, d: 128}, spike: 1e4, fa2: true},
		{name: "spike 1e4 1x239 d59", c: tcase{b: 1, sq: 1, sk: 239, h: 9, hk: 9, d: 59}, spike: 1e4, fa2: true},
	}
	forEachKernel(t, func(t *testing.T) {
		for _, pc := range f32 {
			t.Run(pc.name, func(t *testing.T) { checkPrecisionCase(t, pc, 1) })
		}
	})
	for _, dt := range []DType{BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			forEachHalf(t, dt, func(t *testing.T) {
				for _, c := range []tcase{
					{b: 1, sq: 113, sk: 203, h: 3, hk: 3, d: 64, causal: true},
					{b: 1, sq: 3, sk: 239, h: 3, hk: 3, d: 128},
				} {
					checkHalfLargeLogits(t, c, dt, precisionOf(dt), 1e3)
				}
			})
		})
	}
}

// faVarLen is one packed batch: flash-attn's generate_random_padding_mask
// lengths, in [max/3, max] (and one empty sequence), for q and k, of type
// dt.
type faVarLen struct {
	maxQ, maxK, b, h, hk, d int
	causal                  bool
	window                  *Window
	softcap                 float32
	alibi                   bool    // flash-attn's slopes: [batch, heads], each in [0, 0.3)
	dropout                 float32 // flash-attn's dropout_p 0.17, Seed 17
	dt                      DType
}

func (vc faVarLen) String() string {
	s := fmt.Sprintf("%v/q%d_k%d_b%d_h%d_hk%d_d%d", vc.dt, vc.maxQ, vc.maxK, vc.b, vc.h, vc.hk, vc.d)
	if vc.causal {
		s += "_causal"
	}
	if vc.window != nil {
		s += fmt.Sprintf("_win%d,%d", vc.window.Left, vc.window.Right)
	}
	if vc.softcap > 0 {
		s += fmt.Sprintf("_cap%g", vc.softcap)
	}
	if vc.alibi {
		s += "_alibi"
	}
	if vc.dropout > 0 {
		s += fmt.Sprintf("_drop%g", vc.dropout)
	}
	return s
}

// faVarLenCases are TestFlashAttnParamsVarLen's cases: float32 ones, and
// bf16 and fp16 ones (flash-attn's test_flash_attn_varlen_output runs only
// those) with causal, local, ALiBi, softcap 50, MHA/GQA/MQA and dropout 0.17,
// each mask kind in both types. Under -short: the float32 ones, and a
// smaller 16-bit and dropout share.
func faVarLenCases(short bool) []faVarLen {
	win := &Window{Left: 40, Right: 7}
	cases := []faVarLen{
		{maxQ: 113, maxK: 203, b: 4, h: 9, hk: 3, d: 64, causal: true},
		{maxQ: 128, maxK: 217, b: 3, h: 9, hk: 1, d: 59},
		{maxQ: 108, maxK: 256, b: 3, h: 9, hk: 9, d: 32, window: win},
		{maxQ: 239, maxK: 1, b: 3, h: 9, hk: 3, d: 40, softcap: 50},
		{maxQ: 3, maxK: 799, b: 4, h: 9, hk: 1, d: 128, causal: true},
		{maxQ: 47, maxK: 71, b: 3, h: 6, hk: 3, d: 40, causal: true, alibi: true, dropout: 0.17},
		{maxQ: 31, maxK: 64, b: 3, h: 3, hk: 1, d: 64, window: &Window{Left: 9, Right: 20}, softcap: 50, dropout: 0.17, dt: BFloat16},
		{maxQ: 47, maxK: 71, b: 3, h: 6, hk: 3, d: 40, causal: true, alibi: true, dropout: 0.17, dt: Float16},
	}
	if short {
		return cases
	}
	cases = append(cases,
		faVarLen{maxQ: 113, maxK: 211, b: 3, h: 9, hk: 3, d: 59, causal: true, alibi: true, dropout: 0.17},
		faVarLen{maxQ: 128, maxK: 217, b: 3, h: 9, hk: 9, d: 64, window: win, softcap: 50, dropout: 0.17},
	)
	for i, dt := range []DType{BFloat16, Float16} { // each row in both types, the head groupings shifted
		for j, m := range []faVarLen{
			{maxQ: 113, maxK: 203, b: 3, d: 64, causal: true},
			{maxQ: 108, maxK: 256, b: 3, d: 32, window: win},
			{maxQ: 113, maxK: 211, b: 3, d: 80, causal: true, alibi: true},
			{maxQ: 239, maxK: 1, b: 3, d: 40, softcap: 50},
			{maxQ: 128, maxK: 217, b: 3, d: 59, softcap: 50, causal: true, dropout: 0.17},
			{maxQ: 3, maxK: 799, b: 4, d: 128, causal: true, alibi: true, dropout: 0.17},
		} {
			m.h, m.hk, m.dt = 9, []int{9, 3, 1}[(i+j)%3], dt
			cases = append(cases, m)
		}
	}
	return cases
}

// TestFlashAttnParamsVarLen: test_flash_attn_varlen_output's packing, forward
// and backward, float32 on every kernel path (forEachKernel), bf16 and fp16
// on every 16-bit product path (forEachKernelHalf, paired), with 1 or 4
// workers (alternating); each sequence against the reference run on it
// alone (with dropout, on its own index's mask: Params.DropoutBatch).
func TestFlashAttnParamsVarLen(t *testing.T) {
	for i, vc := range faVarLenCases(testing.Short() || raceEnabled) {
		if !raceShare(i) {
			continue
		}
		workers := 1 + 3*(i%2)
		t.Run(fmt.Sprintf("%d/%v/w%d", i, vc, workers), func(t *testing.T) {
			run := func(t *testing.T) { checkFAVarLen(t, vc, uint64(i), workers) }
			if vc.dt == Float32 {
				forEachKernel(t, run)
				return
			}
			forEachKernelHalf(t, vc.dt, true, run)
		})
	}
}

// checkFAVarLen runs case vc (its lengths and data drawn from seed) forward
// and backward and checks each sequence (checkVarLenSeq).
func checkFAVarLen(t *testing.T, vc faVarLen, seed uint64, workers int) {
	r := rand.New(rand.NewPCG(seed, 31))
	lens := func(maxLen int) []int {
		l := make([]int, vc.b)
		for i := range l {
			l[i] = maxLen/3 + r.IntN(maxLen-maxLen/3+1)
		}
		l[int(seed)%vc.b] = 0 // an empty sequence
		if slices.Max(l) == 0 {
			l[(int(seed)+1)%vc.b] = maxLen // one key at least: a packed K of no rows is no tensor
		}
		return l
	}
	lq, lk := lens(vc.maxQ), lens(vc.maxK)
	cuq, cuk := []int32{0}, []int32{0}
	for b := range vc.b {
		cuq, cuk = append(cuq, cuq[b]+int32(lq[b])), append(cuk, cuk[b]+int32(lk[b]))
	}
	tq, tk := int(cuq[vc.b]), int(cuk[vc.b])
	H, Hk, D := vc.h, vc.hk, vc.d
	q, k, v, do := randSlice(r, tq*H*D), randSlice(r, tk*Hk*D), randSlice(r, tk*Hk*D), randSlice(r, tq*H*D)
	if vc.dt != Float32 { // the inputs the call sees
		prec := precisionOf(vc.dt)
		q, k, v, do = prec.RoundSlice(q), prec.RoundSlice(k), prec.RoundSlice(v), prec.RoundSlice(do)
	}
	var slopes []float32
	if vc.alibi {
		slopes = make([]float32, vc.b*H)
		for i := range slopes {
			slopes[i] = float32(r.Float64()) * 0.3
		}
	}
	const seedDrop = 17
	opt := &Options{Causal: vc.causal, Window: vc.window, Softcap: vc.softcap, ALiBi: slopes, Dropout: vc.dropout, Seed: seedDrop,
		Workers: workers, VarLen: &VarLen{CuSeqlensQ: cuq, CuSeqlensK: cuk}}
	Q, K, V := toType(q, vc.dt, 1, tq, H, D), toType(k, vc.dt, 1, tk, Hk, D), toType(v, vc.dt, 1, tk, Hk, D)
	DO := toType(do, vc.dt, 1, tq, H, D)
	out, lse, err := Forward(Q, K, V, opt)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, err := Backward(Q, K, V, out, DO, lse, opt)
	if err != nil {
		t.Fatal(err)
	}
	for b := range vc.b {
		if lq[b] == 0 {
			continue
		}
		if lk[b] == 0 { // no keys: O = 0 and zero dQ (SPEC §1)
			rows := func(x Tensor) []float32 { return denseFloats(x)[int(cuq[b])*H*D : int(cuq[b+1])*H*D] }
			for _, x := range append(rows(out), rows(dq)...) {
				if x != 0 {
					t.Fatalf("sequence %d has no keys but O or dQ = %v", b, x)
				}
			}
			continue
		}
		par := reference.Params{Batch: 1, SeqQ: lq[b], SeqK: lk[b], Heads: H, KVHeads: Hk, HeadDim: D,
			Causal: vc.causal, Softcap: float64(vc.softcap), Dropout: float64(vc.dropout), Seed: seedDrop, DropoutBatch: b}
		if vc.window != nil {
			par.Window, par.WindowLeft, par.WindowRight = true, vc.window.Left, vc.window.Right
		}
		if slopes != nil {
			par.ALiBi = to64(slopes[b*H : (b+1)*H])
		}
		checkVarLenSeq(t, vc.dt, b, par, q, k, v, do, tq, int(cuq[b]), int(cuk[b]), out, lse, dq, dk, dv)
	}
}

// TestFlashAttnParamsKVCache: test_flash_attn_kvcache's axes — seqlen_q
// 1, 4, 128, 339 over caches of 128, 339, 800, 1024 keys, new keys appended
// or not, rotary on half or all of the head dim (interleaved and not),
// paged caches with blocks of 16 and 256 in shuffled order, cache_batch_idx,
// cache_leftpad, causal and local (every other one with ALiBi, flash-attn's
// slopes: [batch, nheads] in [0, 0.3)), GQA, cache types float32, bf16,
// fp16 and q8_0 — on every kernel path (float32 and decode kernels by forEachKernel,
// the 16-bit paths by forEachHalf for the 16-bit caches: every pair, paired
// under -short), 1 and 4 workers. Under -short: seqlen_q up to 128 over
// caches up to 128·339 per row. One worker count per case (1 or 4,
// alternating); batch 2, 1 above 339·339.
func TestFlashAttnParamsKVCache(t *testing.T) {
	type axes struct {
		sq, sk    int
		appendNew bool
		rotFrac   int // 0 none, 1 half, 2 all of d
		inter     bool
		paged     int
		batchIdx  bool
		leftpad   bool
		mask      string // "none", "causal", "local"
		alibi     bool   // flash-attn's slopes, [batch, nheads] in [0, 0.3)
		hk        int
		dt        DType
	}
	sqs, sks := []int{1, 4, 128, 339}, []int{128, 339, 800, 1024}
	dts := []DType{Float32, BFloat16, Float16, Q8_0}
	ax := rand.New(rand.NewPCG(2024, 2))
	var all []axes
	for i := 0; i < 16; i++ { // every (seqlen_q, seqlen_k), each type once per row and column
		all = append(all, axes{
			sq: sqs[i%4], sk: sks[i/4], dt: dts[(i+i/4)%4], appendNew: ax.IntN(2) == 0, rotFrac: ax.IntN(3), inter: ax.IntN(2) == 0,
			paged: []int{0, 16, 256}[ax.IntN(3)], batchIdx: ax.IntN(3) == 0, leftpad: ax.IntN(2) == 0,
			mask: []string{"causal", "local", "none"}[ax.IntN(3)], hk: []int{6, 3, 1}[ax.IntN(3)],
		})
	}
	masked := 0
	for i := range all { // flash-attn: alibi with causal and local; here every other such case
		if all[i].mask != "none" {
			all[i].alibi = masked%2 == 0
			masked++
		}
	}
	// A prefill over a paged float32 cache with left padding: the packed
	// route once read kernel.W keys across a page boundary there (a worker
	// panic; with 16-bit caches, wrong keys).
	all = append(all,
		axes{sq: 128, sk: 339, appendNew: true, paged: 16, leftpad: true, mask: "causal", hk: 3, dt: Float32},
		axes{sq: 128, sk: 339, appendNew: true, rotFrac: 2, inter: true, paged: 16, leftpad: true, mask: "local", hk: 1, dt: Float16})
	if testing.Short() || raceEnabled { // as in TestFlashAttnParams
		var small []axes
		for _, a := range all {
			if a.sq <= 128 && a.sq*a.sk <= 128*339 {
				small = append(small, a)
			}
		}
		all = small
	}
	const hq, d = 6, 64 // test_flash_attn_kvcache's nheads 6 (nheads_k 6, 3, 1)
	for i, a := range all {
		r := rand.New(rand.NewPCG(uint64(i), 77))
		b := 2
		if a.sq*a.sk > 339*339 {
			b = 1 // the largest calls: one sequence
		}
		snew := 0
		if a.appendNew {
			snew = a.sq
		}
		capacity := a.sk
		if a.paged > 0 {
			capacity = (a.sk + a.paged - 1) / a.paged * a.paged
		}
		// flash-attn: cache_seqlens in [0, seqlen_k − seqlen_new]; leftpad in
		// [0, cache_seqlens).
		ends, pads := make([]int32, b), []int32(nil)
		for bb := range ends {
			ends[bb] = int32(r.IntN(max(a.sk-snew, 0) + 1))
		}
		if a.leftpad {
			pads = make([]int32, b)
			for bb := range pads {
				if ends[bb] > 0 {
					pads[bb] = int32(r.IntN(int(ends[bb])))
				}
			}
		}
		a.batchIdx = a.batchIdx && a.paged == 0 // flash-attn: cache_batch_idx only with a contiguous cache
		var bidx []int32
		if a.batchIdx {
			bidx = make([]int32, b) // cache rows b, b−1, …: none in order, one past the batch
			for bb := range bidx {
				bidx[bb] = int32(b - bb)
			}
		}
		rot := 0
		if a.rotFrac > 0 {
			rot = d * a.rotFrac / 2
		}
		mask := a.mask
		if a.alibi {
			mask += "-alibi"
		}
		kc := kvCase{name: fmt.Sprintf("%d/%v/sq%d/sk%d/new%v/rot%d-%v/paged%d/bidx%v/pad%v/%s/hk%d", i, a.dt, a.sq, a.sk, a.appendNew, rot, a.inter,
			a.paged, a.batchIdx, a.leftpad, mask, a.hk), b: b, hq: hq, hk: a.hk, d: d, capacity: capacity, ends: ends, pads: pads,
			batchIdx: bidx, snew: snew, sq: a.sq, paged: a.paged, rotary: rot, interleaved: a.inter, dt: a.dt, alibi: a.alibi, slopeMax: 0.3}
		switch a.mask {
		case "causal":
			kc.causal = true
		case "local":
			kc.window = &Window{Left: r.IntN(a.sk + 1), Right: r.IntN(a.sk + 1)}
		}
		workers := []int{1 + 3*(i%2)}
		t.Run(kc.name, func(t *testing.T) {
			run := func(t *testing.T) {
				for _, w := range workers {
					kc.workers = w
					checkKVCase(t, kc)
				}
			}
			// forEachKernelHalf visits the float32 and decode sets itself
			// (inside forEachKernel it ran each pair once per set again).
			if f, ok := a.dt.Format(); ok {
				forEachKernelHalf(t, DType(f), true, run)
				return
			}
			forEachKernel(t, run)
		})
	}
}
