package flashattn

import (
	"errors"
	"math"
	"testing"
)

// TestSuperBlocks runs the two-level tiling (query super-blocks whose
// microtiles share each K/V tile: the forward's, and the backward's dQ pass
// with one worker) on every kernel against the reference, on shapes that
// are not multiples of any tile. A small Options.CacheBytes makes small
// calls take it: each case first checks that its tiling has super-blocks
// of several row blocks and K/V beyond half the cache, the condition for
// using them, and the one-worker cases that the dQ pass has blocks of
// several microtiles.
func TestSuperBlocks(t *testing.T) {
	cases := []tcase{
		{b: 1, sq: 333, sk: 300, h: 2, hk: 1, d: 64, cache: 256 << 10},
		{b: 2, sq: 301, sk: 290, h: 2, hk: 2, d: 64, causal: true, cache: 256 << 10},
		{b: 1, sq: 250, sk: 400, h: 4, hk: 2, d: 24, cache: 128 << 10, window: &Window{Left: 70, Right: 9}},
		{b: 1, sq: 420, sk: 450, h: 2, hk: 2, d: 128, cache: 768 << 10, dropout: 0.2},
		{b: 1, sq: 260, sk: 260, h: 2, hk: 1, d: 40, cache: 160 << 10, softcap: 3, alibi: 1, causal: true},
		{b: 1, sq: 450, sk: 300, h: 1, hk: 1, d: 64, cache: 256 << 10, workers: 1},
		{b: 2, sq: 301, sk: 290, h: 2, hk: 1, d: 40, causal: true, cache: 160 << 10, softcap: 3, workers: 1},
	}
	for _, c := range cases {
		tr, err := CountTraffic(Shape{Batch: c.b, Heads: c.h, KVHeads: c.hk, SeqQ: c.sq, SeqK: c.sk, Dim: c.d},
			&Options{Causal: c.causal, Window: c.window}, c.cache, PassForward)
		if err != nil {
			t.Fatal(err)
		}
		pad := (c.d + 15) / 16 * 16
		if tr.SuperBlockQ < 2*tr.BlockQ || tr.SuperBlockQ >= c.sq || 4*c.sk*2*pad <= c.cache/2 {
			t.Fatalf("%v: super-blocks of %d rows, tiles of %d, K/V %d bytes: the case does not walk several super-blocks",
				c, tr.SuperBlockQ, tr.BlockQ, 4*c.sk*2*pad)
		}
		if c.workers != 1 {
			continue
		}
		// The dQ pass (one worker, fewer than unitsPerWorker KV heads).
		q, kv := NewTensor(c.b, c.sq, c.h, c.d), NewTensor(c.b, c.sk, c.hk, c.d)
		call, err := newCall(q, kv, kv, &Options{Causal: c.causal, CacheBytes: c.cache, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		var bt []bwdTask
		var dq []rowBlock
		_, withDQ := call.plan.backwardTasks(&bt, 1)
		tallest := 0
		for _, rb := range call.plan.dqTasks(&dq, 1) {
			tallest = max(tallest, rb.i1-rb.i0)
		}
		call.release()
		if withDQ || tallest < 2*tr.BlockQ {
			t.Fatalf("%v: KV pass sums dQ %v, tallest dQ block %d rows: the dQ pass walks no super-block", c, withDQ, tallest)
		}
	}
	// Under -race (see gridRotation), every other case on each path: a
	// share of two, not one per path, so that between them the two
	// one-worker cases take the dQ pass on every kernel; the largest case
	// (d = 128) sits at an odd index: with three paths, it runs on one.
	rot := newGridRotation(2)
	forEachKernel(t, func(t *testing.T) {
		for _, c := range gridShare(rot, cases) {
			t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
		}
	})
}

// Options.CacheBytes is checked like every option.
func TestCacheBytesOption(t *testing.T) {
	q := NewTensor(1, 4, 1, 8)
	bad := []int{-1}
	if int64(math.MaxInt) > 1<<40 {
		bad = append(bad, math.MaxInt) // beyond 1 TiB where int has 64 bits
	}
	for _, n := range bad {
		_, _, err := Forward(q, q, q, &Options{CacheBytes: n})
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != "Options.CacheBytes" {
			t.Errorf("CacheBytes %d: %v, want an *ArgError for Options.CacheBytes", n, err)
		}
	}
	if _, _, err := Forward(q, q, q, &Options{CacheBytes: 1}); err != nil {
		t.Errorf("CacheBytes 1: %v", err)
	}
}
