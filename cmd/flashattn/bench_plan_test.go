package main

import (
	"testing"

	"github.com/flashattn/flashattn"
)

// TestBenchPlan: -json reports the cache the tiles are sized for and the
// tiles of the case, those flashattn.CountTraffic gives for its shape;
// decode reports the caches only.
func TestBenchPlan(t *testing.T) {
	for _, mode := range []string{"fwd", "fwdbwd", "bwd"} {
		r := benchJSON(t, "-mode", mode, "-no-plain")
		p := r.Plan
		if p.TileCacheBytes != flashattn.TileCacheBytes() {
			t.Errorf("%s: tile_cache_bytes %d, want %d", mode, p.TileCacheBytes, flashattn.TileCacheBytes())
		}
		pass := flashattn.PassForward
		if mode != "fwd" {
			pass = flashattn.PassForwardBackward
		}
		want, err := flashattn.CountTraffic(flashattn.Shape{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 96, SeqK: 96, Dim: 32},
			nil, flashattn.TileCacheBytes(), pass)
		if err != nil {
			t.Fatal(err)
		}
		if p.BlockQ != want.BlockQ || p.BlockK != want.BlockK || p.SuperBlockQ != want.SuperBlockQ || p.BackwardBlockK != want.BackwardBlockK {
			t.Errorf("%s: plan %+v, want the tiles of %+v", mode, p, want)
		}
		if p.BlockQ <= 0 || p.BlockK <= 0 || p.SuperBlockQ < p.BlockQ {
			t.Errorf("%s: implausible tiles %+v", mode, p)
		}
	}
	r := benchJSON(t, "-mode", "decode", "-no-plain")
	if r.Plan.TileCacheBytes <= 0 || r.Plan.BlockQ != 0 {
		t.Errorf("decode: plan %+v, want the caches and no tiles", r.Plan)
	}
}
