package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
)

// ioFlags are the flags of "flashattn io".
type ioFlags struct {
	s          shape
	cacheBytes sizeValue
	density    float64
	seed       uint64
	mode       string
	jsonOut    bool
	runCalls   int
	blockQ     int
	blockK     int
	maxMem     *memlimit.Flag
}

// ioResult is the output of "flashattn io": the counts of
// flashattn.CountTraffic for one problem and cache size.
type ioResult struct {
	Seqlen     int     `json:"seqlen"`
	Headdim    int     `json:"headdim"`
	Batch      int     `json:"batch"`
	Heads      int     `json:"heads"`
	KVHeads    int     `json:"kv_heads"`
	Causal     bool    `json:"causal"`
	Density    float64 `json:"density"` // fraction of visible 128×128 blocks (1: dense)
	Mode       string  `json:"mode"`
	CacheBytes int     `json:"cache_bytes"`
	BlockQ     int     `json:"block_q"`
	BlockK     int     `json:"block_k"`
	// SuperBlockQ is the forward's query super-block (two-level tiling):
	// sequences whose packed K and V exceed half the cache are walked in
	// super-blocks of this many rows, each K/V tile read once per
	// super-block; BlockQ where none is used.
	SuperBlockQ    int `json:"super_block_q"`
	BackwardBlockK int `json:"backward_block_k"`
	// The bytes of the tiles the inner loops hold: the count assumes they
	// fit in the cache.
	ForwardTileBytes  int     `json:"forward_tile_bytes"`
	BackwardTileBytes int     `json:"backward_tile_bytes"`
	FlashBytes        int64   `json:"flash_bytes"`
	StandardBytes     int64   `json:"standard_bytes"`
	Ratio             float64 `json:"flash_over_standard"`
	Flash             ioParts `json:"flash"`
	Standard          ioParts `json:"standard"`
	CallsRun          int     `json:"calls_run,omitempty"`
}

// ioParts is flashattn.TrafficByOperand with JSON names.
type ioParts struct {
	Q      ioBytes `json:"q"`
	K      ioBytes `json:"k"`
	V      ioBytes `json:"v"`
	O      ioBytes `json:"o"`
	LSE    ioBytes `json:"lse"`
	DO     ioBytes `json:"dout"`
	DQ     ioBytes `json:"dq"`
	DK     ioBytes `json:"dk"`
	DV     ioBytes `json:"dv"`
	Scores ioBytes `json:"scores"`
}

type ioBytes struct {
	Read  int64 `json:"read"`
	Write int64 `json:"write"`
}

func partsOf(t flashattn.TrafficByOperand) ioParts {
	b := func(x flashattn.IOBytes) ioBytes { return ioBytes{x.Read, x.Write} }
	return ioParts{b(t.Q), b(t.K), b(t.V), b(t.O), b(t.LSE), b(t.DO), b(t.DQ), b(t.DK), b(t.DV), b(t.Scores)}
}

func runIO(args []string, stdout, stderr io.Writer) error {
	f := ioFlags{maxMem: memlimit.NewFlag("-max-memory"), cacheBytes: sizeValue(flashattn.TileCacheBytes())}
	fs := newFlags("io", stderr, "-seqlen N [-headdim D] [-cache-bytes M] [-causal] [-density S] [-mode fwd|bwd|fwdbwd] [-json]\n\n"+
		"Counts the bytes flashattn's tile loops move between memory and a cache of M bytes, with the tiles sized\n"+
		"for M as the library sizes them for its own cache (the paper's IO complexity, shown: counted by walking\n"+
		"the library's task lists and tiles), and the bytes of the standard algorithm, which materialises the\n"+
		"seqlen × seqlen scores. The model: a loop keeps its own tiles in the cache, everything else comes\n"+
		"from memory each time it is used (exact when the operands are much larger than M).\n")
	fs.IntVar(&f.s.N, "seqlen", 0, "sequence length of queries and keys (required)")
	fs.IntVar(&f.s.D, "headdim", 64, "head dimension")
	fs.IntVar(&f.s.B, "batch", 1, "batch size")
	fs.IntVar(&f.s.H, "heads", 1, "query heads")
	fs.IntVar(&f.s.Hk, "kv-heads", 0, "key/value heads (0: same as heads)")
	fs.Var(&f.cacheBytes, "cache-bytes", "cache `size` M (e.g. 256K, 1M; default: this machine's L2, which the library sizes its tiles for)")
	fs.BoolVar(&f.s.Causal, "causal", false, "causal mask")
	fs.Float64Var(&f.density, "density", 1, "block-sparse: a random mask of 128×128 blocks per head keeping the diagonal, round(S × blocks per row) per row (1: dense)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the -density mask (and of -run-calls' data)")
	fs.StringVar(&f.mode, "mode", "fwd", "fwd, bwd or fwdbwd")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object")
	fs.IntVar(&f.blockQ, "block-q", 0, "query rows per tile, as Options.BlockQ (0: the tile rule for the cache)")
	fs.IntVar(&f.blockK, "block-k", 0, "keys per tile, as Options.BlockK (0: the tile rule for the cache)")
	fs.IntVar(&f.runCalls, "run-calls", 0, "also run the pass(es) this many times on random data, one worker, with the counted tiles "+
		"(Options.CacheBytes = -cache-bytes, key tiles fixed by Options.BlockK, and counted so): to check the count with a cache simulator")
	fs.Var(f.maxMem, "max-memory", "refuse a run whose estimated peak memory exceeds this `size` (default: the memory available now)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	r, err := f.count()
	if err != nil {
		return err
	}
	if f.jsonOut {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "%s N=%d d=%d B=%d H=%d%s, cache %s: tiles %d rows × %d keys, super-blocks of %d rows (backward KV block %d); "+
		"flashattn %s, standard %s (%.3f×)%s\n", r.Mode, r.Seqlen, r.Headdim, r.Batch, r.Heads, maskText(r), bytesString(uint64(r.CacheBytes)),
		r.BlockQ, r.BlockK, r.SuperBlockQ, r.BackwardBlockK, bytesString(uint64(r.FlashBytes)), bytesString(uint64(r.StandardBytes)), r.Ratio, fitText(r))
	return nil
}

// fitText warns when the tiles a pass holds do not fit in the cache (the
// count is then a lower bound).
func fitText(r ioResult) string {
	var over []string
	if r.Mode != "bwd" && r.ForwardTileBytes > r.CacheBytes {
		over = append(over, fmt.Sprintf("the forward's tiles take %s", bytesString(uint64(r.ForwardTileBytes))))
	}
	if r.Mode != "fwd" && r.BackwardTileBytes > r.CacheBytes {
		over = append(over, fmt.Sprintf("the backward's tiles take %s", bytesString(uint64(r.BackwardTileBytes))))
	}
	if over == nil {
		return ""
	}
	return "; " + strings.Join(over, " and ") + ", more than the cache: the loops move more than counted"
}

func maskText(r ioResult) string {
	s := ""
	if r.Causal {
		s += ", causal"
	}
	if r.Density < 1 {
		s += fmt.Sprintf(", block density %.3f", r.Density)
	}
	return s
}

// validate checks every flag, one line per bad one.
func (f *ioFlags) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.s.N < 1 {
		bad("-seqlen %d: must be ≥ 1 (required)", f.s.N)
	}
	for _, v := range []struct {
		name     string
		val, min int
	}{{"-headdim", f.s.D, 1}, {"-batch", f.s.B, 1}, {"-heads", f.s.H, 1}, {"-kv-heads", f.s.Hk, 0}, {"-run-calls", f.runCalls, 0},
		{"-block-q", f.blockQ, 0}, {"-block-k", f.blockK, 0}} {
		if v.val < v.min {
			bad("%s %d: must be ≥ %d", v.name, v.val, v.min)
		}
	}
	if f.s.Hk > 0 && f.s.H%f.s.Hk != 0 {
		bad("-kv-heads %d does not divide -heads %d", f.s.Hk, f.s.H)
	}
	if f.cacheBytes < 1 || f.cacheBytes > 1<<40 {
		bad("-cache-bytes %v: must be between 1 byte and 1T", memlimit.Size(f.cacheBytes))
	}
	if !(f.density > 0 && f.density <= 1) {
		bad("-density %v: want 0 < density ≤ 1", f.density)
	}
	switch f.mode {
	case "fwd", "bwd", "fwdbwd":
	default:
		bad("-mode %q: want fwd, bwd or fwdbwd", f.mode)
	}
	if f.blockQ > 4096 || f.blockK > 4096 {
		bad("-block-q %d, -block-k %d: at most 4096", f.blockQ, f.blockK)
	}
	if f.runCalls > 1000 {
		bad("-run-calls %d: at most 1000", f.runCalls)
	}
	return errors.Join(errs...)
}

// count builds the options, checks the memory, counts, and runs if asked.
func (f *ioFlags) count() (ioResult, error) {
	s := f.s
	if s.Hk == 0 {
		s.Hk = s.H
	}
	var n need
	big := max(memlimit.Mul(s.B, s.N, s.H, s.D, 4), memlimit.Mul(s.B, s.N, s.Hk, s.D, 4))
	n.add("count", big.Times(3)) // CountTraffic's buffer and the packed K and V
	if f.density < 1 {
		nb := s.N/sparseBlock + 1
		n.add("mask", memlimit.Mul(2, s.H, nb, nb))
	}
	if f.runCalls > 0 {
		n.add("run", big.Times(12))
		n.addFlashWork(s.B, s.N, s.N, s.H, s.Hk, s.D, s.D, 1, f.mode != "fwd")
	}
	if err := n.check(f.maxMem.Limit(), fmt.Sprintf("io -seqlen %d -headdim %d", s.N, s.D), "-max-memory overrides"); err != nil {
		return ioResult{}, err
	}
	opts := &flashattn.Options{Causal: s.Causal, Workers: 1, BlockQ: f.blockQ, BlockK: f.blockK}
	density := 1.0
	if f.density < 1 {
		m, err := randomBlockMask(s.H, s.N, f.density, f.seed)
		if err != nil {
			return ioResult{}, fmt.Errorf("-density %v: %v", f.density, cleanErr(err))
		}
		opts.BlockMask, density = m, m.Density()
	}
	pass := map[string]flashattn.Pass{"fwd": flashattn.PassForward, "bwd": flashattn.PassBackward, "fwdbwd": flashattn.PassForwardBackward}[f.mode]
	shape := flashattn.TrafficShape{Batch: s.B, Heads: s.H, KVHeads: s.Hk, SeqQ: s.N, SeqK: s.N, Dim: s.D}
	cache := int(f.cacheBytes)
	t, err := flashattn.CountTraffic(shape, opts, cache, pass)
	if err == nil && f.runCalls > 0 {
		// Run exactly the counted tiles: sized for M (CacheBytes, query
		// super-blocks included) with the key tiles fixed, as the count
		// has them (a call's backward otherwise halves its KV block
		// when it has few), and counted again so.
		opts.CacheBytes, opts.BlockK = cache, t.BlockK
		if t, err = flashattn.CountTraffic(shape, opts, cache, pass); err == nil {
			err = runCalls(s, opts, pass, f.runCalls, f.seed)
		}
	}
	if err != nil {
		return ioResult{}, cleanErr(err)
	}
	r := ioResult{Seqlen: s.N, Headdim: s.D, Batch: s.B, Heads: s.H, KVHeads: s.Hk, Causal: s.Causal, Density: density,
		Mode: f.mode, CacheBytes: cache, BlockQ: t.BlockQ, BlockK: t.BlockK, BackwardBlockK: t.BackwardBlockK,
		SuperBlockQ:      t.SuperBlockQ,
		ForwardTileBytes: t.ForwardTileBytes, BackwardTileBytes: t.BackwardTileBytes,
		FlashBytes: t.Flash.Total(), StandardBytes: t.Standard.Total(), Flash: partsOf(t.Flash), Standard: partsOf(t.Standard),
		CallsRun: f.runCalls}
	r.Ratio = float64(r.FlashBytes) / float64(r.StandardBytes)
	return r, nil
}

// runCalls runs the pass(es) calls times on random data with opts (for a
// cache simulator: run with two call counts and take the difference, so
// that allocating and filling the inputs cancels).
func runCalls(s shape, opts *flashattn.Options, pass flashattn.Pass, calls int, seed uint64) error {
	t, err := newBenchTensors(benchCase{shape: s, Mode: "fwdbwd"}, randomInputs(s, s.N, seed), flashattn.Float32)
	if err != nil {
		return err
	}
	if pass == flashattn.PassBackward { // the backward's inputs
		if err := flashattn.ForwardInto(t.out, t.lse, t.q, t.k, t.v, opts); err != nil {
			return err
		}
	}
	for range calls {
		if pass&flashattn.PassForward != 0 {
			if err := flashattn.ForwardInto(t.out, t.lse, t.q, t.k, t.v, opts); err != nil {
				return err
			}
		}
		if pass&flashattn.PassBackward != 0 {
			if err := flashattn.BackwardInto(t.dq, t.dk, t.dv, t.q, t.k, t.v, t.out, t.do, t.lse, opts); err != nil {
				return err
			}
		}
	}
	return nil
}
