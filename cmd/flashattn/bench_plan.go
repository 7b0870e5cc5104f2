package main

import (
	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/kernel"
)

// benchPlan is what the library chose for a case on this machine: the
// caches it sized the tiles from and the tiles themselves, as
// flashattn.CountTraffic reports them for the case's shape and options.
type benchPlan struct {
	// The caches of this CPU (bytes; 0 where unknown) and the one the
	// tiles are sized for (flashattn.TileCacheBytes).
	L1Bytes        int `json:"cache_l1_bytes,omitempty"`
	L2Bytes        int `json:"cache_l2_bytes,omitempty"`
	L3Bytes        int `json:"cache_l3_bytes,omitempty"`
	TileCacheBytes int `json:"tile_cache_bytes"`
	// Query rows per tile, keys per forward tile, the rows of a forward
	// super-block (two-level tiling, for sequences whose packed K and V
	// exceed half the tile cache) and keys per backward KV block; absent
	// for decode, whose tiles follow the cache's layout.
	BlockQ         int `json:"block_q,omitempty"`
	BlockK         int `json:"block_k,omitempty"`
	SuperBlockQ    int `json:"super_block_q,omitempty"`
	BackwardBlockK int `json:"backward_block_k,omitempty"`
}

// plan returns the tiles the library uses for c with opts.
func (c benchCase) plan(opts *flashattn.Options) benchPlan {
	l1, l2, l3, _ := kernel.CacheSizes()
	p := benchPlan{L1Bytes: l1, L2Bytes: l2, L3Bytes: l3, TileCacheBytes: flashattn.TileCacheBytes()}
	if c.Mode == "decode" {
		return p
	}
	pass := flashattn.PassForward
	if c.Mode != "fwd" {
		pass = flashattn.PassForwardBackward
	}
	shape := flashattn.Shape{Batch: c.B, Heads: c.H, KVHeads: c.Hk, SeqQ: c.sq(), SeqK: c.N, Dim: c.D, DimV: c.dv()}
	t, err := flashattn.CountTraffic(shape, opts, p.TileCacheBytes, pass)
	if err != nil {
		return p // the case itself reports what is wrong with it
	}
	p.BlockQ, p.BlockK, p.SuperBlockQ, p.BackwardBlockK = t.BlockQ, t.BlockK, t.SuperBlockQ, t.BackwardBlockK
	return p
}
