package gpu

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// GQA packing ("pack_gqa"): when decoding with GQA, the group of query
// heads that share a KV head are the rows of one query block of the
// forward kernels (tile.FwdParams' pack), so that each K/V tile is read
// once per KV head instead of once per query head.

// pack returns the forward kernels' packing factor: the group H/Hk when
// the group's rows of the longest query sequence fit one query block of
// both the ordinary and the split-KV forward kernel (group·Sq ≤ 64 at head
// dims 64 and 128, ≤ 128 at 256: decode shapes) and Options.NoPackGQA is
// unset; else 1 (no packing).
func (p *problem) pack() int {
	g := p.heads / p.kvHeads
	br := min(tile.FwdConfig(p.d).Br(), tile.FwdSplitConfig(p.d).Br())
	if g < 2 || p.noPack || g*p.maxSq > br {
		return 1
	}
	return g
}

// packedRows returns the forward grid's query rows per sequence and its
// head count: pack·Sq rows for H/pack groups of heads.
func (p *problem) packedRows() (rows, heads int) {
	n := p.pack()
	return n * p.maxSq, p.heads / n
}

// packArgs sets the forward kernels' packing parameters (tile.FwdParams'
// pack and pack_div; 1 and 0 unpacked).
func (p *problem) packArgs(a args) {
	a["pack"], a["pack_div"] = uint64(p.pack()), 0
	if p.pack() > 1 {
		a["pack_div"] = uint64(tile.PackDiv(p.maxSq))
	}
}
