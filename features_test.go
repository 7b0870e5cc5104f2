package flashattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// features_test.go: learnable sinks, dLSE, accumulation, offsets for
// shards, top-left alignment, seqused_q and cancellation, against the
// float64 reference.

// sinkCase is a dense case with sinks; opts adds options on top.
type sinkCase struct {
	name                 string
	b, sq, sk, h, hk, d  int
	causal, topLeft      bool
	window               *Window
	dlse                 bool
	dt                   DType
	blockMask, splitKeys bool
	sinks                []float32 // the sinks, head h taking sinks[h % len] (nil: random, σ = 2)
	qScale               float32   // Q and K are scaled by it (0: 1), for large logits
}

func (c sinkCase) params(sinks []float32) reference.Params {
	p := reference.Params{Batch: c.b, SeqQ: c.sq, SeqK: c.sk, Heads: c.h, KVHeads: c.hk, HeadDim: c.d,
		Causal: c.causal, TopLeft: c.topLeft}
	if sinks != nil {
		p.Sinks = to64(sinks)
	}
	if c.window != nil {
		p.Window, p.WindowLeft, p.WindowRight = true, c.window.Left, c.window.Right
	}
	return p
}

// TestSinks: forward, every gradient and dSinks with causal, window,
// top-left, GQA, dLSE, block masks, key splits (decoding shapes) and bf16,
// on every kernel path.
func TestSinks(t *testing.T) {
	cases := []sinkCase{
		{name: "plain", b: 2, sq: 37, sk: 53, h: 4, hk: 2, d: 24},
		{name: "causal", b: 1, sq: 70, sk: 70, h: 2, hk: 1, d: 32, causal: true},
		{name: "window128-like", b: 1, sq: 90, sk: 90, h: 2, hk: 2, d: 16, causal: true, window: &Window{Left: 20, Right: 0}},
		{name: "top-left", b: 1, sq: 20, sk: 45, h: 2, hk: 1, d: 16, causal: true, topLeft: true},
		{name: "dlse", b: 1, sq: 33, sk: 47, h: 2, hk: 2, d: 20, causal: true, dlse: true},
		{name: "rows with no key", b: 1, sq: 30, sk: 10, h: 2, hk: 1, d: 8, causal: true, dlse: true},
		{name: "block mask", b: 1, sq: 128, sk: 128, h: 2, hk: 1, d: 16, blockMask: true},
		{name: "decode split", b: 2, sq: 1, sk: 600, h: 8, hk: 2, d: 64, splitKeys: true},
		{name: "bf16", b: 1, sq: 40, sk: 61, h: 4, hk: 2, d: 32, causal: true, dt: BFloat16},
	}
	forEachKernel(t, func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { checkSinks(t, c) })
		}
	})
}

func checkSinks(t *testing.T, c sinkCase) {
	r := newRand(uint64(c.sq*c.sk + c.d))
	q, k, v, do := randSlice(r, c.b*c.sq*c.h*c.d), randSlice(r, c.b*c.sk*c.hk*c.d), randSlice(r, c.b*c.sk*c.hk*c.d), randSlice(r, c.b*c.sq*c.h*c.d)
	sinks := make([]float32, c.h)
	for i := range sinks {
		sinks[i] = float32(r.NormFloat64()) * 2
		if c.sinks != nil {
			sinks[i] = c.sinks[i%len(c.sinks)]
		}
	}
	if c.qScale != 0 {
		for _, x := range [][]float32{q, k} {
			for i := range x {
				x[i] *= c.qScale
			}
		}
	}
	var dlse []float32
	if c.dlse {
		dlse = randSlice(r, c.b*c.h*c.sq)
	}
	dt := c.dt
	if dt == 0 {
		dt = Float32
	}
	half := dt != Float32
	if half {
		prec := precisionOf(dt)
		q, k, v, do = prec.RoundSlice(q), prec.RoundSlice(k), prec.RoundSlice(v), prec.RoundSlice(do)
	}
	par := c.params(sinks)
	opts := &Options{Causal: c.causal, TopLeft: c.topLeft, Window: c.window, Sinks: sinks}
	if c.blockMask {
		bm, err := BigBird(BlockShape{Batch: 1, Heads: 1, SeqQ: c.sq, SeqK: c.sk, BlockQ: 32, BlockK: 32}, 0, 1, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		opts.BlockMask = bm
		dense := denseBlock(bm)
		par.Mask = func(b, h, i, j int) bool { return dense(b, h, i, j) }
	}
	qt, kt, vt := toType(q, dt, c.b, c.sq, c.h, c.d), toType(k, dt, c.b, c.sk, c.hk, c.d), toType(v, dt, c.b, c.sk, c.hk, c.d)
	out, lse, err := Forward(qt, kt, vt, opts)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := NewTensorOf(dt, c.b, c.sq, c.h, c.d), NewTensorOf(dt, c.b, c.sk, c.hk, c.d), NewTensorOf(dt, c.b, c.sk, c.hk, c.d)
	dsinks := make([]float32, c.h)
	if err := BackwardGrads(context.Background(), Grads{DQ: dq, DK: dk, DV: dv, DSinks: dsinks}, qt, kt, vt, out, toType(do, dt, c.b, c.sq, c.h, c.d), lse, dlse, opts); err != nil {
		t.Fatal(err)
	}
	o64, l64 := reference.Forward64(par, to64(q), to64(k), to64(v))
	var dlse64 []float64
	if dlse != nil {
		dlse64 = to64(dlse)
	}
	dq64, dk64, dv64, ds64 := reference.BackwardGrads64(par, to64(q), to64(k), to64(v), to64(do), dlse64)
	var o32, l32, dq32, dk32, dv32, ds32 []float32
	if half {
		o32, l32 = reference.ForwardHalf(par, precisionOf(dt), q, k, v)
		dq32, dk32, dv32, ds32 = reference.BackwardHalfGrads(par, precisionOf(dt), q, k, v, do, dlse)
	} else {
		o32, l32 = reference.Forward32(plainPar(par), q, k, v)
		dq32, dk32, dv32, ds32 = reference.BackwardGrads32(plainPar(par), q, k, v, do, dlse)
	}
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
	}{{"O", gather(out), o32, o64}, {"LSE", lse, l32, l64}, {"dQ", gather(dq), dq32, dq64}, {"dK", gather(dk), dk32, dk64}, {"dV", gather(dv), dv32, dv64}, {"dSinks", dsinks, ds32, ds64}} {
		var err error
		if half && c.qScale > 1 && (g.name == "dQ" || g.name == "dK") {
			// Large logits: the documented excess of the 16-bit dQ and dK
			// (halfDBound; batch 1, heads = KV heads).
			bq, bk := halfDBound(dt, 1/math.Sqrt(float64(c.d)), c.d, 1, do, gather(out), q, k, probs64(par, to64(q), to64(k), l64), c.sk)
			bound := map[string]float64{"dQ": bq, "dK": bk}[g.name]
			e, pl := reference.MaxAbsDiff32vs64(g.got, g.ref), reference.MaxAbsDiff32vs64(g.pl, g.ref)
			if lim := 2*pl + reference.Slack(precisionOf(dt)) + bound; e > lim {
				err = fmt.Errorf("%s error %.3g exceeds 2×%.3g + slack + bound %.3g", g.name, e, pl, bound)
			}
		} else if half {
			err = reference.CheckHalf(g.name, precisionOf(dt), g.got, g.pl, g.ref)
		} else {
			err = reference.Check(g.name, g.got, g.pl, g.ref)
		}
		if err != nil {
			t.Error(err)
		}
	}
}

// TestSinksLargeLSE: sinks that put |LSE| past lseExactFrom (16.1, 30,
// 100; 15.9 just below), a sink of −20 and one near the scores under large
// logits, rows that see no key (O = 0, LSE = the sink), dLSE, MQA and GQA,
// in float32, bf16 and fp16 on every kernel path: the backward's LSE
// correction must count the sink's exp(sink − LSE) in the row's sum.
func TestSinksLargeLSE(t *testing.T) {
	cases := []sinkCase{
		{name: "sink16.1", b: 1, sq: 37, sk: 53, h: 2, hk: 2, d: 24, sinks: []float32{16.1, 15.9}},
		{name: "sink30 GQA dlse", b: 2, sq: 33, sk: 47, h: 4, hk: 2, d: 16, causal: true, dlse: true, sinks: []float32{30, 16.1, 100, 0}},
		{name: "sink100 MQA", b: 1, sq: 40, sk: 70, h: 3, hk: 1, d: 32, sinks: []float32{100, 20, 17}},
		{name: "rows with no key", b: 1, sq: 30, sk: 10, h: 2, hk: 1, d: 8, causal: true, dlse: true, sinks: []float32{30, 16.1}},
		{name: "large logits", b: 1, sq: 40, sk: 64, h: 2, hk: 2, d: 32, causal: true, qScale: 3, sinks: []float32{-20, 22}},
	}
	run := func(t *testing.T, dt DType) {
		forEachKernel(t, func(t *testing.T) {
			for _, c := range cases {
				c.dt = dt
				t.Run(c.name, func(t *testing.T) { checkSinks(t, c) })
			}
		})
	}
	t.Run("float32", func(t *testing.T) { run(t, Float32) })
	for _, dt := range []DType{BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			forEachHalf(t, dt, func(t *testing.T) { run(t, dt) })
		})
	}
}

// TestSinksWorkers: dSinks (and dQ) are bit for bit the same whether the
// KV pass sums dQ and the sink gradient's Σ P·dP (one worker: 4 pairs per
// worker) or the dQ pass does (7 workers), with sinks past lseExactFrom.
func TestSinksWorkers(t *testing.T) {
	const b, sq, sk, h, hk, d = 2, 45, 77, 4, 2, 16
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			r := newRand(7)
			prec := reference.BF16
			if dt == Float16 {
				prec = reference.F16
			}
			x := func(n int) []float32 {
				v := randSlice(r, n)
				if dt != Float32 {
					v = prec.RoundSlice(v)
				}
				return v
			}
			q, k, v, do := toType(x(b*sq*h*d), dt, b, sq, h, d), toType(x(b*sk*hk*d), dt, b, sk, hk, d), toType(x(b*sk*hk*d), dt, b, sk, hk, d), toType(x(b*sq*h*d), dt, b, sq, h, d)
			var ref, refDQ []float32
			for _, w := range []int{1, 7} {
				opts := &Options{Causal: true, Sinks: []float32{0.5, 20, -3, 30}, Workers: w}
				out, lse, err := Forward(q, k, v, opts)
				if err != nil {
					t.Fatal(err)
				}
				dq, dk, dv := NewTensorOf(dt, b, sq, h, d), NewTensorOf(dt, b, sk, hk, d), NewTensorOf(dt, b, sk, hk, d)
				ds := make([]float32, h)
				if err := BackwardGrads(context.Background(), Grads{DQ: dq, DK: dk, DV: dv, DSinks: ds}, q, k, v, out, do, lse, nil, opts); err != nil {
					t.Fatal(err)
				}
				if ref == nil {
					ref, refDQ = ds, gather(dq)
					continue
				}
				if !slices.Equal(ds, ref) || !slices.Equal(gather(dq), refDQ) {
					t.Errorf("workers %d: dSinks %v, want %v (1 worker), or dQ differs", w, ds, ref)
				}
			}
		})
	}
}

// TestSinksKeyShards: the backward run per key shard with the whole
// call's O and LSE (as MergeStates gives them), accumulating, DSinks in the
// first shard's call only (each row's sink term once), with sinks that put
// |LSE| past lseExactFrom: no pass may renormalise a row over a shard's
// keys, and the sink gradient must come from the whole row's D. float32
// dSinks meets the rule, dQ, dK and dV the rule plus what the LSE's
// rounding leaves; bf16 and fp16 dSinks meet it plus the error of D formed
// from the 16-bit O, Σ_i P_sink,i·u·‖dO_i‖‖O_i‖.
func TestSinksKeyShards(t *testing.T) {
	const b, sq, sk, h, d = 1, 30, 80, 2, 16
	cut := []int{0, 37, sk}
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			forEachKernel(t, func(t *testing.T) {
				r := newRand(11)
				q, k, v, do := randSlice(r, b*sq*h*d), randSlice(r, b*sk*h*d), randSlice(r, b*sk*h*d), randSlice(r, b*sq*h*d)
				for _, x := range [][]float32{q, k} {
					for i := range x {
						x[i] *= 2.5 // scores of σ ≈ 6: LSE past 16 with mass in both shards
					}
				}
				u := 0.0
				if dt != Float32 {
					prec := precisionOf(dt)
					q, k, v, do = prec.RoundSlice(q), prec.RoundSlice(k), prec.RoundSlice(v), prec.RoundSlice(do)
					u = 0x1p-8
					if dt == Float16 {
						u = 0x1p-11
					}
				}
				sinks := []float32{1.5, 20}
				opts := &Options{Sinks: sinks}
				qt, dot := toType(q, dt, b, sq, h, d), toType(do, dt, b, sq, h, d)
				out, lse, err := Forward(qt, toType(k, dt, b, sk, h, d), toType(v, dt, b, sk, h, d), opts)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Max(lse) < lseExactFrom {
					t.Fatal("no row reaches lseExactFrom")
				}
				dq, dk, dv := NewTensorOf(dt, b, sq, h, d), make([]float32, b*sk*h*d), make([]float32, b*sk*h*d)
				dsinks := make([]float32, h)
				for s := 0; s+1 < len(cut); s++ {
					n := cut[s+1] - cut[s]
					ks, vs := k[cut[s]*h*d:cut[s+1]*h*d], v[cut[s]*h*d:cut[s+1]*h*d]
					g := Grads{DQ: dq, DK: NewTensorOf(dt, b, n, h, d), DV: NewTensorOf(dt, b, n, h, d), Accumulate: true}
					if s == 0 {
						g.DSinks = dsinks
					}
					if err := BackwardGrads(context.Background(), g, qt, toType(ks, dt, b, n, h, d), toType(vs, dt, b, n, h, d), out, dot, lse, nil, opts); err != nil {
						t.Fatal(err)
					}
					copy(dk[cut[s]*h*d:], gather(g.DK))
					copy(dv[cut[s]*h*d:], gather(g.DV))
				}
				par := reference.Params{Batch: b, SeqQ: sq, SeqK: sk, Heads: h, KVHeads: h, HeadDim: d, Sinks: to64(sinks)}
				dq64, dk64, dv64, ds64 := reference.BackwardGrads64(par, to64(q), to64(k), to64(v), to64(do), nil)
				_, _, _, ds32 := reference.BackwardGrads32(plainPar(par), q, k, v, do, nil)
				if dt == Float32 {
					dq32, dk32, dv32, _ := reference.BackwardGrads32(plainPar(par), q, k, v, do, nil)
					for _, g := range []struct {
						name    string
						got, pl []float32
						ref     []float64
					}{{"dQ", gather(dq), dq32, dq64}, {"dK", dk, dk32, dk64}, {"dV", dv, dv32, dv64}, {"dSinks", dsinks, ds32, ds64}} {
						// A key shard cannot correct the LSE's float32 rounding
						// (the row's other keys are elsewhere): its P keeps
						// 2⁻²⁴·|LSE| relative error, which dQ, dK and dV carry.
						var extra float64
						if g.name != "dSinks" {
							var big, lmax float64
							for _, x := range g.ref {
								big = max(big, math.Abs(x))
							}
							for _, l := range lse {
								lmax = max(lmax, math.Abs(float64(l)))
							}
							extra = 0x1p-22 * lmax * big
						}
						e, pl := reference.MaxAbsDiff32vs64(g.got, g.ref), reference.MaxAbsDiff32vs64(g.pl, g.ref)
						if lim := 2*pl + 1e-6 + extra; e > lim {
							t.Errorf("%s error %.3g exceeds 2×%.3g + 1e-6 + %.3g", g.name, e, pl, extra)
						}
					}
					return
				}
				og := gather(out)
				var bound float64
				for i := 0; i < sq; i++ {
					for hh := 0; hh < h; hh++ {
						var a, c float64
						for x := 0; x < d; x++ {
							a += float64(do[(i*h+hh)*d+x]) * float64(do[(i*h+hh)*d+x])
							c += float64(og[(i*h+hh)*d+x]) * float64(og[(i*h+hh)*d+x])
						}
						bound += math.Exp(float64(sinks[hh])-float64(lse[hh*sq+i])) * u * math.Sqrt(a*c)
					}
				}
				_, _, _, dsh := reference.BackwardHalfGrads(par, precisionOf(dt), q, k, v, do, nil)
				e, pl := reference.MaxAbsDiff32vs64(dsinks, ds64), reference.MaxAbsDiff32vs64(dsh, ds64)
				if lim := 2*pl + reference.Slack(precisionOf(dt)) + bound; e > lim {
					t.Errorf("dSinks error %.3g exceeds 2×%.3g + slack + bound %.3g", e, pl, bound)
				}
			})
		})
	}
}

// TestSinksDecodeCache: sinks when decoding from a paged bf16 KV cache with
// split-K (NumSplits), against the float64 reference.
func TestSinksDecodeCache(t *testing.T) {
	const B, H, Hk, D, block, seqLen = 2, 8, 2, 64, 16, 300
	r := newRand(9)
	nb := 2 * (seqLen/block + 1)
	kf, vf := randSlice(r, nb*block*Hk*D), randSlice(r, nb*block*Hk*D)
	kc, vc := NewTensorOf(BFloat16, nb, block, Hk, D), NewTensorOf(BFloat16, nb, block, Hk, D)
	if err := Convert(kc, Dense(kf, nb, block, Hk, D)); err != nil {
		t.Fatal(err)
	}
	if err := Convert(vc, Dense(vf, nb, block, Hk, D)); err != nil {
		t.Fatal(err)
	}
	per := seqLen/block + 1
	table := make([]int32, B*per)
	for i := range table {
		table[i] = int32((i*3 + 1) % nb)
	}
	q := randSlice(r, B*H*D)
	sinks := []float32{-1, 0, 1, 2, 3, -3, 0.5, 1.5}
	for _, splits := range []int{0, 1, 5} {
		opts := &Options{Sinks: sinks, KVCache: &KVCache{SeqLens: []int32{seqLen, 77}, BlockTable: table, BlocksPerSeq: per, NumSplits: splits}}
		out, lse, err := Forward(Dense(q, B, 1, H, D), kc, vc, opts)
		if err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			n := int(opts.KVCache.SeqLens[b])
			keys, vals := make([]float32, n*Hk*D), make([]float32, n*Hk*D)
			for j := 0; j < n; j++ {
				blk := int(table[b*per+j/block])
				for hk := 0; hk < Hk; hk++ {
					for x := 0; x < D; x++ {
						keys[(j*Hk+hk)*D+x] = kc.At(blk, j%block, hk, x)
						vals[(j*Hk+hk)*D+x] = vc.At(blk, j%block, hk, x)
					}
				}
			}
			par := reference.Params{Batch: 1, SeqQ: 1, SeqK: n, Heads: H, KVHeads: Hk, HeadDim: D, Sinks: to64(sinks)}
			qb := reference.BF16.RoundSlice(q[b*H*D : (b+1)*H*D])
			o64, l64 := reference.Forward64(par, to64(qb), to64(keys), to64(vals))
			oh, lh := reference.ForwardHalf(par, reference.BF16, qb, keys, vals)
			if err := reference.CheckHalf("O", reference.BF16, gather(out)[b*H*D:(b+1)*H*D], oh, o64); err != nil {
				t.Errorf("splits %d seq %d: %v", splits, b, err)
			}
			if err := reference.CheckHalf("LSE", reference.BF16, lse[b*H:(b+1)*H], lh, l64); err != nil {
				t.Errorf("splits %d seq %d: %v", splits, b, err)
			}
		}
	}
}

// TestShardsWithOffsets: ring attention by hand. A causal sequence of N
// tokens is cut into 4 query shards and 4 key shards; each (query shard,
// key shard) pair is one call with Offsets, run on its own goroutine (a
// machine); the forward results of a query shard are merged with
// MergeStates, and the backward of every pair runs with the merged O and
// LSE, accumulating into the shard's dQ, dK and dV. The result equals the
// unsharded call under the error rule, with sinks and dropout on.
func TestShardsWithOffsets(t *testing.T) {
	const N, H, D, shards = 200, 2, 16, 4
	r := newRand(21)
	q, k, v, do := randSlice(r, N*H*D), randSlice(r, N*H*D), randSlice(r, N*H*D), randSlice(r, N*H*D)
	sinks := []float32{0.5, -0.7}
	base := Options{Causal: true, Sinks: sinks, ALiBi: []float32{0.05, 0.1}}
	bounds := []int{0, 37, 100, 151, N} // ragged shards
	shard := func(x []float32, s int) Tensor {
		return Dense(x[bounds[s]*H*D:bounds[s+1]*H*D], 1, bounds[s+1]-bounds[s], H, D)
	}
	optsFor := func(qs, ks int) *Options {
		o := base
		o.Offsets = &Offsets{Query: bounds[qs], Key: bounds[ks]}
		return &o
	}
	// Forward: per query shard, the parts over key shards, merged. Rows a
	// pair does not see get LSE −Inf there; the sinks count once, in the
	// merge, so the parts run without them.
	outs := make([]Tensor, shards)
	lses := make([][]float32, shards)
	var wg sync.WaitGroup
	errs := make(chan error, shards*shards)
	for qs := 0; qs < shards; qs++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var parts []Tensor
			var plse [][]float32
			for ks := 0; ks <= qs; ks++ { // causal: later key shards see nothing
				o := optsFor(qs, ks)
				o.Sinks = nil
				out, lse, err := Forward(shard(q, qs), shard(k, ks), shard(v, ks), o)
				if err != nil {
					errs <- err
					return
				}
				parts, plse = append(parts, out), append(plse, lse)
			}
			// The sinks as one more part: O = 0, LSE = sink.
			n := bounds[qs+1] - bounds[qs]
			sinkLSE := make([]float32, H*n)
			for h := 0; h < H; h++ {
				for i := 0; i < n; i++ {
					sinkLSE[h*n+i] = sinks[h]
				}
			}
			parts, plse = append(parts, NewTensor(1, n, H, D)), append(plse, sinkLSE)
			outs[qs], lses[qs] = NewTensor(1, n, H, D), make([]float32, H*n)
			if err := MergeStates(outs[qs], lses[qs], parts, plse); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Backward: every pair with the merged O and LSE, accumulating; the
	// sink gradient is the sum over query shards (once per row).
	dq, dk, dv := NewTensor(1, N, H, D), NewTensor(1, N, H, D), NewTensor(1, N, H, D)
	dsinks := make([]float32, H)
	var mu sync.Mutex // dK, dV of a key shard are shared by the query shards' goroutines
	errs = make(chan error, shards*shards)
	for qs := 0; qs < shards; qs++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ks := 0; ks <= qs; ks++ {
				o := optsFor(qs, ks)
				g := Grads{DQ: shard(dq.Data, qs), DK: shard(dk.Data, ks), DV: shard(dv.Data, ks), Accumulate: true}
				mu.Lock()
				if ks == 0 {
					g.DSinks = dsinks // each row's sink term once
				}
				err := BackwardGrads(context.Background(), g, shard(q, qs), shard(k, ks), shard(v, ks), outs[qs], shard(do, qs), lses[qs], nil, o)
				mu.Unlock()
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	par := reference.Params{Batch: 1, SeqQ: N, SeqK: N, Heads: H, KVHeads: H, HeadDim: D, Causal: true, Sinks: to64(sinks), ALiBi: to64(base.ALiBi)}
	o64, l64 := reference.Forward64(par, to64(q), to64(k), to64(v))
	o32, l32 := reference.Forward32(plainPar(par), q, k, v)
	var gotO, gotL []float32
	for s := 0; s < shards; s++ {
		gotO = append(gotO, outs[s].Data...)
	}
	// LSE: shard layout [H, n] per shard → the full [H, N].
	gotL = make([]float32, H*N)
	for s := 0; s < shards; s++ {
		n := bounds[s+1] - bounds[s]
		for h := 0; h < H; h++ {
			copy(gotL[h*N+bounds[s]:], lses[s][h*n:(h+1)*n])
		}
	}
	dq64, dk64, dv64, ds64 := reference.BackwardGrads64(par, to64(q), to64(k), to64(v), to64(do), nil)
	dq32, dk32, dv32, ds32 := reference.BackwardGrads32(plainPar(par), q, k, v, do, nil)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
	}{{"O", gotO, o32, o64}, {"LSE", gotL, l32, l64}, {"dQ", dq.Data, dq32, dq64}, {"dK", dk.Data, dk32, dk64}, {"dV", dv.Data, dv32, dv64}, {"dSinks", dsinks, ds32, ds64}} {
		if err := reference.Check(g.name, g.got, g.pl, g.ref); err != nil {
			t.Error(err)
		}
	}
}

// TestTopLeftAndSeqUsedQ: top-left causal alignment when Sq ≠ Sk, and
// padded query rows (VarLen.SeqUsedQ) that get O = 0, LSE = −Inf, dQ = 0
// even in dirty caller-owned buffers, as do the rows of a sequence without
// keys.
func TestTopLeftAndSeqUsedQ(t *testing.T) {
	for _, c := range []sinkCase{
		{name: "top-left sq<sk", b: 2, sq: 20, sk: 50, h: 2, hk: 1, d: 16, causal: true, topLeft: true},
		{name: "top-left sq>sk", b: 1, sq: 50, sk: 20, h: 2, hk: 2, d: 16, causal: true, topLeft: true, window: &Window{Left: 5, Right: 2}},
	} {
		r := newRand(3)
		q, k, v, do := randSlice(r, c.b*c.sq*c.h*c.d), randSlice(r, c.b*c.sk*c.hk*c.d), randSlice(r, c.b*c.sk*c.hk*c.d), randSlice(r, c.b*c.sq*c.h*c.d)
		par := c.params(nil)
		opts := &Options{Causal: c.causal, TopLeft: true, Window: c.window}
		qt, kt, vt := Dense(q, c.b, c.sq, c.h, c.d), Dense(k, c.b, c.sk, c.hk, c.d), Dense(v, c.b, c.sk, c.hk, c.d)
		out, lse, err := Forward(qt, kt, vt, opts)
		if err != nil {
			t.Fatal(err)
		}
		dq, dk, dv, err := Backward(qt, kt, vt, out, Dense(do, c.b, c.sq, c.h, c.d), lse, opts)
		if err != nil {
			t.Fatal(err)
		}
		o64, l64 := reference.Forward64(par, to64(q), to64(k), to64(v))
		o32, l32 := reference.Forward32(plainPar(par), q, k, v)
		dq64, dk64, dv64 := reference.Backward64(par, to64(q), to64(k), to64(v), to64(do))
		dq32, dk32, dv32 := reference.Backward32(plainPar(par), q, k, v, do)
		for _, g := range []struct {
			name    string
			got, pl []float32
			ref     []float64
		}{{"O", out.Data, o32, o64}, {"LSE", lse, l32, l64}, {"dQ", dq.Data, dq32, dq64}, {"dK", dk.Data, dk32, dk64}, {"dV", dv.Data, dv32, dv64}} {
			if err := reference.Check(g.name, g.got, g.pl, g.ref); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	}
	// SeqUsedQ: sequence 0 uses 7 of its 10 rows; sequence 1 has no keys.
	const H, D = 2, 8
	r := newRand(4)
	q, k, do := randSlice(r, 15*H*D), randSlice(r, 12*H*D), randSlice(r, 15*H*D)
	vl := &VarLen{CuSeqlensQ: []int32{0, 10, 15}, CuSeqlensK: []int32{0, 12, 12}, SeqUsedQ: []int32{7, 5}}
	qt, kt := Dense(q, 1, 15, H, D), Dense(k, 1, 12, H, D)
	out, lse := NewTensor(1, 15, H, D), make([]float32, H*15)
	for i := range out.Data {
		out.Data[i] = 9
	}
	if err := ForwardInto(out, lse, qt, kt, kt, &Options{VarLen: vl, Causal: true}); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := NewTensor(1, 15, H, D), NewTensor(1, 12, H, D), NewTensor(1, 12, H, D)
	for i := range dq.Data {
		dq.Data[i] = 9
	}
	if err := BackwardInto(dq, dk, dv, qt, kt, kt, out, Dense(do, 1, 15, H, D), lse, &Options{VarLen: vl, Causal: true}); err != nil {
		t.Fatal(err)
	}
	for i := 7; i < 15; i++ {
		for h := 0; h < H; h++ {
			for x := 0; x < D; x++ {
				if out.At(0, i, h, x) != 0 || dq.At(0, i, h, x) != 0 {
					t.Fatalf("row %d head %d: O %v, dQ %v; want 0", i, h, out.At(0, i, h, x), dq.At(0, i, h, x))
				}
			}
			if l := lse[h*15+i]; !math.IsInf(float64(l), -1) {
				t.Fatalf("row %d head %d: LSE %v, want −Inf", i, h, l)
			}
		}
	}
	// The used rows are those of a call on sequence 0's first 7 rows.
	want, wl, err := Forward(Dense(q[:7*H*D], 1, 7, H, D), kt, kt, &Options{Causal: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(want.Data, out.Data[:7*H*D]) || wl[0] != lse[0] {
		t.Error("SeqUsedQ: the used rows differ from a call on them alone")
	}
}

// TestAccumulate: two backward calls with Accumulate add up to one call's
// gradients (float32 and bf16 outputs).
func TestAccumulate(t *testing.T) {
	for _, dt := range []DType{Float32, BFloat16} {
		r := newRand(5)
		const N, H, D = 60, 2, 16
		q, k, v, do := randSlice(r, N*H*D), randSlice(r, N*H*D), randSlice(r, N*H*D), randSlice(r, N*H*D)
		qt, kt, vt := toType(q, dt, 1, N, H, D), toType(k, dt, 1, N, H, D), toType(v, dt, 1, N, H, D)
		dot := toType(do, dt, 1, N, H, D)
		opts := &Options{Causal: true, Sinks: []float32{1, -1}}
		out, lse, err := Forward(qt, kt, vt, opts)
		if err != nil {
			t.Fatal(err)
		}
		once := [3]Tensor{NewTensorOf(dt, 1, N, H, D), NewTensorOf(dt, 1, N, H, D), NewTensorOf(dt, 1, N, H, D)}
		ds1 := make([]float32, H)
		if err := BackwardGrads(context.Background(), Grads{DQ: once[0], DK: once[1], DV: once[2], DSinks: ds1}, qt, kt, vt, out, dot, lse, nil, opts); err != nil {
			t.Fatal(err)
		}
		twice := [3]Tensor{NewTensorOf(dt, 1, N, H, D), NewTensorOf(dt, 1, N, H, D), NewTensorOf(dt, 1, N, H, D)}
		ds2 := make([]float32, H)
		for range 2 {
			if err := BackwardGrads(context.Background(), Grads{DQ: twice[0], DK: twice[1], DV: twice[2], DSinks: ds2, Accumulate: true}, qt, kt, vt, out, dot, lse, nil, opts); err != nil {
				t.Fatal(err)
			}
		}
		tol := 1e-5
		if dt != Float32 {
			tol = 2e-2
		}
		for i, name := range []string{"dQ", "dK", "dV"} {
			a, b := gather(once[i]), gather(twice[i])
			for j := range a {
				if d := math.Abs(float64(2*a[j] - b[j])); d > tol*(1+math.Abs(float64(b[j]))) {
					t.Errorf("%v %s[%d]: twice %v, 2×once %v", dt, name, j, b[j], 2*a[j])
					break
				}
			}
		}
		for h := range ds1 {
			if d := math.Abs(float64(2*ds1[h] - ds2[h])); d > 1e-5*(1+math.Abs(float64(ds2[h]))) {
				t.Errorf("%v dSinks[%d]: twice %v, 2×once %v", dt, h, ds2[h], 2*ds1[h])
			}
		}
	}
}

// TestCancellation: a cancelled context stops Forward and BackwardGrads
// with ctx.Err(); a context cancelled before the call returns at once.
func TestCancellation(t *testing.T) {
	const N, H, D = 2048, 4, 64
	r := newRand(6)
	q := Dense(randSlice(r, N*H*D), 1, N, H, D)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := ForwardContext(ctx, q, q, q, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("already cancelled: %v", err)
	}
	// Cancel from a mask function called during the call: the next tiles
	// are not computed.
	ctx, cancel = context.WithCancel(context.Background())
	var once sync.Once
	calls := 0
	var mu sync.Mutex
	mask := MaskFunc(func(b, h, i, j int) bool {
		once.Do(cancel)
		mu.Lock()
		calls++
		mu.Unlock()
		return true
	})
	_, _, err := ForwardContext(ctx, q, q, q, &Options{Mask: mask})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during the call: %v", err)
	}
	if all := N * N * H; calls >= all {
		t.Errorf("the mask was evaluated %d times (every element): the call did not stop", calls)
	}
	out, lse, err := Forward(q, q, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	dq, dk, dv := NewTensor(1, N, H, D), NewTensor(1, N, H, D), NewTensor(1, N, H, D)
	err = BackwardGrads(ctx, Grads{DQ: dq, DK: dk, DV: dv}, q, q, q, out, out, lse, nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("backward, already cancelled: %v", err)
	}
	_ = fmt.Sprint()
}

// TestBias: an additive bias tensor (broadcast over the batch, per head,
// with −Inf entries) against the reference's score modifier, forward and
// backward; a bias that does not cover the call is refused.
func TestBias(t *testing.T) {
	const B, N, H, D = 2, 40, 2, 16
	r := newRand(8)
	bias := randSlice(r, 1*H*N*N)
	for i := range bias {
		if i%7 == 3 {
			bias[i] = float32(math.Inf(-1))
		}
	}
	bs, err := NewBias(bias, 1, H, N, N)
	if err != nil {
		t.Fatal(err)
	}
	q, k, v, do := randSlice(r, B*N*H*D), randSlice(r, B*N*H*D), randSlice(r, B*N*H*D), randSlice(r, B*N*H*D)
	opts := &Options{Causal: true, ScoreMod: bs}
	qt, kt, vt := Dense(q, B, N, H, D), Dense(k, B, N, H, D), Dense(v, B, N, H, D)
	out, lse, err := Forward(qt, kt, vt, opts)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, err := Backward(qt, kt, vt, out, Dense(do, B, N, H, D), lse, opts)
	if err != nil {
		t.Fatal(err)
	}
	par := reference.Params{Batch: B, SeqQ: N, SeqK: N, Heads: H, KVHeads: H, HeadDim: D, Causal: true,
		ScoreMod: func(b, h, i, j int, x float64) (float64, float64) { return x + float64(bias[(h*N+i)*N+j]), 1 }}
	o64, l64 := reference.Forward64(par, to64(q), to64(k), to64(v))
	o32, l32 := reference.Forward32(plainPar(par), q, k, v)
	dq64, dk64, dv64 := reference.Backward64(par, to64(q), to64(k), to64(v), to64(do))
	dq32, dk32, dv32 := reference.Backward32(plainPar(par), q, k, v, do)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
	}{{"O", out.Data, o32, o64}, {"LSE", lse, l32, l64}, {"dQ", dq.Data, dq32, dq64}, {"dK", dk.Data, dk32, dk64}, {"dV", dv.Data, dv32, dv64}} {
		if err := reference.Check(g.name, g.got, g.pl, g.ref); err != nil {
			t.Error(err)
		}
	}
	small, _ := NewBias(make([]float32, N*(N-1)), 1, 1, N, N-1)
	if _, _, err := Forward(qt, kt, vt, &Options{ScoreMod: small}); err == nil {
		t.Error("a bias of fewer keys than the call was accepted")
	}
	three, _ := NewBias(make([]float32, 3*N*N), 1, 3, N, N)
	if _, _, err := Forward(qt, kt, vt, &Options{ScoreMod: three}); err == nil {
		t.Error("a bias of 3 heads for 2 was accepted")
	}
}

// TestMHADecodeHeads: decoding one token of multi-head attention (one query
// row per KV head: the multi-head decode kernels read each key's heads side
// by side) from f32, bf16, fp16, q8_0, q4_0 and fp8 caches, contiguous and paged,
// against the float64 reference of the cache as stored.
func TestMHADecodeHeads(t *testing.T) {
	const B, H, D, block = 2, 8, 64, 16
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		for _, paged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/paged=%v", dt, paged), func(t *testing.T) {
				forEachKernel(t, func(t *testing.T) {
					r := newRand(12)
					capacity, nb, rows := 320, B, 320
					var c KVCache
					if paged {
						nb, rows = 2*capacity/block, block
						c.BlocksPerSeq = capacity / block
						c.BlockTable = make([]int32, B*c.BlocksPerSeq)
						for i := range c.BlockTable {
							c.BlockTable[i] = int32((i*11 + 2) % nb)
						}
					}
					k, v := newCache(dt, nb, rows, H, D), newCache(dt, nb, rows, H, D)
					if err := Convert(k, Dense(randSlice(r, nb*rows*H*D), nb, rows, H, D)); err != nil {
						t.Fatal(err)
					}
					if err := Convert(v, Dense(randSlice(r, nb*rows*H*D), nb, rows, H, D)); err != nil {
						t.Fatal(err)
					}
					c.SeqLens = []int32{300, 97}
					q := randSlice(r, B*H*D)
					out, lse, err := Forward(Dense(q, B, 1, H, D), k, v, &Options{KVCache: &c})
					if err != nil {
						t.Fatal(err)
					}
					kf, vf := asFloat32(t, k), asFloat32(t, v) // the cache's values
					for b := 0; b < B; b++ {
						n := int(c.SeqLens[b])
						keys, vals := make([]float32, n*H*D), make([]float32, n*H*D)
						for j := 0; j < n; j++ {
							tb, row := b, j
							if paged {
								tb, row = int(c.BlockTable[b*c.BlocksPerSeq+j/block]), j%block
							}
							off := (tb*rows + row) * H * D
							copy(keys[j*H*D:(j+1)*H*D], kf.Data[off:off+H*D])
							copy(vals[j*H*D:(j+1)*H*D], vf.Data[off:off+H*D])
						}
						qb := q[b*H*D : (b+1)*H*D]
						par := reference.Params{Batch: 1, SeqQ: 1, SeqK: n, Heads: H, KVHeads: H, HeadDim: D}
						if dt == BFloat16 || dt == Float16 {
							prec := precisionOf(dt)
							qb = prec.RoundSlice(qb)
							o64, l64 := reference.Forward64(par, to64(qb), to64(keys), to64(vals))
							oh, lh := reference.ForwardHalf(par, prec, qb, keys, vals)
							if err := reference.CheckHalf("O", prec, gather(out)[b*H*D:(b+1)*H*D], oh, o64); err != nil {
								t.Errorf("seq %d: %v", b, err)
							}
							if err := reference.CheckHalf("LSE", prec, lse[b*H:(b+1)*H], lh, l64); err != nil {
								t.Errorf("seq %d: %v", b, err)
							}
							continue
						}
						o64, l64 := reference.Forward64(par, to64(qb), to64(keys), to64(vals))
						o32, l32 := reference.Forward32(plainPar(par), qb, keys, vals)
						if err := reference.Check("O", out.Data[b*H*D:(b+1)*H*D], o32, o64); err != nil {
							t.Errorf("seq %d: %v", b, err)
						}
						if err := reference.Check("LSE", lse[b*H:(b+1)*H], l32, l64); err != nil {
							t.Errorf("seq %d: %v", b, err)
						}
					}
				})
			})
		}
	}
}
