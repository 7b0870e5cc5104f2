package gpu

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// Split-KV forward (flash-decoding): see tile.FwdSplitConfig for the
// kernels and the README's GPU section for the rule that chooses the
// number of splits.

// splits returns the number of parts the forward pass splits each query
// block's keys into on a device with sms SMs; 1 runs the ordinary forward
// kernel. Options.NumSplits ≥ 1 is taken as asked, at most one part per
// key tile of the longest key sequence. Otherwise the ordinary grid is kept
// when it has at least 80% as many blocks as the device holds at once
// (SMs × blocks per SM), and tile.NumSplits chooses from the split
// kernel's grid and block slots and the most key tiles one of its query
// blocks sees.
func (p *problem) splits(sms int) int {
	c := tile.FwdSplitConfig(p.d)
	if p.wantSplits >= 1 {
		return max(1, min(p.wantSplits, (p.maxSk+c.Bc-1)/c.Bc))
	}
	f := tile.FwdConfig(p.d)
	rows, heads := p.packedRows()
	if 10*p.batch*heads*ceilDiv(rows, f.Br()) >= 8*sms*f.BlocksPerSM() {
		return 1
	}
	blocks := p.batch * heads * ceilDiv(rows, c.Br())
	return tile.NumSplits(blocks, sms*c.BlocksPerSM(), p.splitTiles(c), tile.MaxSplits)
}

// splitTiles returns the most key tiles a query block of configuration c
// sees in the longest sequences (tile.Mask.KeyBlocks): the number of
// tiles a block's keys can be split into. It walks the query blocks, which
// splits only does for grids smaller than the device.
func (p *problem) splitTiles(c tile.Fwd) int {
	m := tile.Mask{SeqQ: p.maxSq, SeqK: p.maxSk, Left: int(p.left), Right: int(p.right)}
	n := 0
	for m0 := 0; m0 < p.maxSq; m0 += c.Br() {
		lo, hi := m.KeyBlocks(m0, c.Br(), c.Bc)
		n = max(n, hi-lo)
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// splitForward queues the split-KV forward kernel with n splits, writing
// float32 partial results to the stream's scratch memory, then the combine
// kernel that merges them into out and lse. d.mu must be held.
func (s *Stream) splitForward(p *problem, q, k, v, out, lse, cu uint64, n int) error {
	d, name := s.d, ptxName(p.dt)
	rows := p.lseLen()
	oacc, err := s.scratchBuf("oacc", n*rows*p.d*4)
	if err != nil {
		return err
	}
	lacc, err := s.scratchBuf("lseacc", n*rows*4)
	if err != nil {
		return err
	}
	c := tile.FwdSplitConfig(p.d)
	a := p.fwdSplitArgs(q, k, v, uint64(oacc.ptr), uint64(lacc.ptr), cu, n)
	rows, heads := p.packedRows()
	x, y, z := tile.SplitGrid(rows, c.Br(), heads, p.batch, n)
	if err := d.launch(s, p.dt, p.d, c.Name(name), tile.FwdSplitParams, a, [3]int{x, y, z}, c.Threads()); err != nil {
		return err
	}
	ca := p.combineArgs(uint64(oacc.ptr), uint64(lacc.ptr), out, lse, cu, n)
	grid := [3]int{ceilDiv(p.maxSq, tile.CombineRows), p.heads, p.batch}
	return d.launch(s, p.dt, p.d, tile.CombineName(name, p.d), tile.CombineParams, ca, grid, tile.ElemThreads)
}

// fwdSplitArgs returns the split-KV forward kernel's arguments: the
// partial results of split s at oacc and lseacc, in LSE's layout with a
// split stride of lseLen rows (tile.FwdSplitParams).
func (p *problem) fwdSplitArgs(q, k, v, oacc, lseacc, cu uint64, n int) args {
	a := args{"q": q, "k": k, "v": v, "o_acc": oacc, "lse_acc": lseacc}
	a["q_bs"], a["q_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["k_bs"], a["k_rs"] = p.rowStrides(p.kvHeads, p.maxSk)
	a["lse_bs"], a["lse_hs"] = p.lseStrides()
	a["splits"], a["split_rows"] = uint64(n), uint64(p.lseLen())
	p.packArgs(a)
	p.seqArgs(a, cu)
	return a
}

// combineArgs returns the combine kernel's arguments (tile.CombineParams).
func (p *problem) combineArgs(oacc, lseacc, o, lse, cu uint64, n int) args {
	a := args{"o_acc": oacc, "lse_acc": lseacc, "o": o, "lse": lse, "cu_q": 0, "sq": uint64(p.maxSq)}
	if p.varlen {
		a["cu_q"] = cu
	}
	a["o_bs"], a["o_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["lse_bs"], a["lse_hs"] = p.lseStrides()
	a["splits"], a["split_rows"] = uint64(n), uint64(p.lseLen())
	return a
}
