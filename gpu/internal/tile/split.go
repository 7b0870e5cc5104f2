package tile

import (
	"fmt"
	"math"
)

// Split-KV forward ("flash-decoding"). With few query rows (decoding:
// seqlen_q of 1 to a few dozen) the forward grid, batch × heads × query
// blocks, has too few blocks to fill the GPU however long the keys are.
// The split-KV variant gives each query block `splits` thread blocks: block
// (query block m, split s) runs the forward main loop over part s of the key
// tiles that query block m sees (SplitRange) and writes, per row, its float32
// O normalised by its own row sum and its LSE (natural log; -Inf and O = 0
// for a row that sees no key of the part). The combine kernel then merges
// the parts of each row:
//
//	M   = max_s LSE_s (0 if every LSE_s is -Inf)
//	w_s = e^(LSE_s - M),  L = Σ_s w_s
//	O   = Σ_s w_s·O_s / L,  LSE = M + log L   (O = 0, LSE = -Inf if L = 0)
//
// in split order, so that the result does not depend on scheduling.

// FwdSplitConfig returns the split-KV forward configuration for head
// dimension d: 64-row query blocks of 4 warps with 64-key tiles at d64 and
// d128 (flash-attn 2's split kernel has 64-row blocks too: at decode shapes
// the rows past seqlen_q are wasted tensor-core work, half as much as with
// the 128-row blocks of FwdConfig), K and V double-buffered (d64: 40 KiB,
// three blocks per SM; d128: 80 KiB, two), and d256's forward
// configuration.
func FwdSplitConfig(d int) Fwd {
	if d > 128 {
		c := FwdConfig(d)
		c.Split = true
		return c
	}
	return Fwd{D: d, Bc: 64, MT: 1, Warps: 4, Split: true, KVDouble: true}
}

// BlocksPerSM is the number of the configuration's thread blocks resident
// on one SM of sm_80 and sm_90 GPUs (A100, H100), as ptxas 11.8's register
// counts and the shared memory give it (gpu/_ptxgen's TestPTXAS checks the
// values against ptxas). The split heuristic counts the device's block
// slots with it.
func (c Fwd) BlocksPerSM() int {
	switch {
	case c.D > 128:
		return 1
	case c.Split && c.D <= 64:
		return 3
	}
	return 2
}

// MaxSplits is the most parts a query block's keys are split into.
const MaxSplits = 128

// SplitRange returns the key tiles [lo, hi) that part s of n takes of the
// key tiles [nlo, nhi) a query block sees: consecutive parts of
// ceil((nhi-nlo)/n) tiles, the last ones shorter or empty (lo >= hi).
func SplitRange(nlo, nhi, s, n int) (lo, hi int) {
	per := (max(nhi-nlo, 0) + n - 1) / n
	lo = nlo + s*per
	return lo, min(lo+per, nhi)
}

// SplitGrid returns the launch grid of the split-KV forward kernel: x runs
// over (query block, split) pairs, splits consecutive blocks per query
// block, the heaviest query block first (as in Grid).
func SplitGrid(maxSq, br, heads, batch, splits int) (x, y, z int) {
	x, y, z = Grid(maxSq, br, heads, batch)
	return x * splits, y, z
}

// NumSplits chooses the number of splits for a grid of blocks thread blocks
// (batch × heads × query blocks of the split kernel) on a device with slots
// resident blocks (SMs × BlocksPerSM) when a query block sees at most tiles
// key tiles, with at most limit splits. It follows flash-attn 2's
// num_splits_heuristic: the efficiency of s splits is the fill of the last
// wave, w/ceil(w) with w = blocks·s/slots waves; counts of splits that give
// as many tiles per split as one split fewer (ceil(tiles/s) =
// ceil(tiles/(s-1))) are skipped, as they only add empty splits; the
// smallest count whose efficiency is at least 85% of the best is chosen,
// since each split costs partial-result traffic and a combine.
func NumSplits(blocks, slots, tiles, limit int) int {
	n := min(limit, slots, tiles, MaxSplits)
	if blocks <= 0 || slots <= 0 || n <= 1 {
		return 1
	}
	eff := make([]float64, n+1) // 0: skipped
	best := 0.0
	for s := 1; s <= n; s++ {
		if s > 1 && ceilDiv(tiles, s) == ceilDiv(tiles, s-1) {
			continue
		}
		w := float64(blocks*s) / float64(slots)
		eff[s] = w / math.Ceil(w)
		best = max(best, eff[s])
	}
	for s := 1; s <= n; s++ {
		if eff[s] > 0 && eff[s] >= 0.85*best {
			return s
		}
	}
	return 1
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// FwdSplitParams are the split-KV forward kernel's parameters: those of
// FwdParams without o, o_bs and o_rs, with the float32 partial results
// o_acc and lse_acc, the number of splits and split_rows, the elements of
// one split's LSE. Split s's LSE of (b, h, row i of the sequence) is
// lse_acc[s·split_rows + b·lse_bs + h·lse_hs + qStart + i] (LSE's layout,
// one copy per split), and its O row the D float32 at o_acc + that index·D;
// with pack > 1 (packParams) a block's row r is written at its own head
// and position, so that the combine kernel reads the unpacked layout.
var FwdSplitParams = cat([]Param{
	{"q", ".u64"}, {"k", ".u64"}, {"v", ".u64"}, {"o_acc", ".u64"}, {"lse_acc", ".u64"},
	{"q_bs", ".u64"}, {"k_bs", ".u64"}, {"lse_bs", ".u64"},
	{"q_rs", ".u32"}, {"k_rs", ".u32"}, {"lse_hs", ".u32"},
	{"splits", ".u32"}, {"split_rows", ".u32"},
}, seqParams, scoreParams, packParams)

// CombineParams are the combine kernel's parameters: the partial results
// as FwdSplitParams lays them out, and O (in the input type, the layout of
// FwdParams' o) and LSE (float32, natural log). One warp per (row, head),
// CombineRows rows per block of ElemThreads threads; grid
// (ceil(maxSq/CombineRows), H, B).
var CombineParams = []Param{
	{"o_acc", ".u64"}, {"lse_acc", ".u64"}, {"o", ".u64"}, {"lse", ".u64"},
	{"o_bs", ".u64"}, {"lse_bs", ".u64"},
	{"o_rs", ".u32"}, {"lse_hs", ".u32"},
	{"splits", ".u32"}, {"split_rows", ".u32"},
	{"cu_q", ".u64"}, {"sq", ".u32"},
}

// CombineRows is the number of rows one combine block merges.
const CombineRows = ElemThreads / WarpThreads

// CombineName names the combine kernel of input type dt and head dim d.
func CombineName(dt string, d int) string { return fmt.Sprintf("fwdcombine_%s_d%d", dt, d) }
