package flashattn

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var (
	comboSeed = flag.Uint64("combo.seed", 1, "TestRandomCombinations: the PCG seed of the drawn option combinations")
	comboN    = flag.Int("combo.n", 0, "TestRandomCombinations: how many combinations to draw (0: 200, 50 under -short, 6 under -race)")
)

// comboDims are the head dims the generator draws: none a multiple of
// every kernel's vector width or tile, with the common ones.
var comboDims = []int{8, 24, 40, 59, 64, 72, 96, 128, 130}

// TestRandomCombinations draws option combinations from a seeded PCG
// (-combo.seed, default 1) and checks each against the float64 reference
// under SPEC §4: O and LSE, and where there is a backward dQ, dK, dV (and
// dSinks) with a random dO. Each combination is one of three call kinds:
//
//   - dense (checkCase, checkHalfCase): batch 1..2, seqlens 1..300, GQA/MQA,
//     float32/bf16/fp16, every option independently: Causal, TopLeft,
//     Window, Softcap, ALiBi ([H] or [B,H]), dropout, Sinks, a dLSE, a
//     mask or score modifier of the property grid (modCases: block masks,
//     Documents, LocalGlobal, PrefixLM, ScoreMod), strided tensors, odd
//     BlockQ/BlockK, Workers 1, 3 or 4;
//   - KV cache (checkKVCase): contiguous or paged (blocks 16, 32, 48),
//     BatchIdx, LeftPad (any position), appended keys, Rotary (interleaved
//     or not, an Offset), causal, window, softcap, ALiBi, NumSplits, cache
//     types float32, bf16, fp16, q8_0, q4_0, fp8 (e4m3, e5m2);
//   - VarLen (checkFAVarLen): packed sequences (one empty), causal, window,
//     softcap, ALiBi, dropout, float32/bf16/fp16.
//
// Each combination runs on the next kernel path of the rotation
// (forEachKernel, and forEachKernelHalf for the 16-bit types). Every drawn
// combination is one the documentation says works: an error from the
// call is a failure. A developer runs more with, e.g.,
//
//	go test -run TestRandomCombinations -combo.n 5000 -combo.seed 7
//
// Not drawn yet: MLA (HeadDimV ≠ HeadDim), Offsets, SeqUsedQ/SeqUsedK,
// KeyPadding, a *Bias ScoreMod with DBias, VarLen with a KV cache or with
// masks, sinks or dLSE with a cache (forward only), Scale, CacheBytes.
//
// Open (larger -combo.n): float32 dSinks of
// tcase{b: 2, sq: 73, sk: 52, h: 2, hk: 2, d: 96, causal, softcap
// 18.25954, sinks} on avx512 is 1.75e-6 over a 1.64e-6 limit.
func TestRandomCombinations(t *testing.T) {
	n := *comboN
	if n == 0 {
		switch { // ≤ 40 s, ≤ 10 s under -short or -race, on 2 shared cores
		case raceEnabled:
			n = 6
		case testing.Short():
			n = 50
		default:
			n = 200
		}
	}
	r := rand.New(rand.NewPCG(*comboSeed, 0xc0b0))
	for i := 0; i < n; i++ {
		run, name, dt := drawCombo(r, i)
		t.Run(fmt.Sprintf("%d/%s", i, name), func(t *testing.T) { onPath(t, dt, i, run) })
	}
}

// onPath runs f on one kernel path of type dt: visit i of the rotation
// (forEachKernel for float32 and the cache types, forEachKernelHalf for
// bf16 and fp16).
func onPath(t *testing.T, dt DType, i int, f func(t *testing.T)) {
	visit, paths := 0, kernelPaths()
	each := func(t *testing.T) {
		defer func() { visit++ }() // f may end t with Fatal
		if visit%paths == i%paths {
			f(t)
		}
	}
	if dt == BFloat16 || dt == Float16 {
		paths = kernelPathsOf(dt)
		forEachKernelHalf(t, dt, true, each)
		return
	}
	forEachKernel(t, each)
}

// drawCombo draws combination i: the check to run, its name and its type.
func drawCombo(r *rand.Rand, i int) (func(t *testing.T), string, DType) {
	coin := func(p float64) bool { return r.Float64() < p }
	workers := []int{1, 3, 4}[r.IntN(3)]
	h, hk := comboHeads(r)
	d := comboDims[r.IntN(len(comboDims))]
	win := func(sk int) *Window {
		w := &Window{Left: r.IntN(sk+1) - 1, Right: r.IntN(sk+1) - 1}
		if coin(0.3) {
			w.Right = 0
		}
		return w
	}
	switch k := r.IntN(10); {
	case k < 5: // dense
		c := tcase{b: 1 + r.IntN(2), sq: 1 + r.IntN(300), sk: 1 + r.IntN(300), h: h, hk: hk, d: d, workers: workers,
			causal: coin(0.4), topLeft: coin(0.25), sinks: coin(0.3), dlse: coin(0.3), strided: coin(0.15)}
		if coin(0.3) {
			c.window = win(c.sk)
		}
		if coin(0.3) {
			c.softcap = 1 + 49*float32(r.Float64())
		}
		if coin(0.3) {
			c.alibi = 1 + r.IntN(2)
		}
		if coin(0.25) {
			c.dropout = 0.17
		}
		if coin(0.3) {
			c.mods = modCases[r.IntN(len(modCases))]
		}
		if coin(0.15) {
			c.bq, c.bk = 5+r.IntN(60), 5+r.IntN(60)
		}
		dt := []DType{Float32, BFloat16, Float16}[r.IntN(3)]
		if dt == Float32 {
			return func(t *testing.T) { checkCase(t, c) }, fmt.Sprintf("dense/%v/%v", dt, c), dt
		}
		return func(t *testing.T) { checkHalfCase(t, c, dt) }, fmt.Sprintf("dense/%v/%v", dt, c), dt
	case k < 8: // KV cache
		tc := kvCase{b: 1 + r.IntN(3), hq: h, hk: hk, d: d, sq: 1 + r.IntN(40), workers: workers,
			causal: coin(0.5), alibi: coin(0.3), dt: []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2}[r.IntN(7)]}
		if (tc.dt == Q8_0 || tc.dt == Q4_0) && d%32 != 0 {
			tc.d = []int{32, 64, 96, 128}[r.IntN(4)] // their blocks: head dims of 32·n only (DType's doc)
		}
		if coin(0.6) {
			tc.snew = 1 + r.IntN(40)
			if coin(0.5) {
				tc.snew = tc.sq
			}
		}
		if tc.alibi && coin(0.5) {
			tc.slopeMax = 0.3
		}
		if coin(0.3) {
			tc.splits = 1 + r.IntN(9)
		}
		if coin(0.3) {
			tc.softcap = 1 + 49*float32(r.Float64())
		}
		if coin(0.4) {
			tc.paged = []int{16, 32, 48}[r.IntN(3)]
		}
		capacity := tc.snew + 1 + r.IntN(300)
		if tc.paged > 0 {
			capacity = (capacity + tc.paged - 1) / tc.paged * tc.paged
		}
		tc.capacity = capacity
		tc.ends = make([]int32, tc.b)
		for b := range tc.ends {
			tc.ends[b] = int32(r.IntN(capacity - tc.snew + 1))
		}
		if coin(0.4) {
			tc.pads = make([]int32, tc.b)
			for b := range tc.pads {
				tc.pads[b] = int32(r.IntN(int(tc.ends[b]) + 1))
			}
		}
		if tc.paged == 0 && coin(0.3) {
			tc.batchIdx = make([]int32, tc.b)
			for b, p := range r.Perm(tc.b + 2)[:tc.b] {
				tc.batchIdx[b] = int32(p)
			}
		}
		if coin(0.4) {
			tc.rotary = 2 * (1 + r.IntN(tc.d/2))
			tc.rotOffset = 2 * r.IntN((tc.d-tc.rotary)/2+1)
			tc.interleaved = coin(0.5)
		}
		if coin(0.3) {
			tc.window = win(capacity)
		}
		tc.name = fmt.Sprintf("kv/%v/b%d_sq%d_snew%d_h%d_hk%d_d%d_cap%d_ends%v_pads%v_bidx%v_paged%d_rot%d,%d,%v_causal%v_win%v_cap%g_alibi%v,%g_splits%d_w%d",
			tc.dt, tc.b, tc.sq, tc.snew, tc.hq, tc.hk, tc.d, tc.capacity, tc.ends, tc.pads, tc.batchIdx, tc.paged, tc.rotary, tc.rotOffset, tc.interleaved,
			tc.causal, tc.window, tc.softcap, tc.alibi, tc.slopeMax, tc.splits, tc.workers)
		dt := tc.dt
		if dt != BFloat16 && dt != Float16 {
			dt = Float32
		}
		return func(t *testing.T) { checkKVCase(t, tc) }, tc.name, dt
	default: // VarLen
		vc := faVarLen{maxQ: 3 + r.IntN(298), maxK: 3 + r.IntN(298), b: 1 + r.IntN(4), h: h, hk: hk, d: d,
			causal: coin(0.4), alibi: coin(0.3), dt: []DType{Float32, BFloat16, Float16}[r.IntN(3)]}
		if coin(0.3) {
			vc.window = win(vc.maxK)
		}
		if coin(0.3) {
			vc.softcap = 1 + 49*float32(r.Float64())
		}
		if coin(0.25) {
			vc.dropout = 0.17
		}
		seed := r.Uint64() % 1000
		return func(t *testing.T) { checkFAVarLen(t, vc, seed, workers) }, fmt.Sprintf("varlen/%v/seed%d/w%d", vc, seed, workers), vc.dt
	}
}

// comboHeads draws query and KV heads: MHA, GQA or MQA.
func comboHeads(r *rand.Rand) (h, hk int) {
	hk = 1 + r.IntN(3)
	return hk * (1 + r.IntN(3)), hk
}

// TestRandomCombinationsFound holds the combinations TestRandomCombinations
// failed on (-combo.n 3000, seeds 2 and 3), each on every kernel path. The
// gradient ones exceeded the plain rule by FA2's documented D =
// rowsum(dO∘O) excess, which checkCase, checkHalfCase and checkVarLenSeq
// did not allow without dropout (before: fp16 dK 8.99e-4 > 7.34e-4,
// float32 dQ 3.94e-6 > 2.85e-6, fp16 varlen dQ 9.47e-4 > 5.85e-4); the
// last is a q8_0 cache of head dim 59, refused as DType documents.
func TestRandomCombinationsFound(t *testing.T) {
	t.Run("fp16/b2_sq66_sk127_h2_hk2_d8_w1", func(t *testing.T) {
		c := tcase{b: 2, sq: 66, sk: 127, h: 2, hk: 2, d: 8, workers: 1}
		forEachKernelHalf(t, Float16, false, func(t *testing.T) { checkHalfCase(t, c, Float16) })
	})
	t.Run("f32/b1_sq280_sk200_h9_hk3_d64_causal_cap17.6_localglobal_dlse", func(t *testing.T) {
		c := tcase{b: 1, sq: 280, sk: 200, h: 9, hk: 3, d: 64, causal: true, softcap: 17.621721, workers: 1, mods: modCases[5], dlse: true}
		forEachKernel(t, func(t *testing.T) { checkCase(t, c) })
	})
	t.Run("varlen/fp16/q58_k185_b2_h1_hk1_d24_causal_alibi", func(t *testing.T) {
		vc := faVarLen{maxQ: 58, maxK: 185, b: 2, h: 1, hk: 1, d: 24, causal: true, alibi: true, dt: Float16}
		forEachKernelHalf(t, Float16, false, func(t *testing.T) { checkFAVarLen(t, vc, 59, 3) })
	})
	// 16-bit dV with dropout rounded P̃ = P·z/(1−p) to the type where the
	// same-type algorithm rounds P (before: bf16 dV 0.0429 > 0.0403,
	// 0.0123 > 0.0113 and, varlen, 0.0492 > 0.0329, all paths alike).
	for _, c := range []tcase{
		{b: 2, sq: 190, sk: 235, h: 1, hk: 1, d: 59, causal: true, alibi: 1, dropout: 0.17, workers: 3, topLeft: true, dlse: true, mods: modCases[3]},
		{b: 1, sq: 179, sk: 201, h: 6, hk: 3, d: 8, dropout: 0.17, workers: 4, mods: modCases[8]},
	} {
		t.Run("bf16/"+c.String(), func(t *testing.T) {
			forEachKernelHalf(t, BFloat16, false, func(t *testing.T) { checkHalfCase(t, c, BFloat16) })
		})
	}
	t.Run("varlen/bf16/q95_k72_b4_h9_hk3_d72_causal_cap6_drop0.17", func(t *testing.T) {
		vc := faVarLen{maxQ: 95, maxK: 72, b: 4, h: 9, hk: 3, d: 72, causal: true, softcap: 5.9881883, dropout: 0.17, dt: BFloat16}
		forEachKernelHalf(t, BFloat16, false, func(t *testing.T) { checkFAVarLen(t, vc, 943, 3) })
	})
	t.Run("q8_0-cache-d59", func(t *testing.T) {
		for _, dt := range []DType{Q8_0, Q4_0} {
			err := Convert(NewTensorOf(dt, 1, 96, 2, 59), NewTensor(1, 96, 2, 59))
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Errorf("%v cache of head dim 59: got %v, want an *ArgError (DType: dim a multiple of 32)", dt, err)
			}
		}
	})
}
