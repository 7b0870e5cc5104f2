package flashattn

import (
	"slices"

	"github.com/flashattn/flashattn/internal/kernel"
)

// tasks.go lists the tasks of every parallel pass from the tiling alone:
// the forward's row blocks (and their key splits), the backward's KV
// blocks, its dQ pass's query blocks and its rows pass's (sequence, head)
// pairs. Each list is appended to a buffer its pass owns.

// rowBlock is the set of query rows one task processes as a single tile:
// heads h0..h0+nh-1 × rows i0..i1-1 of one sequence, head-major. Usually
// nh = 1. When a sequence has few query rows (decoding), all its query heads
// are stacked into one block (see tiling.stacked), so each K/V tile is read
// once for all the query heads that share it, and the KV heads in memory
// order.
type rowBlock struct {
	seq    int
	h0, nh int
	i0, i1 int
}

// height is the number of tile rows of the block: heads × query rows.
func (rb rowBlock) height() int { return rb.nh * (rb.i1 - rb.i0) }

// at returns the head and sequence row of tile row r.
func (rb rowBlock) at(r int) (h, i int) {
	n := rb.i1 - rb.i0
	return rb.h0 + r/n, rb.i0 + r%n
}

// appendQueryBlocks appends the row blocks of sequence si, rows rows of one
// head each. The heads are inside: tasks of equal cost run in this order,
// so the workers read neighbouring rows of Q and write neighbouring rows of
// O (or dQ) at about the same time.
func (t *tiling) appendQueryBlocks(blocks []rowBlock, si, rows int) []rowBlock {
	nq := t.seqs[si].nq
	for i0 := 0; i0 < nq; i0 += rows {
		for h := 0; h < t.heads; h++ {
			blocks = append(blocks, rowBlock{si, h, 1, i0, min(i0+rows, nq)})
		}
	}
	return blocks
}

// fwdTask is one unit of forward work: a row block against keys j0..j1-1.
type fwdTask struct {
	rowBlock
	j0, j1 int
	slot   int // -1: write the output; else its first partial-result row
	split  int // the task's index among its row block's key splits
	parts  int // the number of key splits of its row block (1: none)
	block  int // a key split's row block's index among the split ones
	cost   int
}

// designWorkers is the largest number of workers the forward's key splits
// are designed for: unitsPerWorker tasks each, none above 1/splitTarget of
// the work. More workers take the tasks as they come (TestTaskCounts
// bounds how unevenly at 64).
const designWorkers = 16

// splitTarget is the number of tasks a call's work is measured against:
// a row block whose estimated work exceeds the call's over splitTarget
// (unitsPerWorker tasks on each of designWorkers workers) splits along the
// keys (flash-decoding), into as many parts as it holds of that mean. A
// call of splitTarget or more equal row blocks already balances
// designWorkers and splits none: every split costs partial-result rows, a
// merge and a tail of its own. Unequal blocks (causal rows, a long
// decoding row beside a prompt's many blocks) split where they exceed the
// mean, so that no task holds a worker much past the others. maxSplits
// bounds the parts of one row block. Both are fixed, not tied to the
// worker count, so that results do not depend on it.
const (
	splitTarget = unitsPerWorker * designWorkers
	maxSplits   = 16
)

// streamCost is the work, in query-row·key products, of reading one key
// of K and V of one KV head from memory rather than from the cache: a
// core's products run at about 4 FLOP per byte it streams (Zen 4: ~100
// GFLOP/s of float32 FMAs against its share, 10–25 GB/s, of the memory
// bandwidth), a product is 2·(D+DV) FLOP and the key's rows 4·(D+DV)
// bytes as float32, so about 8 products. A decoding block (few rows, its
// cache read in place) is dominated by it; a prompt's block by its
// products.
const streamCost = 8

// taskCost is the estimated work of row block rb against keys [lo, hi) of
// sequence s: its products (rows × the keys its mask leaves visible), plus
// streamCost per key and KV head that it reads from memory — all of them
// when its K and V are not packed (read from the cache in place, staged
// or as rows), once per super-block when the packed K and V do not fit in
// half the cache, none when they stay there.
func (t *tiling) taskCost(s *sequence, rb rowBlock, lo, hi int) int {
	cost := rb.height() * t.visibleKeys(s, rb, lo, hi)
	if !t.packs(s) || t.kvBytes(s) > t.cacheBytes/2 {
		nkv := (rb.h0+rb.nh-1)/t.group - rb.h0/t.group + 1
		cost += streamCost * nkv * (hi - lo)
	}
	return cost
}

// forwardTasks lists the forward's tasks, heaviest first (by taskCost),
// into *tasks (and the row blocks into *blocks), and returns them with the
// number of partial-result rows the key splits need: each split task's
// block height, the splits of a row block one after another (so the
// buffers hold the splits and rows used, not maxSplits slots of maxRows
// per block), and the number of row blocks that split.
func (t *tiling) forwardTasks(blocks *[]rowBlock, tasks *[]fwdTask) (list []fwdTask, partRows, splitBlocks int) {
	bs, list := (*blocks)[:0], (*tasks)[:0]
	defer func() { *blocks, *tasks = bs, list }()
	for si := range t.seqs {
		s := &t.seqs[si]
		if s.nq == 0 {
			continue
		}
		if t.stacked(s) {
			bs = append(bs, rowBlock{si, 0, t.heads, 0, s.nq})
			continue
		}
		rows := t.blockQ
		if t.packs(s) && t.kvBytes(s) > t.cacheBytes/2 {
			// Packed K/V that do not fit in the cache: super-blocks
			// (two-level tiling), whose microtiles share each K/V tile
			// while it is in the cache. K/V that fit are read from the
			// cache by every row block anyway.
			rows = t.superQ
		}
		bs = t.appendQueryBlocks(bs, si, rows)
	}
	// Key splits (flash-decoding), decided per row block from the shape
	// alone: with mean = the call's estimated work over splitTarget, a
	// block no heavier than the mean stays whole, and a heavier one splits
	// into the fewest tasks, from ⌈work/mean⌉, whose heaviest (its share
	// of whole key tiles) is within the mean — at most maxSplits, each at
	// least minUnits whole key tiles: one for super-blocks, whose tiles
	// are large; two otherwise. When forced, every block splits into
	// exactly numSplits parts of 16-key groups.
	unit := t.blockK
	// part returns the keys of split sp of ns of the nu tiles of u keys
	// from lo (to hi).
	part := func(lo, hi, nu, u, sp, ns int) (j0, j1 int) {
		return lo + sp*nu/ns*u, min(hi, lo+(sp+1)*nu/ns*u)
	}
	tiles := func(rb rowBlock) (lo, hi, nu int) { // the block's key span and its key tiles
		lo, hi = t.seqs[rb.seq].vis.keySpan(rb)
		lo = lo / kernel.W * kernel.W // tiles start on strip boundaries of the packed K
		return lo, hi, (hi - lo + unit - 1) / unit
	}
	total := 0
	for _, rb := range bs {
		lo, hi, _ := tiles(rb)
		total += t.taskCost(&t.seqs[rb.seq], rb, lo, hi)
	}
	mean := max(1, total/splitTarget)
	forced := t.cache.numSplits > 0
	for _, rb := range bs {
		s := &t.seqs[rb.seq]
		lo, hi, nu := tiles(rb)
		u, ns := unit, 1
		switch work := t.taskCost(s, rb, lo, hi); {
		case forced:
			u = kernel.W
			nu = (hi - lo + u - 1) / u
			ns = min(t.cache.numSplits, max(1, nu))
		case work > mean:
			minUnits := 2
			if rb.nh == 1 && rb.i1-rb.i0 > t.blockQ {
				minUnits = 1
			}
			most := max(1, min(maxSplits, nu/minUnits))
			ns = min(most, (work+mean-1)/mean)
			for ; ns < most; ns++ {
				heaviest := 0
				for sp := 0; sp < ns; sp++ {
					j0, j1 := part(lo, hi, nu, u, sp, ns)
					heaviest = max(heaviest, t.taskCost(s, rb, j0, j1))
				}
				if heaviest <= mean {
					break
				}
			}
		}
		if ns == 1 {
			list = append(list, fwdTask{rb, lo, hi, -1, 0, 1, 0, t.taskCost(s, rb, lo, hi)})
			continue
		}
		for sp := 0; sp < ns; sp++ {
			j0, j1 := part(lo, hi, nu, u, sp, ns)
			list = append(list, fwdTask{rb, j0, j1, partRows + sp*rb.height(), sp, ns, splitBlocks, t.taskCost(s, rb, j0, j1)})
		}
		partRows += ns * rb.height()
		splitBlocks++
	}
	slices.SortStableFunc(list, func(a, b fwdTask) int { return b.cost - a.cost })
	return list, partRows, splitBlocks
}

// forwardBalance returns the number of the forward's tasks and the
// largest one's share of their total cost (see Traffic.ForwardLargestTask).
func (t *tiling) forwardBalance() (tasks int, largest float64) {
	var blocks []rowBlock
	var list []fwdTask
	list, _, _ = t.forwardTasks(&blocks, &list)
	total := 0
	for _, tk := range list {
		total += tk.cost
	}
	if len(list) == 0 || total == 0 {
		return len(list), 0
	}
	return len(list), float64(list[0].cost) / float64(total) // heaviest first
}

// visibleKeys counts the keys of [lo, hi) in tiles that rows rb compute.
func (t *tiling) visibleKeys(s *sequence, rb rowBlock, lo, hi int) int {
	if !t.masked {
		return hi - lo
	}
	n := 0
	for j := lo; ; {
		j0, j1, _ := nextTile(s.vis, rb, j, hi, t.blockK)
		if j0 >= hi {
			return n
		}
		n += j1 - j0
		j = j1
	}
}

// bwdTask is one task of the backward's KV pass: the KV blocks [kb0, kb1)
// of KV head hk of sequence seq, for every query head of hk.
type bwdTask struct {
	seq, hk  int
	kb0, kb1 int
}

// unitsPerWorker is the number of tasks per worker below which a pass is
// split finer.
const unitsPerWorker = 4

// backwardTasks lists the KV pass's tasks into *tasks for the given number
// of workers, and whether they also sum dQ (see backward.go).
func (t *tiling) backwardTasks(tasks *[]bwdTask, workers int) (list []bwdTask, withDQ bool) {
	list = (*tasks)[:0]
	defer func() { *tasks = list }()
	pairs := 0
	for _, s := range t.seqs {
		if s.nq > 0 && s.nk > 0 {
			pairs += t.kvHeads
		}
	}
	withDQ = pairs >= unitsPerWorker*workers
	for si, s := range t.seqs {
		if s.nq == 0 || s.nk == 0 {
			continue
		}
		nkb := (s.nk + t.bwdBlockK - 1) / t.bwdBlockK
		for hk := 0; hk < t.kvHeads; hk++ {
			if withDQ {
				list = append(list, bwdTask{si, hk, 0, nkb})
				continue
			}
			for kb := 0; kb < nkb; kb++ {
				list = append(list, bwdTask{si, hk, kb, kb + 1})
			}
		}
	}
	return list, withDQ
}

// headTasks lists into *tasks the (sequence, query head) pairs that have
// query rows, as row blocks of all the sequence's rows.
func (t *tiling) headTasks(tasks *[]rowBlock) []rowBlock {
	list := (*tasks)[:0]
	for si := range t.seqs {
		if s := &t.seqs[si]; s.nq > 0 {
			for h := 0; h < t.heads; h++ {
				list = append(list, rowBlock{si, h, 1, 0, s.nq})
			}
		}
	}
	*tasks = list
	return list
}

// dqTasks lists into *tasks the dQ pass's query blocks, rows of one head of
// one sequence that has keys: blockQ rows, or, where the sequence's packed
// backward K and V do not fit in half the cache, super-blocks of up to
// superQ rows whose microtiles share each KV block while it is in the cache
// (as the forward's do) — but not so large that fewer than unitsPerWorker
// blocks per worker remain. Each dQ row sums its KV blocks in ascending
// order whatever block it is in, so the result does not depend on them.
func (t *tiling) dqTasks(tasks *[]rowBlock, workers int) []rowBlock {
	rows := 0
	for _, s := range t.seqs {
		if s.nk > 0 {
			rows += s.nq * t.heads
		}
	}
	perTask := rows / (unitsPerWorker * max(workers, 1)) / t.blockQ * t.blockQ
	list := (*tasks)[:0]
	for si := range t.seqs {
		s := &t.seqs[si]
		if s.nk == 0 {
			continue
		}
		n := t.blockQ
		if t.bwdKVBytes(s) > t.cacheBytes/2 {
			n = max(t.blockQ, min(t.superQ, perTask))
		}
		list = t.appendQueryBlocks(list, si, n)
	}
	*tasks = list
	return list
}

// bwdKVBytes is the size of a sequence's K and V of one KV head as the
// backward packs them in float32: Kᵀ, K rows and Vᵀ (native 16-bit
// products pack half of it; the same rule serves both).
func (t *tiling) bwdKVBytes(s *sequence) int {
	return 4 * s.nk * (2*t.dimPad + t.dimVPad)
}

// kvBytes is the size of a sequence's packed K and V of one KV head.
func (t *tiling) kvBytes(s *sequence) int {
	return 4 * s.nk * (t.dimPad + t.dimVPad)
}

// queryTileWalk walks the query tiles of head h that see the backward's KV
// block [j0, j0+n) of a sequence: tiles of blockQ rows from a multiple of
// alignQ through the rows the block is visible to, the empty ones skipped.
// The backward's passes and CountTraffic walk the same tiles.
type queryTileWalk struct {
	s               *sequence
	h, j0, n        int
	i0, qhi, blockQ int
}

// queryTiles returns the walk over the query tiles of head h that see keys
// [j0, j0+n) of sequence s.
func (t *tiling) queryTiles(s *sequence, h, j0, n int) queryTileWalk {
	qlo, qhi := s.vis.querySpan(h, j0, j0+n)
	if qlo < qhi {
		qlo -= qlo % t.alignQ
	}
	return queryTileWalk{s: s, h: h, j0: j0, n: n, i0: qlo, qhi: qhi, blockQ: t.blockQ}
}

// empty reports whether no query row sees the block.
func (w *queryTileWalk) empty() bool { return w.i0 >= w.qhi }

// next returns the next tile that is not empty, or false at the end.
func (w *queryTileWalk) next() (tileAt, bool) {
	for w.i0 < w.qhi {
		i0, i1 := w.i0, min(w.i0+w.blockQ, w.qhi)
		w.i0 = i1
		kind := w.s.vis.tile(rowBlock{h0: w.h, nh: 1, i0: i0, i1: i1}, w.j0, w.j0+w.n)
		if kind != BlockEmpty {
			return tileAt{w.s, w.h, i0, i1, w.j0, w.n, kind}, true
		}
	}
	return tileAt{}, false
}
