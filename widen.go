package flashattn

import "slices"

// widen.go joins neighbouring super-blocks of one head into wider tasks
// when there are few workers.

// wideSuperRows is the most query rows of a task that widen joins from
// super-blocks: the microtiles of a super-block share each K/V tile, but
// the first of them reads it from L3 or memory (on Zen 4 at d = 128 that
// microtile's tile steps ran at ~85 GFLOP/s against ~104 for the others),
// so the more microtiles per K/V tile the better, even past the L2 that
// superBlockRows sizes the super-block for: the Q rows and O accumulators
// of each microtile then come from L3 once per key tile, which costs less.
// Measured on Zen 4 (1 MiB L2), one worker, N = 4096, d = 128, B_c = 512,
// the ratio to the FMA peak by super-block rows: 192 (superBlockRows) 0.80–
// 0.82, 288 0.82–0.83, 384 0.84, 480 0.84–0.85, 768 0.85, 1024 0.85, 2048
// 0.82; at d = 256, where superBlockRows leaves blocks of one microtile
// (96 rows), 0.81 against 0.85 for 192 rows and 0.85–0.88 for 384–480.
const wideSuperRows = 768

// widen joins, in place, the unsplit tasks of one head of one sequence
// walked in super-blocks (packed K and V beyond half the cache, see
// forwardTasks; the blocks may be of one microtile, where the cache holds
// no more) that follow each other in rows and see the same keys (so that
// superTask walks the same key tiles for every microtile, and every row's
// result is the same bits as in its own super-block) into tasks of up to
// wideSuperRows rows, when the joined tasks still number at least
// 2·unitsPerWorker per worker; otherwise it leaves the list as it is. Tasks
// of equal cost keep their order, heaviest first as forwardTasks sorts
// them. last is scratch, one entry per sequence and head.
func (p *plan) widen(list []fwdTask, last *[]int32) []fwdTask {
	workers := p.workers
	if p.serial {
		workers = 1
	}
	k := wideSuperRows / p.superQ
	joinable := func(t *fwdTask) bool {
		s := &p.seqs[t.seq]
		if t.slot >= 0 || t.nh != 1 || p.stacked(s) || !p.packs(s) || p.kvBytes(s) <= p.cacheBytes/2 {
			return false
		}
		// A block of one microtile runs as task does, whose tiles restart
		// where a mask changes their kind; joined, superTask's start every
		// blockK keys from j0: the same tiles only where it sees all its
		// keys.
		return t.i1-t.i0 > p.blockQ || s.vis.tile(t.rowBlock, t.j0, t.j1) == BlockFull
	}
	n := 0
	for i := range list {
		if joinable(&list[i]) {
			n++
		}
	}
	if k < 2 || n/k < 2*unitsPerWorker*max(workers, 1) {
		return list
	}
	idx := grow(last, len(p.seqs)*p.heads)
	for i := range idx {
		idx[i] = -1
	}
	out := list[:0]
	for _, t := range list {
		if !joinable(&t) {
			out = append(out, t)
			continue
		}
		key := t.seq*p.heads + t.h0
		if j := idx[key]; j >= 0 {
			w := &out[j]
			if w.i1 == t.i0 && w.j0 == t.j0 && w.j1 == t.j1 && t.i1-w.i0 <= wideSuperRows {
				w.i1 = t.i1
				w.cost += t.cost
				continue
			}
		}
		idx[key] = int32(len(out))
		out = append(out, t)
	}
	slices.SortStableFunc(out, func(a, b fwdTask) int { return b.cost - a.cost })
	for _, t := range out {
		p.maxRows = max(p.maxRows, t.height())
	}
	return out
}
