package flashattn

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

func mustCount(t *testing.T, s TrafficShape, o *Options, m int, pass Pass) Traffic {
	t.Helper()
	tr, err := CountTraffic(s, o, m, pass)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// The standard algorithm moves 4·(4·Sq·Sk + 2·Sq·D + 2·Sk·D) bytes per
// (batch, query head) forward and 4·(7·Sq·Sk + 4·Sq·D + 4·Sk·D) backward:
// Θ(Nd + N²), whatever the cache and the mask.
func TestTrafficStandardClosedForm(t *testing.T) {
	for _, c := range []struct {
		s    TrafficShape
		o    *Options
		pass Pass
	}{
		{TrafficShape{Batch: 1, Heads: 1, SeqQ: 1000, SeqK: 1000, Dim: 64}, nil, PassForward},
		{TrafficShape{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 300, SeqK: 517, Dim: 40}, &Options{Causal: true}, PassBackward},
		{TrafficShape{Batch: 3, Heads: 2, SeqQ: 129, SeqK: 77, Dim: 128}, &Options{Window: &Window{8, 8}}, PassForwardBackward},
	} {
		bh := int64(c.s.Batch * c.s.Heads)
		nq, nk, d := int64(c.s.SeqQ), int64(c.s.SeqK), int64(c.s.Dim)
		var want int64
		if c.pass&PassForward != 0 {
			want += 4 * bh * (4*nq*nk + 2*nq*d + 2*nk*d)
		}
		if c.pass&PassBackward != 0 {
			want += 4 * bh * (7*nq*nk + 4*nq*d + 4*nk*d)
		}
		for _, m := range []int{32 << 10, 1 << 20, 64 << 20} {
			tr := mustCount(t, c.s, c.o, m, c.pass)
			if got := tr.Standard.Total(); got != want {
				t.Errorf("%+v pass %d M %d: standard %d bytes, want %d", c.s, c.pass, m, got, want)
			}
		}
	}
}

// fwdDense is the closed form of the forward's traffic without a mask and
// without key splits (at least 256 row blocks): K and V packed once (read,
// written padded), then read whole by each of the ⌈Sq/B_r⌉ super-blocks of
// every query head (their microtiles share each tile in the cache); Q read
// and O, LSE written once.
func fwdDense(b, h, hk, sq, sk, d, br int) int64 {
	dp := kernel.Pad(d)
	tr := ceilDiv(sq, br)
	pack := b * hk * (2*sk*d + kernel.Pad(sk)*d + sk*dp)
	tiles := b * h * tr * (kernel.Pad(sk)*d + sk*dp)
	return floats(pack + tiles + b*h*sq*(2*d+1))
}

// The forward's count equals the closed form: Θ(N²·d/B_r) for K and V,
// B_r the super-block.
func TestTrafficForwardClosedForm(t *testing.T) {
	for _, c := range []struct {
		s TrafficShape
		m int
	}{
		// Enough heads for splitTarget equal super-blocks: no key splits (see forwardTasks).
		{TrafficShape{Batch: 1, Heads: 64, SeqQ: 4096, SeqK: 4096, Dim: 64}, 1 << 20},
		{TrafficShape{Batch: 1, Heads: 64, SeqQ: 1000, SeqK: 1003, Dim: 64}, 256 << 10},
		{TrafficShape{Batch: 2, Heads: 16, KVHeads: 8, SeqQ: 777, SeqK: 500, Dim: 40}, 64 << 10},
		{TrafficShape{Batch: 1, Heads: 16, SeqQ: 2000, SeqK: 2000, Dim: 128}, 16 << 10},
	} {
		tr := mustCount(t, c.s, nil, c.m, PassForward)
		hk := max(c.s.KVHeads, 1)
		if c.s.KVHeads == 0 {
			hk = c.s.Heads
		}
		if blocks := c.s.Batch * c.s.Heads * ceilDiv(c.s.SeqQ, tr.SuperBlockQ); blocks < splitTarget {
			t.Fatalf("%+v: %d super-blocks, the case needs ≥ %d (no key splits)", c.s, blocks, splitTarget)
		}
		want := fwdDense(c.s.Batch, c.s.Heads, hk, c.s.SeqQ, c.s.SeqK, c.s.Dim, tr.SuperBlockQ)
		if got := tr.Flash.Total(); got != want {
			t.Errorf("%+v M %d (B_r %d): flash %d bytes, want %d", c.s, c.m, tr.SuperBlockQ, got, want)
		}
		if tr.Flash.Scores.Total() != 0 {
			t.Errorf("%+v: flash stores scores", c.s)
		}
	}
}

// The forward is IO-aware at every cache size: its super-block is
// B_r = M/(4·2d) floats (a multiple of the microtile, at most 512 rows), so
// its K/V traffic N²·d·8/B_r ∝ N²·d²/M falls as M grows until B_r reaches
// its cap; at d = 64 the whole forward moves 1.6–2.4× more bytes when M
// halves (256 → 128 KiB) and 3.4–4.6× more when N doubles (4096 → 8192).
// The backward's KV block B_c = M/(16·d) keys (rounded down to 16) scales
// for M in [512·d, 8192·d] bytes, and so does its Q, dO and dQ traffic,
// ∝ N²·d/B_c = 16·N²·d²/M.
func TestTrafficCacheRange(t *testing.T) {
	const n = 4096
	for _, d := range []int{64, 128} {
		s := TrafficShape{Batch: 1, Heads: 1, SeqQ: n, SeqK: n, Dim: d}
		// 64 heads: enough row blocks that no keys are split at any M.
		s64 := TrafficShape{Batch: 1, Heads: 64, SeqQ: n, SeqK: n, Dim: d}
		prev := int64(0)
		for m := 2048 * d; m <= 64<<20; m *= 2 {
			tr := mustCount(t, s64, nil, m, PassForward)
			bq, dp := tr.BlockQ, kernel.Pad(d)
			if want := max(min(m/4/(8*d)/bq*bq, 512/bq*bq), bq); tr.SuperBlockQ != want {
				t.Errorf("d %d M %d: super-block %d rows, want %d", d, m, tr.SuperBlockQ, want)
			}
			want := fwdDense(1, 64, 64, n, n, d, tr.SuperBlockQ)
			if 4*n*2*dp <= m/2 {
				// K and V fit in half the cache: packed once and read from
				// the cache by every row block (the forward then uses no
				// super-blocks).
				want = fwdDense(1, 64, 64, n, n, d, n) - floats(64*(kernel.Pad(n)*d+n*dp))
			}
			if tr.Flash.Total() != want {
				t.Errorf("d %d M %d: forward %d bytes, want %d", d, m, tr.Flash.Total(), want)
			}
			if prev != 0 && tr.Flash.Total() > prev {
				t.Errorf("d %d M %d: forward traffic grew with M (%d > %d)", d, m, tr.Flash.Total(), prev)
			}
			prev = tr.Flash.Total()
		}
		// Backward: B_c = M/(16·d), and the query tiles' traffic (Q and
		// dO tiles read once per KV block, beyond the rows pass that packs
		// them and the dQ pass that reads each once) times M is constant:
		// it is 16·N²·d·dp/M.
		for m := 512 * d; m <= 8192*d; m *= 2 {
			tr := mustCount(t, s, nil, m, PassBackward)
			if want := m / (16 * d); tr.BackwardBlockK != want {
				t.Errorf("d %d M %d: B_c %d, want %d", d, m, tr.BackwardBlockK, want)
			}
			f, dp := tr.Flash, kernel.Pad(d)
			tiles := f.Q.Read - floats(n*d+n*dp) + f.DO.Read - floats(2*n*d+n*dp)
			if want := 2 * 16 * 4 * int64(n) * int64(n) * int64(d) * int64(kernel.Pad(d)) / int64(m); tiles != want {
				t.Errorf("d %d M %d: backward query tiles %d bytes, want 16·N²·d·dp/M·2 = %d", d, m, tiles, want)
			}
		}
	}
	fwd := func(n, m int) float64 {
		return float64(mustCount(t, TrafficShape{Batch: 1, Heads: 8, SeqQ: n, SeqK: n, Dim: 64}, nil, m, PassForward).Flash.Total())
	}
	if r := fwd(4096, 128<<10) / fwd(4096, 256<<10); r < 1.6 || r > 2.4 {
		t.Errorf("d 64: forward bytes at M = 128 KiB / at 256 KiB = %.2f, want 1.6–2.4", r)
	}
	if r := fwd(8192, 256<<10) / fwd(4096, 256<<10); r < 3.4 || r > 4.6 {
		t.Errorf("d 64: forward bytes at N = 8192 / at 4096 = %.2f, want 3.4–4.6", r)
	}
}

// The tiles the loops hold, against the cache they were sized for: the
// forward's fit from M = 128 KiB (at d = 64 and M = 64 KiB, 48 query rows
// with 64-key tiles take 70 KiB); the backward holds five
// K-sized tiles (Kᵀ, Vᵀ, K, dK, dV) of B_c = M/(16·d) keys, 5/4 of M, so
// wherever the tile rule scales B_c with M its tiles overflow the cache
// (the count is then a lower bound), and they fit only once B_c reaches
// its cap of 512 keys (d = 64, M ≥ 1 MiB).
func TestTrafficTileBytes(t *testing.T) {
	s := TrafficShape{Batch: 1, Heads: 1, SeqQ: 4096, SeqK: 4096, Dim: 64}
	tr := mustCount(t, s, nil, 1<<20, PassForwardBackward)
	// B_r = 48 in super-blocks of 480, B_c = 512, d = dp = 64 (floats,
	// then bytes).
	fwd := 480*64 + 480*64 + 2*480 + 512*64 + 512*64 + 48*512
	bwd := 2*512*64 + 3*512*64 + 2*48*512 + 3*48*64 + 2*48
	if tr.ForwardTileBytes != 4*fwd || tr.BackwardTileBytes != 4*bwd || tr.BackwardTileBytes > 1<<20 {
		t.Errorf("tile bytes %d, %d; want %d, %d", tr.ForwardTileBytes, tr.BackwardTileBytes, 4*fwd, 4*bwd)
	}
	if d := mustCount(t, s, &Options{Dropout: 0.1, Softcap: 5}, 1<<20, PassBackward); d.BackwardTileBytes != tr.BackwardTileBytes+2*4*48*512 {
		t.Errorf("dropout and softcap: backward tiles %d, want two more score tiles", d.BackwardTileBytes)
	}
	if tr := mustCount(t, s, nil, 64<<10, PassForward); tr.ForwardTileBytes != 4*(2*48*64+2*48+2*64*64+48*64) {
		t.Errorf("M 64 KiB: forward tiles %d", tr.ForwardTileBytes)
	}
	for _, d := range []int{64, 128} {
		s.Dim = d
		for m := 512 * d; m < 8192*d; m *= 2 {
			tr := mustCount(t, s, nil, m, PassForwardBackward)
			if tr.BackwardTileBytes <= m {
				t.Errorf("d %d M %d: backward tiles %d fit", d, m, tr.BackwardTileBytes)
			}
			if m >= 128<<10 && tr.ForwardTileBytes > m {
				t.Errorf("d %d M %d: forward tiles %d do not fit", d, m, tr.ForwardTileBytes)
			}
		}
	}
}

// bwdDense is the closed form of the two-pass backward's traffic without a
// mask (one (sequence, KV head) pair per head, fewer than 4 per worker):
// dK, dV cleared; the rows pass reads O, dO twice and Q and writes Q, dO
// packed and D; the LSE scan; K and V packed once (Kᵀ, K rows, Vᵀ); the KV
// pass per KV block reads Kᵀ and Vᵀ, every query tile's Q, dO, LSE and D,
// and adds the block's dK, dV (read and written); the dQ pass per query
// block of bq rows (a super-block of microtiles, see tiling.dqTasks) reads
// Q, dO, LSE, D, the packed Kᵀ, K and Vᵀ of every KV block, and writes dQ.
func bwdDense(h, n, d, bc, bq int) int64 {
	dp := kernel.Pad(d)
	tc := ceilDiv(n, bc)
	last := n - (tc-1)*bc
	packedT := (tc-1)*kernel.Pad(bc)*d + kernel.Pad(last)*d // Kᵀ or Vᵀ of all blocks
	per := 2*n*d +                                          // dK, dV cleared
		n*d + 2*n*d + n*d + 2*n*dp + n + // the rows pass
		n + // LSE scan
		2*n*d + kernel.Pad(n)*d + n*dp + kernel.Pad(n)*d + // packing
		2*packedT + tc*n*(2*dp+2) + 4*n*d + // the KV pass
		n*(2*dp+2) + ceilDiv(n, bq)*(2*packedT+n*dp) + n*d // the dQ pass
	return floats(h * per)
}

func TestTrafficBackwardClosedForm(t *testing.T) {
	for _, c := range []struct {
		n, d, m int
	}{{4096, 64, 1 << 20}, {1000, 64, 64 << 10}, {300, 40, 32 << 10}, {2048, 128, 256 << 10}} {
		s := TrafficShape{Batch: 1, Heads: 1, SeqQ: c.n, SeqK: c.n, Dim: c.d}
		tr := mustCount(t, s, nil, c.m, PassBackward)
		rows := tr.BlockQ // the dQ pass's query blocks
		if dp := kernel.Pad(c.d); 4*c.n*3*dp > c.m/2 {
			perTask := c.n / (unitsPerWorker * (&Options{}).workers()) / tr.BlockQ * tr.BlockQ
			rows = max(tr.BlockQ, min(tr.SuperBlockQ, perTask))
		}
		want := bwdDense(1, c.n, c.d, tr.BackwardBlockK, rows)
		if got := tr.Flash.Total(); got != want {
			t.Errorf("N %d d %d M %d (B_c %d): backward %d bytes, want %d", c.n, c.d, c.m, tr.BackwardBlockK, got, want)
		}
		both := mustCount(t, s, nil, c.m, PassForwardBackward)
		if both.Flash.Total() != want+mustCount(t, s, nil, c.m, PassForward).Flash.Total() {
			t.Errorf("N %d: forward+backward %d is not the sum of the passes", c.n, both.Flash.Total())
		}
	}
}

// randomBlockMask keeps each block with probability s, and the diagonal.
func randomBlockMask(t *testing.T, heads, n int, s float64, seed uint64) *BlockMask {
	r := rand.New(rand.NewPCG(seed, 3))
	m, err := BlockMaskFromFunc(BlockShape{Batch: 1, Heads: heads, SeqQ: n, SeqK: n},
		func(_, _, qb, kb int) bool { return qb == kb || r.Float64() < s })
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Block-sparse: the K/V tiles each row block reads, and the query tiles
// each KV block streams, are exactly those of the visible blocks, so both
// passes' quadratic traffic is the density s times that of an all-visible
// mask (same tiles), also with short last blocks.
func TestTrafficBlockSparse(t *testing.T) {
	for _, c := range []struct {
		n, d  int
		s     float64
		heads int
	}{{4096, 64, 0.1, 1}, {2000, 64, 0.3, 2}, {1500, 32, 0.05, 3}} {
		sparse := randomBlockMask(t, c.heads, c.n, c.s, uint64(c.n))
		full := randomBlockMask(t, c.heads, c.n, 1, 0)
		shape := TrafficShape{Batch: 1, Heads: c.heads, SeqQ: c.n, SeqK: c.n, Dim: c.d}
		fwd := mustCount(t, shape, &Options{BlockMask: sparse}, 1<<20, PassForward)
		bwd := mustCount(t, shape, &Options{BlockMask: sparse}, 1<<20, PassBackward)
		if fwd.BlockQ != 64 || bwd.BackwardBlockK != 128 {
			t.Errorf("tiles %d × %d, want 64 rows (aligned to the 128-row blocks) and 128-key backward blocks", fwd.BlockQ, bwd.BackwardBlockK)
		}
		// Expected: per visible block (qb, kb), each of its query tiles
		// reads the block's K and V tile; each KV block's query tiles
		// read Q and dO and update dQ.
		d, dp := c.d, kernel.Pad(c.d)
		var fwdKV, bwdQ int64
		nqb, nkb := sparse.Blocks()
		for h := 0; h < c.heads; h++ {
			for qb := 0; qb < nqb; qb++ {
				rows := min(128, c.n-qb*128)
				for kb := 0; kb < nkb; kb++ {
					if sparse.Kind(0, h, qb, kb) == BlockEmpty {
						continue
					}
					keys := min(128, c.n-kb*128)
					fwdKV += floats(ceilDiv(rows, 64) * (kernel.Pad(keys)*d + keys*dp))
					bwdQ += floats(rows * dp)
				}
			}
		}
		// The forward reads K and V once more to pack them; the backward's
		// rows pass reads dO twice (packing, D) and the dQ pass the packed
		// rows once, per query head.
		if 4*c.n*2*dp <= (1<<20)/2 {
			fwdKV = 0 // K and V fit in half the cache: read from it after packing
		}
		fwdTiles := func(tr Traffic) int64 { return tr.Flash.K.Read + tr.Flash.V.Read - floats(2*c.heads*c.n*d) }
		if got := fwdTiles(fwd); got != fwdKV {
			t.Errorf("N %d s %v: forward K/V tile traffic %d, want %d", c.n, c.s, got, fwdKV)
		}
		bwdTiles := func(tr Traffic) int64 { return tr.Flash.DO.Read - floats(c.heads*(2*c.n*d+c.n*dp)) }
		if got := bwdTiles(bwd); got != bwdQ {
			t.Errorf("N %d s %v: backward dO tile traffic %d, want %d", c.n, c.s, got, bwdQ)
		}
		if c.n%128 != 0 {
			continue
		}
		// Equal blocks: the ratio to an all-visible mask is the density.
		ffwd := mustCount(t, shape, &Options{BlockMask: full}, 1<<20, PassForward)
		fbwd := mustCount(t, shape, &Options{BlockMask: full}, 1<<20, PassBackward)
		dens := sparse.Density()
		for _, r := range []float64{float64(fwdTiles(fwd)) / float64(fwdTiles(ffwd)), float64(bwdTiles(bwd)) / float64(bwdTiles(fbwd))} {
			if r < dens-1e-12 || r > dens+1e-12 {
				t.Errorf("N %d: sparse/full tile traffic %.6f, density %.6f", c.n, r, dens)
			}
		}
	}
}

// Causal: each row block reads the key tiles up to its diagonal, about
// half of the non-causal traffic (to within a tile per row block).
func TestTrafficCausal(t *testing.T) {
	s := TrafficShape{Batch: 1, Heads: 1, SeqQ: 8192, SeqK: 8192, Dim: 64}
	full := mustCount(t, s, nil, 1<<20, PassForward)
	causal := mustCount(t, s, &Options{Causal: true}, 1<<20, PassForward)
	tiles := func(tr Traffic) float64 { return float64(tr.Flash.K.Read - floats(s.SeqK*s.Dim)) }
	r := tiles(causal) / tiles(full)
	slack := float64(causal.SuperBlockQ+kernel.W) / float64(s.SeqK)
	if r < 0.5 || r > 0.5+slack {
		t.Errorf("causal/full K tile traffic %.4f, want 0.5…%.4f", r, 0.5+slack)
	}
}

// The tiles CountTraffic uses for this machine's cache are those Forward
// and Backward use: its copy of the tile rule has not drifted from
// newPlan's.
func TestTrafficTilesMatchPlan(t *testing.T) {
	m := randomBlockMask(t, 1, 3000, 0.5, 1)
	for _, o := range []*Options{nil, {Causal: true}, {Window: &Window{100, 0}}, {BlockMask: m}, {BlockQ: 30, BlockK: 70}, {BlockMask: m, BlockK: 64}} {
		for _, d := range []int{16, 64, 128, 256} {
			s := TrafficShape{Batch: 1, Heads: 2, SeqQ: 3000, SeqK: 3000, Dim: d}
			tr := mustCount(t, s, o, TileCacheBytes(), PassForward)
			data := make([]float32, 3000*2*d)
			q := Dense(data, 1, 3000, 2, d)
			c, err := newCall(q, q, q, o)
			if err != nil {
				t.Fatal(err)
			}
			p := c.plan
			c.release()
			// The call may halve the backward's KV block further, to give
			// many workers enough tasks (fitKVBlocks); the count does not.
			if tr.BlockQ != p.blockQ || tr.BlockK != p.blockK || tr.BackwardBlockK < p.bwdBlockK || tr.BackwardBlockK%p.bwdBlockK != 0 {
				t.Errorf("d %d %+v: counted tiles %d/%d/%d, plan's %d/%d/%d", d, o, tr.BlockQ, tr.BlockK, tr.BackwardBlockK, p.blockQ, p.blockK, p.bwdBlockK)
			}
		}
	}
}

// Varlen and key splits (few row blocks): the count walks each sequence.
func TestTrafficVarLenAndSplits(t *testing.T) {
	vl := &VarLen{CuSeqlensQ: []int32{0, 100, 1100}, CuSeqlensK: []int32{0, 300, 2300}}
	// 64 heads: enough row blocks that no keys are split.
	s := TrafficShape{Batch: 1, Heads: 64, SeqQ: 1100, SeqK: 2300, Dim: 64}
	tr := mustCount(t, s, &Options{VarLen: vl}, 1<<20, PassForward)
	f := tr.Flash
	if f.Q.Read != floats(64*1100*64) || f.O.Write < floats(64*1100*64) {
		t.Errorf("varlen: Q read %d, O written %d", f.Q.Read, f.O.Write)
	}
	// The standard algorithm per sequence: 100×300 and 1000×2000 scores.
	if want := int64(64 * 4 * 4 * (100*300 + 1000*2000)); tr.Standard.Scores.Total() != want {
		t.Errorf("varlen: standard scores %d, want %d", tr.Standard.Scores.Total(), want)
	}
	// One short sequence: few row blocks, so the keys are split and the
	// partial results merged, which reads them back.
	few := mustCount(t, TrafficShape{Batch: 1, Heads: 1, SeqQ: 96, SeqK: 8192, Dim: 64}, nil, 1<<20, PassForward)
	if few.Flash.O.Read == 0 || few.Flash.O.Write <= floats(96*64) {
		t.Errorf("key splits: O read %d, written %d", few.Flash.O.Read, few.Flash.O.Write)
	}
}

func TestTrafficErrors(t *testing.T) {
	ok := TrafficShape{Batch: 1, Heads: 1, SeqQ: 10, SeqK: 10, Dim: 8}
	for _, c := range []struct {
		s    TrafficShape
		o    *Options
		m    int
		pass Pass
		arg  string
	}{
		{ok, &Options{KVCache: &KVCache{SeqLens: []int32{3}}}, 1 << 20, PassForward, "Options.KVCache"},
		{ok, nil, 1 << 20, 0, "pass"},
		{ok, nil, 1 << 20, 4, "pass"},
		{ok, nil, 0, PassForward, "cacheBytes"},
		{TrafficShape{Batch: 1, Heads: 1, SeqQ: 0, SeqK: 10, Dim: 8}, nil, 1 << 20, PassForward, "shape"},
		{TrafficShape{Batch: 1, Heads: 3, KVHeads: 2, SeqQ: 10, SeqK: 10, Dim: 8}, nil, 1 << 20, PassForward, "k"},
		{TrafficShape{Batch: math.MaxInt / 2, Heads: math.MaxInt / 2, SeqQ: math.MaxInt / 2, SeqK: 10, Dim: 8}, nil, 1 << 20, PassForward, "shape"},
		{TrafficShape{Batch: 1, Heads: 1, SeqQ: 1 << 30, SeqK: 1 << 30, Dim: 1}, nil, 1 << 20, PassForward, "shape"},
		{TrafficShape{Batch: 1, Heads: 1, SeqQ: 10, SeqK: 10, Dim: math.MaxInt}, nil, 1 << 20, PassForward, "shape"},
		{ok, &Options{Scale: -1}, 1 << 20, PassForward, "Options.Scale"},
	} {
		_, err := CountTraffic(c.s, c.o, c.m, c.pass)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != c.arg {
			t.Errorf("%+v %+v %d %d: error %v, want an ArgError for %s", c.s, c.o, c.m, c.pass, err, c.arg)
		}
	}
}

// TestTrafficDimV: V, O, dO and dV bytes follow V's head dim (MLA), Q, K, dQ
// and dK bytes Q's and K's. With the tiles fixed by options, halving DimV
// halves exactly the first group and leaves the second unchanged.
func TestTrafficDimV(t *testing.T) {
	for _, pass := range []Pass{PassForward, PassBackward, PassForwardBackward} {
		for _, causal := range []bool{false, true} {
			opts := &Options{BlockQ: 48, BlockK: 128, Causal: causal}
			count := func(dv int) Traffic {
				s := TrafficShape{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 700, SeqK: 900, Dim: 64, DimV: dv}
				return mustCount(t, s, opts, 256<<10, pass)
			}
			full, half := count(64), count(32)
			for _, c := range []struct {
				name        string
				full, half  IOBytes
				scalesWithV bool
			}{
				{"v", full.Flash.V, half.Flash.V, true}, {"o", full.Flash.O, half.Flash.O, true},
				{"dout", full.Flash.DO, half.Flash.DO, true}, {"dv", full.Flash.DV, half.Flash.DV, true},
				{"q", full.Flash.Q, half.Flash.Q, false}, {"k", full.Flash.K, half.Flash.K, false},
				{"dq", full.Flash.DQ, half.Flash.DQ, false}, {"dk", full.Flash.DK, half.Flash.DK, false},
				{"standard v", full.Standard.V, half.Standard.V, true}, {"standard o", full.Standard.O, half.Standard.O, true},
				{"standard dout", full.Standard.DO, half.Standard.DO, true}, {"standard dv", full.Standard.DV, half.Standard.DV, true},
				{"standard k", full.Standard.K, half.Standard.K, false},
			} {
				want := c.full
				if c.scalesWithV {
					want = IOBytes{Read: c.full.Read / 2, Write: c.full.Write / 2}
				}
				if c.half != want {
					t.Errorf("pass %v causal %v: %s with DimV 32 %+v, want %+v (DimV 64: %+v)", pass, causal, c.name, c.half, want, c.full)
				}
			}
			if full.BackwardTileBytes <= half.BackwardTileBytes {
				t.Errorf("pass %v: backward tiles %d with DimV 64, %d with 32", pass, full.BackwardTileBytes, half.BackwardTileBytes)
			}
		}
	}
}
