package flashattn

import (
	"github.com/flashattn/flashattn/internal/kernel"
)

// traffic.go counts the memory traffic of the tile loops (the IO complexity
// of the FlashAttention paper, §3.2 and Theorem 2) by walking the same task
// lists, tile walks and packed buffers that Forward and Backward run.

// Pass selects which passes CountTraffic counts.
type Pass uint8

const (
	// PassForward is Forward.
	PassForward Pass = 1 << iota
	// PassBackward is Backward (given the forward's O and LSE).
	PassBackward
	// PassForwardBackward is Forward followed by Backward.
	PassForwardBackward = PassForward | PassBackward
)

// IOBytes is memory traffic: bytes loaded from memory into the cache
// (Read) and stored from the cache to memory (Write).
type IOBytes struct {
	Read, Write int64
}

// Total is Read + Write.
func (b IOBytes) Total() int64 { return b.Read + b.Write }

// TrafficByOperand splits traffic by the tensor the bytes belong to. The
// bytes of a working copy count for the tensor it copies: packed K and V
// tiles for K and V, the backward's packed Q and dO rows for Q and dO, the
// partial sums of key splits and of the backward's dQ for O and dQ.
type TrafficByOperand struct {
	Q, K, V, O     IOBytes
	DO, DQ, DK, DV IOBytes
	// LSE counts the log-sum-exp rows and the other per-row statistics:
	// the running max and sum of key splits, the backward's
	// D = rowsum(dO∘O).
	LSE IOBytes
	// Scores counts the score-sized matrices of the standard algorithm
	// (S, P, dP, dS); flashattn never stores one.
	Scores IOBytes
}

// Total is the traffic of every operand.
func (t TrafficByOperand) Total() int64 {
	n := int64(0)
	for _, b := range []IOBytes{t.Q, t.K, t.V, t.O, t.DO, t.DQ, t.DK, t.DV, t.LSE, t.Scores} {
		n += b.Total()
	}
	return n
}

// Traffic is the memory traffic of one call for a cache of CacheBytes
// bytes: flashattn's, and the standard algorithm's.
type Traffic struct {
	Pass       Pass
	CacheBytes int
	// The tiles flashattn uses for that cache: query rows per tile, keys
	// per forward tile, keys per backward KV block.
	BlockQ, BlockK, BackwardBlockK int
	// SuperBlockQ is the query rows of a forward super-block: the rows
	// whose tiles of BlockQ rows all use each K/V tile while it is in the
	// cache (two-level tiling), so K and V are read once per super-block.
	// Only sequences whose packed K and V (one KV head) exceed half the
	// cache are walked in super-blocks; the others in tiles of BlockQ rows.
	SuperBlockQ int
	// ForwardTileBytes and BackwardTileBytes are the bytes that the inner
	// loops hold in the cache while they run: the forward's super-block of
	// Q rows, O accumulators, running maxima and sums, one K and one V tile
	// and one microtile's score tile; the backward's KV block (packed as Kᵀ, Vᵀ and K rows), its dK
	// and dV accumulators, the S and dP tiles (and P with dropout applied,
	// and the score modifiers' derivatives, when those are on), and one
	// query tile's Q, dO, dQ, LSE and D. The count assumes they fit in the
	// cache; where they do not, the loops move more than counted.
	ForwardTileBytes, BackwardTileBytes int
	// ForwardTasks is the number of the forward's tasks (row blocks and
	// their key splits), and ForwardLargestTask the largest one's share of
	// the forward's work as its scheduler estimates it (query-row·key
	// products, plus the keys of K and V a task streams from memory): the
	// forward's parallel pass on W workers lasts at least
	// max(1/W, ForwardLargestTask) of its time on one. 0 without
	// PassForward.
	ForwardTasks       int
	ForwardLargestTask float64

	// Flash is flashattn's traffic: every load and store of a tile or row
	// of an operand, counted each time its loop brings it in from memory
	// or sends it back.
	Flash TrafficByOperand
	// Standard is the standard algorithm's traffic (the paper's Algorithm
	// 0 and its backward): S = QKᵀ written, read back for P = softmax(S),
	// P written and read for O = PV; the backward reads P and dO for
	// dV = PᵀdO, writes dP = dO·Vᵀ, reads P and dP to write dS, and reads
	// dS twice, for dQ = dS·K and dK = dSᵀQ. Each pass streams its
	// matrices once per (batch, query head); every score is materialised,
	// whatever the mask.
	Standard TrafficByOperand
}

// TileCacheBytes returns the cache size, in bytes, that Forward and
// Backward size their tiles for on this machine when Options.BlockQ and
// Options.BlockK are 0: the L2 cache of CPU 0 as Linux reports it, else
// as the CPU reports it (CPUID on amd64), else 1 MiB.
func TileCacheBytes() int {
	_, l2 := cacheSizes()
	return l2
}

// CountTraffic returns the bytes that Forward and/or Backward (pass) move
// between memory and a cache of cacheBytes bytes for a problem of the
// given shape and options, with the tiles sized for that cache as the
// library sizes them for its own cache (TileCacheBytes), or as
// opts.BlockQ/BlockK set them; and the bytes the standard algorithm moves.
// (opts.CacheBytes is not read: the count is that of a call made with
// CacheBytes = cacheBytes.)
//
// The count follows the library's loops: the forward's row-block tasks
// (and key splits), each walking the key tiles its masks leave visible
// (block-sparse masks skip whole tiles), K and V packed once per call; the
// backward's KV-block tasks, each streaming the query tiles that see its
// block, with the dQ partial sums and their reduction. The model of the
// cache is the paper's: a loop holds its own tiles (the forward's Q block
// and O accumulator while it streams K/V tiles; the backward's K/V block
// and dK/dV accumulators while it streams query tiles), and everything
// else comes from memory each time it is used. It is exact when the
// operands are much larger than the cache. Elements count 4 bytes each
// (padded tiles count their padding). It assumes no row has |LSE| ≥ 16
// (see Backward: such rows take one more pass over their key tiles).
// With few workers the forward joins neighbouring super-blocks of a head
// into wider tasks (their microtiles then share each K/V tile, and their
// Q rows and accumulators exceed the cache); the count is that of the
// super-blocks the cache is sized for, as with many workers.
//
// opts may be nil; a KVCache (decoding) is not counted. The count reads
// no tensor: it builds the call's tiling from the shape and options alone,
// and allocates only its task lists.
func CountTraffic(shape Shape, opts *Options, cacheBytes int, pass Pass) (_ Traffic, err error) {
	defer recoverPanic(&err)
	if opts == nil {
		opts = &Options{}
	}
	if opts.KVCache != nil {
		return Traffic{}, argErr("Options.KVCache", "CountTraffic does not count decoding from a KVCache")
	}
	if pass == 0 || pass&^PassForwardBackward != 0 {
		return Traffic{}, argErr("pass", "pass %d: want PassForward, PassBackward or PassForwardBackward", pass)
	}
	if cacheBytes < 1 {
		return Traffic{}, argErr("cacheBytes", "cacheBytes %d: must be ≥ 1", cacheBytes)
	}
	if err := shape.check(); err != nil {
		return Traffic{}, err
	}
	s := shape.Resolved()
	// The counts are int64: bound the largest, about B·H·Sq·Sk·(D+16)·4·7.
	big := float64(s.Batch) * float64(s.Heads) * float64(s.SeqQ) * float64(s.SeqK) * (float64(s.Dim) + 16) * 64
	if big > 1<<62 {
		return Traffic{}, argErr("shape", "Shape %+v is too large to count", shape)
	}
	if err := opts.validate(); err != nil {
		return Traffic{}, err
	}
	// The tiles for M, before fitKVBlocks' halving for many workers.
	var tl tiling
	if err := tl.build(s, opts, tileParams{cacheBytes: cacheBytes}); err != nil {
		return Traffic{}, err
	}
	tc := trafficCount{t: &tl, dropout: opts.Dropout > 0, curved: opts.Softcap > 0 || opts.ScoreMod != nil, workers: opts.workers()}
	t := Traffic{Pass: pass, CacheBytes: cacheBytes, BlockQ: tl.blockQ, BlockK: tl.blockK, BackwardBlockK: tl.bwdBlockK, SuperBlockQ: tl.superQ}
	t.ForwardTileBytes, t.BackwardTileBytes = tc.tileBytes()
	if pass&PassForward != 0 {
		tc.forward(&t.Flash)
		t.ForwardTasks, t.ForwardLargestTask = tl.forwardBalance()
	}
	if pass&PassBackward != 0 {
		tc.backward(&t.Flash)
	}
	tl.countStandard(&t.Standard, pass)
	return t, nil
}

// trafficCount counts the traffic of a tiling's loops.
type trafficCount struct {
	t               *tiling
	dropout, curved bool
	workers         int
}

// tileBytes returns the bytes of the tiles the forward's and the
// backward's inner loops hold (see Traffic).
func (tc *trafficCount) tileBytes() (fwd, bwd int) {
	p := tc.t
	d, dpad, bq, sq := p.dim, p.dimPad, p.blockQ, p.superQ
	bk, bkb := p.blockK, p.bwdBlockK
	fwd = sq*d + sq*p.dimVPad + 2*sq + kernel.Pad(bk)*d + bk*p.dimVPad + bq*kernel.Pad(bk)
	mats := 2 // S, dP
	if tc.dropout {
		mats++
	}
	if tc.curved {
		mats++
	}
	dv, dvpad := p.dimV, p.dimVPad // V's head dim: Vᵀ, dV, dO rows
	bwd = kernel.Pad(bkb)*(d+dv) + bkb*(2*dpad+dvpad) + mats*bq*kernel.Pad(bkb) + bq*(2*dpad+dvpad) + 2*bq
	return 4 * fwd, 4 * bwd
}

// floats is the traffic of n float32 elements.
func floats(n int) int64 { return 4 * int64(n) }

// countForward adds the forward's traffic: the packing pass, the row-block
// tasks and the merge of key splits.
func (tc *trafficCount) forward(t *TrafficByOperand) {
	p := tc.t
	var blocks []rowBlock
	var list []fwdTask
	tasks, _, _ := p.forwardTasks(&blocks, &list)
	d, dv, dvpad := p.dim, p.dimV, p.dimVPad
	packed := p.packs // the forward's kvRoute fromPacked
	for si := range p.seqs {
		s := &p.seqs[si]
		for hk := 0; hk < p.kvHeads; hk++ {
			if !packed(s) {
				continue
			}
			t.K.Read += floats(s.nk * d)
			t.V.Read += floats(s.nk * dv)
			t.K.Write += floats(kernel.Pad(s.nk) * d)
			t.V.Write += floats(s.nk * dvpad)
		}
	}
	empty := map[int]bool{} // key-split slots that saw no key
	for i := range tasks {
		tk := &tasks[i]
		s := &p.seqs[tk.seq]
		m := tk.height()
		t.Q.Read += floats(m * d)
		seen := false
		for j := tk.j0; ; {
			j0, j1, _ := nextTile(s.vis, tk.rowBlock, j, tk.j1, p.blockK)
			if j0 >= tk.j1 {
				break
			}
			seen = true
			// One K/V tile per KV head of the block's query heads, from
			// memory unless the sequence's packed K and V fit in half the
			// cache (then they stay there once packed: the loops use
			// super-blocks only where they do not).
			for hk := tk.h0 / p.group; hk <= (tk.h0+tk.nh-1)/p.group; hk++ {
				if packed(s) && p.kvBytes(s) <= p.cacheBytes/2 {
					continue
				}
				if packed(s) { // Kᵀ strips padded to whole strips, V rows padded to dimPad
					t.K.Read += floats(kernel.Pad(j1-j0) * d)
					t.V.Read += floats((j1 - j0) * dvpad)
				} else { // read in place
					t.K.Read += floats((j1 - j0) * d)
					t.V.Read += floats((j1 - j0) * dv)
				}
			}
			j = j1
		}
		if tk.slot >= 0 {
			t.O.Write += floats(m * dvpad)
			t.LSE.Write += floats(2 * m)
			empty[tk.slot] = !seen
			continue
		}
		t.O.Write += floats(m * dv)
		t.LSE.Write += floats(m)
	}
	// The merge reads each split's running max, and the sum and output
	// rows of the splits that saw a key.
	for _, tk := range tasks {
		if tk.slot < 0 || tk.split != 0 {
			continue
		}
		m := tk.height()
		for sp := 0; sp < tk.parts; sp++ {
			t.LSE.Read += floats(m)
			if !empty[tk.slot+sp] {
				t.LSE.Read += floats(m)
				t.O.Read += floats(m * dv)
			}
		}
		t.O.Write += floats(m * dv)
		t.LSE.Write += floats(m)
	}
}

// countBackward adds the backward's traffic (see backward.go): clearing dK
// and dV, the rows pass (D, and Q and dO packed), the LSE scan, packing K
// and V, the KV pass and, when it does not sum dQ, the dQ pass.
func (tc *trafficCount) backward(t *TrafficByOperand) {
	p := tc.t
	d, dpad, dv, dvpad := p.dim, p.dimPad, p.dimV, p.dimVPad
	kvRows := p.kvBatch * p.kvRows * p.kvHeads
	t.DK.Write += floats(kvRows * d)
	t.DV.Write += floats(kvRows * dv)
	for _, s := range p.seqs { // the rows pass, per (sequence, head)
		n := s.nq * p.heads
		t.O.Read += floats(n * dv)
		t.DO.Read += floats(2 * n * dv)
		t.Q.Read += floats(n * d)
		t.Q.Write += floats(n * dpad)
		t.DO.Write += floats(n * dvpad)
		t.LSE.Write += floats(n) // D
	}
	t.LSE.Read += floats(p.lseLen) // looking for rows that need the LSE correction
	for _, s := range p.seqs {     // K and V packed once: Kᵀ, Vᵀ, K rows
		if s.nq == 0 || s.nk == 0 {
			continue
		}
		t.K.Read += floats(p.kvHeads * s.nk * d)
		t.V.Read += floats(p.kvHeads * s.nk * dv)
		t.K.Write += floats(p.kvHeads * (kernel.Pad(s.nk)*d + s.nk*dpad))
		t.V.Write += floats(p.kvHeads * kernel.Pad(s.nk) * dv)
	}
	var list []bwdTask
	tasks, withDQ := p.backwardTasks(&list, tc.workers)
	for _, u := range tasks {
		s := &p.seqs[u.seq]
		for hh := 0; hh < p.group; hh++ {
			h := u.hk*p.group + hh
			if withDQ {
				t.DQ.Write += floats(s.nq * dpad) // the accumulator, cleared
			}
			for kb := u.kb0; kb < u.kb1; kb++ {
				j0 := kb * p.bwdBlockK
				tc.keyBlock(t, s, h, j0, min(p.bwdBlockK, s.nk-j0), withDQ)
			}
			if withDQ {
				t.DQ.Read += floats(s.nq * dpad)
				t.DQ.Write += floats(s.nq * d)
			}
		}
	}
	if withDQ {
		return
	}
	var dqList []rowBlock
	for _, rb := range p.dqTasks(&dqList, tc.workers) { // blocks of microtiles
		s := &p.seqs[rb.seq]
		m := rb.i1 - rb.i0
		t.Q.Read += floats(m * dpad)
		t.DO.Read += floats(m * dvpad)
		t.LSE.Read += floats(2 * m) // LSE and D
		for j0 := 0; j0 < s.nk; j0 += p.bwdBlockK {
			n := min(p.bwdBlockK, s.nk-j0)
			if s.vis.tile(rb, j0, j0+n) == BlockEmpty {
				continue
			}
			t.K.Read += floats(kernel.Pad(n)*d + n*dpad) // Kᵀ and K, once per block
			t.V.Read += floats(kernel.Pad(n) * dv)       // Vᵀ
		}
		t.DQ.Write += floats(m * d)
	}
}

// keyBlock adds the traffic of the backward's KV block [j0, j0+n) of
// query head h: the block's packed Kᵀ, Vᵀ (and K when summing dQ), then per
// query tile that sees it the tile's packed Q and dO rows, its LSE and D
// rows and (summing dQ) its dQ accumulator rows, read and written; at the
// end the block's dK and dV added to the accumulators.
func (tc *trafficCount) keyBlock(t *TrafficByOperand, s *sequence, h, j0, n int, withDQ bool) {
	p := tc.t
	d, dpad := p.dim, p.dimPad
	tiles := p.queryTiles(s, h, j0, n)
	if tiles.empty() {
		return
	}
	t.K.Read += floats(kernel.Pad(n) * d)
	t.V.Read += floats(kernel.Pad(n) * p.dimV)
	if withDQ {
		t.K.Read += floats(n * dpad)
	}
	for at, ok := tiles.next(); ok; at, ok = tiles.next() {
		m := at.rows()
		t.Q.Read += floats(m * dpad)
		t.DO.Read += floats(m * p.dimVPad)
		t.LSE.Read += floats(2 * m)
		if withDQ {
			t.DQ.Read += floats(m * dpad)
			t.DQ.Write += floats(m * dpad)
		}
	}
	t.DK.Read += floats(n * d)
	t.DK.Write += floats(n * d)
	t.DV.Read += floats(n * p.dimV)
	t.DV.Write += floats(n * p.dimV)
}

// countStandard adds the standard algorithm's traffic, per sequence and
// query head.
func (p *tiling) countStandard(t *TrafficByOperand, pass Pass) {
	d, dv := int64(p.dim), int64(p.dimV)
	for _, s := range p.seqs {
		nq, nk, h := int64(s.nq), int64(s.nk), int64(p.heads)
		qd, kd, qk := 4*nq*d*h, 4*nk*d*h, 4*nq*nk*h
		qv, kv := 4*nq*dv*h, 4*nk*dv*h // V's head dim: V, O, dO, dV
		if pass&PassForward != 0 {
			t.Q.Read += qd       // S = QKᵀ
			t.K.Read += kd       //
			t.Scores.Write += qk // S
			t.Scores.Read += qk  // P = softmax(S)
			t.Scores.Write += qk // P
			t.Scores.Read += qk  // O = PV
			t.V.Read += kv
			t.O.Write += qv
		}
		if pass&PassBackward != 0 {
			t.Scores.Read += qk // dV = PᵀdO
			t.DO.Read += qv
			t.DV.Write += kv
			t.DO.Read += qv // dP = dO·Vᵀ
			t.V.Read += kv
			t.Scores.Write += qk
			t.Scores.Read += 2 * qk // dS = P∘(dP − rowsum(P∘dP)) from P and dP
			t.Scores.Write += qk
			t.Scores.Read += qk // dQ = dS·K
			t.K.Read += kd
			t.DQ.Write += qd
			t.Scores.Read += qk // dK = dSᵀQ
			t.Q.Read += qd
			t.DK.Write += kd
		}
	}
}
