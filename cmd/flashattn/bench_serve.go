package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/kernel"
)

// bench_serve.go is "bench -mode serve": one step of a serving engine's
// continuous batching (vLLM's scheduler) — decode rows over long caches,
// a prompt chunk over a cached prefix and speculative-decoding
// verification rows — as one VarLen call over a paged KV cache, against
// the same work as one call per kind and one call per sequence, with the
// step's roofline measured in the same run.

// serveFlags shape the serve step.
type serveFlags struct {
	decode         int // decode rows (one new token each)
	ctxMin, ctxMax int // their cached keys, spread evenly
	chunk, prefix  int // the prompt chunk's tokens and its cached prefix
	spec, specToks int // sequences verifying specToks speculative tokens each (over ctxMin keys)
	block          int // page size of the cache
}

func (s *serveFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&s.decode, "serve-decode", 32, "-mode serve: decode rows (sequences generating one token each)")
	fs.IntVar(&s.ctxMin, "serve-ctx-min", 1024, "-mode serve: cached keys of the shortest decode row (the rows spread evenly up to -serve-ctx-max; "+
		"4096 and 32768 are a long-context server's, if memory allows)")
	fs.IntVar(&s.ctxMax, "serve-ctx-max", 8192, "-mode serve: cached keys of the longest decode row")
	fs.IntVar(&s.chunk, "serve-chunk", 512, "-mode serve: tokens of the prompt chunk being prefilled")
	fs.IntVar(&s.prefix, "serve-prefix", 2048, "-mode serve: cached prefix of the prompt chunk")
	fs.IntVar(&s.spec, "serve-spec", 4, "-mode serve: sequences verifying speculative tokens (over -serve-ctx-min cached keys)")
	fs.IntVar(&s.specToks, "serve-spec-tokens", 4, "-mode serve: speculative tokens each of them verifies")
	fs.IntVar(&s.block, "serve-block", 64, "-mode serve: page size of the paged KV cache, a multiple of 16")
}

// validate checks the serve flags (only with -mode serve).
func (s *serveFlags) validate(bad func(string, ...any)) {
	for _, v := range []struct {
		name     string
		val, min int
	}{{"-serve-decode", s.decode, 0}, {"-serve-ctx-min", s.ctxMin, 0}, {"-serve-ctx-max", s.ctxMax, s.ctxMin}, {"-serve-chunk", s.chunk, 0},
		{"-serve-prefix", s.prefix, 0}, {"-serve-spec", s.spec, 0}, {"-serve-spec-tokens", s.specToks, 1}, {"-serve-block", s.block, 16}} {
		if v.val < v.min {
			bad("%s %d: must be ≥ %d", v.name, v.val, v.min)
		}
	}
	if s.block%16 != 0 {
		bad("-serve-block %d: must be a multiple of 16", s.block)
	}
	if s.decode+s.spec == 0 && s.chunk == 0 {
		bad("-mode serve: the step has no tokens (give -serve-decode, -serve-chunk or -serve-spec)")
	}
}

// serveSeq is one sequence of the step: cached keys and new tokens (each
// a query row and a new key).
type serveSeq struct {
	kind     int // serveDecode, servePrefill, serveSpec
	ctx, new int
}

const (
	serveDecode = iota
	servePrefill
	serveSpec
)

// seqs lists the step's sequences, decode rows first, then the prompt
// chunk, then the speculative ones.
func (s *serveFlags) seqs() []serveSeq {
	var seqs []serveSeq
	for i := range s.decode {
		ctx := s.ctxMin
		if s.decode > 1 {
			ctx += (s.ctxMax - s.ctxMin) * i / (s.decode - 1)
		}
		seqs = append(seqs, serveSeq{serveDecode, ctx, 1})
	}
	if s.chunk > 0 {
		seqs = append(seqs, serveSeq{servePrefill, s.prefix, s.chunk})
	}
	for range s.spec {
		seqs = append(seqs, serveSeq{serveSpec, s.ctxMin, s.specToks})
	}
	return seqs
}

// serveResult is what -mode serve reports (one JSON object with -json).
type serveResult struct {
	Mode, DType, Kernel, CPU       string
	Heads, KVHeads, Headdim, Block int
	Workers, Reps                  int
	Decode, CtxMin, CtxMax         int
	Chunk, Prefix, Spec, SpecToks  int
	Tokens                         int     // new tokens per step
	CacheBytes                     float64 // bytes of the cache the step reads (and appends)
	PrefillFlops                   float64 // the prompt chunk's visible products, 2·(D+DV) per pair
	ReadGBs, PeakGFlops            spread  // measured beside the calls
	RooflineSeconds                float64 // CacheBytes at ReadGBs plus PrefillFlops at PeakGFlops (medians)
	PeakPath                       string
	// ComputeRooflineSeconds is the compute-aware roofline: per sequence
	// the larger of its cache bytes at ReadGBs and its FLOPs (every
	// visible product, the decode rows' too) at PeakGFlops, summed. Decode
	// rows with many query heads per KV head do more FLOPs per cache byte
	// than the machine's balance (PeakGFlops/ReadGBs): RooflineSeconds
	// is then out of reach, this one is not.
	ComputeRooflineSeconds float64
	Balance                float64     // PeakGFlops/ReadGBs (medians): FLOPs per byte read at which a part turns compute-bound
	Parts                  []servePart // per kind of sequence, what bounds it
	Runs                   []serveRun
	Order                  [][]int // the runs (indexes of Runs) in the order each repetition timed them, after the meters
}

// serveRun is one way to run the step.
type serveRun struct {
	Name      string
	Calls     int    // calls per step
	Seconds   spread // per step
	TokensSec float64
	Roofline  float64 // fraction of the roofline (median)
	VsMixed   float64 // time over the mixed call's (median)
	// ComputeRoofline is the fraction of the compute-aware roofline
	// (ComputeRooflineSeconds over the median time).
	ComputeRoofline float64
}

// servePart is one kind of sequence of the step and what bounds it.
type servePart struct {
	Kind            string
	Seqs            int
	CacheBytes      float64 // its sequences' cache bytes (as CacheBytes)
	Flops           float64 // their visible products, 2·(D+DV) per query head and pair
	Intensity       float64 // Flops/CacheBytes, FLOPs per byte
	RooflineSeconds float64 // their share of ComputeRooflineSeconds
	ComputeBound    int     // sequences whose FLOPs at the peak take longer than their bytes at the read bandwidth
}

// serveKinds names the kinds of sequence in the report.
var serveKinds = [...]string{serveDecode: "decode rows", servePrefill: "prompt chunk", serveSpec: "speculative rows"}

// serveBench holds the step's tensors and the three ways to run it.
type serveBench struct {
	k, v  flashattn.Tensor
	runs  []func() error
	names []string
	calls []int
}

// runServe measures the serve step.
func (f *benchFlags) runServe(stdout, stderr io.Writer) error {
	s := f.s
	if s.H == 0 {
		s.H = 32
	}
	if s.Hk == 0 {
		s.Hk = min(4, s.H)
	}
	if !f.set["headdim"] {
		s.D = 128
	}
	if s.H%s.Hk != 0 {
		return fmt.Errorf("-kv-heads %d does not divide -heads %d", s.Hk, s.H)
	}
	if quantized(f.dt) && s.D%32 != 0 {
		return fmt.Errorf("-dtype %s needs a -headdim that is a multiple of 32, not %d", dtypeName(f.dt), s.D)
	}
	sf := f.serve
	seqs := sf.seqs()
	blocks, perSeq := 0, 0
	for _, q := range seqs {
		n := (q.ctx + q.new + sf.block - 1) / sf.block
		blocks, perSeq = blocks+n, max(perSeq, n)
	}
	// Memory: the cache (k and v), q, out and the new keys; the bandwidth
	// buffers beside them.
	var n need
	n.add("cache", typedBytes(f.dt, 2*blocks, sf.block, s.Hk, s.D))
	tokens := 0
	for _, q := range seqs {
		tokens += q.new
	}
	n.floats("inputs", 3*tokens, s.H, s.D)
	limit := f.maxMem.Limit()
	if err := n.check(limit, "-mode serve", "-max-memory overrides; -serve-ctx-max, -kv-heads and -dtype shrink the cache"); err != nil {
		return err
	}
	room := memlimit.Inf
	if limit.Known() {
		room = limit.Bytes - min(limit.Bytes, n.total())
	}
	bwSize := memlimit.Size(f.bwSize)
	if bwSize == 0 {
		bwSize = bandwidthBuffer(readLLC(os.DirFS("/sys")), room)
	}
	if bwSize == 0 {
		return errors.New("-mode serve: the bandwidth buffers do not fit in memory beside the cache (-bw-size)")
	}
	sb, err := newServeBench(s, f.dt, sf, seqs, blocks, perSeq, f.workers)
	if err != nil {
		return err
	}
	bw := newBandwidth(bwSize, f.workers)
	minDur := time.Duration(f.minMillis) * time.Millisecond
	target := min(max(minDur/4, 2*time.Millisecond), 50*time.Millisecond)
	isa := kernel.Active().Impl.Name
	meter := newPeakMeter(isa, f.workers, target)
	if is16(f.dt) {
		h := kernel.Active().Half(elemOf(f.dt))
		meter = newLoopMeter(h.Name, h.Peak, f.workers, target)
	}
	for i, run := range sb.runs {
		if err := run(); err != nil { // warm, and check
			return fmt.Errorf("-mode serve, %s: %v", sb.names[i], err)
		}
		var callErr error
		sb.calls[i] = callsFor(func() { callErr = errors.Join(callErr, run()) }, minDur)
		if callErr != nil {
			return fmt.Errorf("-mode serve, %s: %v", sb.names[i], callErr)
		}
	}
	secs := make([][]float64, len(sb.runs))
	var peaks, reads []float64
	var order [][]int
	for rep := range f.reps {
		peaks, reads = append(peaks, meter.measure()), append(reads, bw.read())
		order = append(order, runOrder(rep, len(sb.runs)))
		for _, i := range order[rep] {
			run := sb.runs[i]
			var callErr error
			secs[i] = append(secs[i], timeCalls(func() { callErr = errors.Join(callErr, run()) }, sb.calls[i]))
			if callErr != nil {
				return fmt.Errorf("-mode serve, %s: %v", sb.names[i], callErr)
			}
		}
	}
	r := serveResult{Mode: "serve", DType: dtypeName(f.dt), Kernel: isa, CPU: cpuName(), Heads: s.H, KVHeads: s.Hk, Headdim: s.D, Block: sf.block,
		Workers: f.workers, Reps: f.reps, Decode: sf.decode, CtxMin: sf.ctxMin, CtxMax: sf.ctxMax, Chunk: sf.chunk, Prefix: sf.prefix,
		Spec: sf.spec, SpecToks: sf.specToks, Tokens: tokens, PeakPath: meter.isa, Order: order,
		ReadGBs: summarize(reads), PeakGFlops: summarize(peaks)}
	r.rooflines(seqs, s, f.dt)
	mixed := summarize(secs[0]).Median
	for i := range sb.runs {
		sp := summarize(secs[i])
		r.Runs = append(r.Runs, serveRun{Name: sb.names[i], Calls: sb.stepCalls(i, seqs), Seconds: sp, TokensSec: float64(tokens) / sp.Median,
			Roofline: r.RooflineSeconds / sp.Median, VsMixed: sp.Median / mixed, ComputeRoofline: r.ComputeRooflineSeconds / sp.Median})
	}
	if f.jsonOut {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	printServe(stdout, r)
	return nil
}

// rooflines sets the step's cache bytes, prefill FLOPs and both
// rooflines from the measured read bandwidth and peak (medians), and the
// parts: per kind of sequence, its bytes, FLOPs and what bounds it. A
// sequence's FLOPs are 2·(D+DV) per query head and visible (query, key)
// pair, causal from the bottom-right: new·ctx + new·(new+1)/2 pairs.
func (r *serveResult) rooflines(seqs []serveSeq, s shape, dt flashattn.DType) {
	bw, peak := r.ReadGBs.Median*1e9, r.PeakGFlops.Median*1e9
	if peak > 0 {
		r.Balance = peak / bw
	}
	at := map[int]int{} // kind -> index in r.Parts
	for _, q := range seqs {
		bytes := float64(q.ctx+q.new) * float64(s.Hk) * float64(2*s.D) * storedBytes(dt)
		pairs := float64(q.new)*float64(q.ctx) + float64(q.new)*float64(q.new+1)/2
		flops := 2 * float64(2*s.D) * float64(s.H) * pairs
		r.CacheBytes += bytes
		if q.kind == servePrefill {
			r.PrefillFlops += flops
		}
		i, ok := at[q.kind]
		if !ok {
			i = len(r.Parts)
			at[q.kind] = i
			r.Parts = append(r.Parts, servePart{Kind: serveKinds[q.kind]})
		}
		p := &r.Parts[i]
		p.Seqs++
		p.CacheBytes += bytes
		p.Flops += flops
		secs := bytes / bw
		if peak > 0 && flops/peak > secs {
			secs = flops / peak
			p.ComputeBound++
		}
		p.RooflineSeconds += secs
		r.ComputeRooflineSeconds += secs
	}
	for i := range r.Parts {
		r.Parts[i].Intensity = r.Parts[i].Flops / r.Parts[i].CacheBytes
	}
	r.RooflineSeconds = r.CacheBytes / bw
	if peak > 0 {
		r.RooflineSeconds += r.PrefillFlops / peak
	}
}

// runOrder is the order of the runs in repetition rep: rotated by one
// each repetition, so that every run follows the peak and bandwidth meters
// (which leave the caches full of their buffers and the cores hot) as
// often as the others, rather than the mixed call always.
func runOrder(rep, n int) []int {
	order := make([]int, n)
	for k := range order {
		order[k] = (rep + k) % n
	}
	return order
}

// stepCalls is the number of attention calls run i makes per step.
func (sb *serveBench) stepCalls(i int, seqs []serveSeq) int {
	switch i {
	case 0:
		return 1
	case 1:
		kinds := map[int]bool{}
		for _, q := range seqs {
			kinds[q.kind] = true
		}
		return len(kinds)
	}
	return len(seqs)
}

// newServeBench builds the paged cache (random, in dt), the packed q and
// new keys, and the three runs: one VarLen call, one dense call per kind
// of sequence, one call per sequence. Every run appends the step's new
// keys at the same positions, so that each call does the same work.
func newServeBench(s shape, dt flashattn.DType, sf serveFlags, seqs []serveSeq, blocks, perSeq, workers int) (*serveBench, error) {
	r := rand.New(rand.NewPCG(27, 1))
	sb := &serveBench{k: flashattn.NewTensorOf(dt, blocks, sf.block, s.Hk, s.D), v: flashattn.NewTensorOf(dt, blocks, sf.block, s.Hk, s.D)}
	const chunk = 256 // blocks converted at a time: no float32 copy of the whole cache
	for _, c := range []flashattn.Tensor{sb.k, sb.v} {
		for b0 := 0; b0 < blocks; b0 += chunk {
			nb := min(chunk, blocks-b0)
			src := flashattn.NewTensor(nb, sf.block, s.Hk, s.D)
			for i := range src.Data {
				src.Data[i] = float32(r.NormFloat64())
			}
			if err := flashattn.Convert(batchRange(c, b0, nb), src); err != nil {
				return nil, err
			}
		}
	}
	// The page table: each sequence its own blocks, in order; unused
	// entries point at block 0 (never read).
	table := make([]int32, len(seqs)*perSeq)
	next := 0
	cuQ, lens := []int32{0}, make([]int32, len(seqs))
	for i, q := range seqs {
		for j := range (q.ctx + q.new + sf.block - 1) / sf.block {
			table[i*perSeq+j] = int32(next)
			next++
		}
		cuQ = append(cuQ, cuQ[i]+int32(q.new))
		lens[i] = int32(q.ctx)
	}
	total := int(cuQ[len(seqs)])
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	q, kn, vn := rnd(total*s.H*s.D), rnd(total*s.Hk*s.D), rnd(total*s.Hk*s.D)
	out, lse := make([]float32, total*s.H*s.D), make([]float32, total*s.H)
	// call is one dense call on sequences [a, b), all with n new tokens.
	call := func(a, b, n int) func() error {
		nb, row0 := b-a, int(cuQ[a])
		o := &flashattn.Options{Causal: true, Workers: workers, KVCache: &flashattn.KVCache{SeqLens: lens[a:b],
			BlockTable: table[a*perSeq : b*perSeq], BlocksPerSeq: perSeq,
			KNew: flashattn.Dense(kn[row0*s.Hk*s.D:(row0+nb*n)*s.Hk*s.D], nb, n, s.Hk, s.D),
			VNew: flashattn.Dense(vn[row0*s.Hk*s.D:(row0+nb*n)*s.Hk*s.D], nb, n, s.Hk, s.D)}}
		qt := flashattn.Dense(q[row0*s.H*s.D:(row0+nb*n)*s.H*s.D], nb, n, s.H, s.D)
		ot := flashattn.Dense(out[row0*s.H*s.D:(row0+nb*n)*s.H*s.D], nb, n, s.H, s.D)
		l := lse[row0*s.H : (row0+nb*n)*s.H]
		return func() error { return flashattn.ForwardInto(ot, l, qt, sb.k, sb.v, o) }
	}
	mixed := &flashattn.Options{Causal: true, Workers: workers, VarLen: &flashattn.VarLen{CuSeqlensQ: cuQ},
		KVCache: &flashattn.KVCache{SeqLens: lens, BlockTable: table, BlocksPerSeq: perSeq, CuSeqlensKNew: cuQ,
			KNew: flashattn.Dense(kn, 1, total, s.Hk, s.D), VNew: flashattn.Dense(vn, 1, total, s.Hk, s.D)}}
	qm, om := flashattn.Dense(q, 1, total, s.H, s.D), flashattn.Dense(out, 1, total, s.H, s.D)
	var perKind, perSeqCalls []func() error
	for a := 0; a < len(seqs); {
		b := a
		for b < len(seqs) && seqs[b].kind == seqs[a].kind {
			b++
		}
		perKind = append(perKind, call(a, b, seqs[a].new))
		a = b
	}
	for i, q := range seqs {
		perSeqCalls = append(perSeqCalls, call(i, i+1, q.new))
	}
	all := func(fs []func() error) func() error {
		return func() error {
			for _, f := range fs {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	sb.runs = []func() error{func() error { return flashattn.ForwardInto(om, lse, qm, sb.k, sb.v, mixed) }, all(perKind), all(perSeqCalls)}
	sb.names = []string{"one mixed call (VarLen + KVCache)", "one call per kind", "one call per sequence"}
	sb.calls = make([]int, len(sb.runs))
	return sb, nil
}

// batchRange is batch elements b0..b0+n-1 of a dense tensor t.
func batchRange(t flashattn.Tensor, b0, n int) flashattn.Tensor {
	per := t.Seq * t.Heads * t.Dim
	lo, hi := b0*per, (b0+n)*per
	u := t
	u.Batch = n
	switch {
	case t.Data != nil:
		u.Data = t.Data[lo:hi]
	case t.BF16 != nil:
		u.BF16 = t.BF16[lo:hi]
	case t.F16 != nil:
		u.F16 = t.F16[lo:hi]
	case t.Q8 != nil:
		u.Q8 = t.Q8[kernel.Q8RowBytes(lo):kernel.Q8RowBytes(hi)]
	case t.Q4 != nil:
		u.Q4 = t.Q4[kernel.Q4RowBytes(lo):kernel.Q4RowBytes(hi)]
	}
	return u
}

// printServe prints the serve step's table.
func printServe(w io.Writer, r serveResult) {
	fmt.Fprintf(w, "serve step on %s (kernel %s, %d workers, %d reps): %d decode rows over %d–%d cached keys, a %d-token prompt chunk over %d, %d×%d speculative tokens\n",
		r.CPU, r.Kernel, r.Workers, r.Reps, r.Decode, r.CtxMin, r.CtxMax, r.Chunk, r.Prefix, r.Spec, r.SpecToks)
	fmt.Fprintf(w, "heads %d, kv heads %d, headdim %d, %s cache in pages of %d: %.1f MB read, %.2f GFLOP of prefill, %d new tokens\n",
		r.Heads, r.KVHeads, r.Headdim, r.DType, r.Block, r.CacheBytes/1e6, r.PrefillFlops/1e9, r.Tokens)
	fmt.Fprintf(w, "roofline %.2f ms: the cache at the read bandwidth %s GB/s + the prefill at the %s peak %s GFLOP/s\n",
		r.RooflineSeconds*1e3, r.ReadGBs.format("%.1f", 1, ""), r.PeakPath, r.PeakGFlops.format("%.0f", 1, ""))
	fmt.Fprintf(w, "compute-aware roofline %.2f ms: per sequence the larger of its cache at the read bandwidth and its FLOPs at the peak, summed (balance %.1f FLOP/byte)\n",
		r.ComputeRooflineSeconds*1e3, r.Balance)
	for _, p := range r.Parts {
		bound := "memory-bound"
		switch {
		case p.ComputeBound == p.Seqs:
			bound = "compute-bound"
		case p.ComputeBound > 0:
			bound = fmt.Sprintf("%d of %d compute-bound", p.ComputeBound, p.Seqs)
		}
		fmt.Fprintf(w, "  %-17s %4d: %9.1f MB, %8.2f GFLOP, %5.1f FLOP/byte: %s, %.2f ms\n",
			p.Kind, p.Seqs, p.CacheBytes/1e6, p.Flops/1e9, p.Intensity, bound, p.RooflineSeconds*1e3)
	}
	fmt.Fprintf(w, "%-36s %6s  %-28s %12s %9s %11s %9s\n", "run", "calls", "ms per step", "tokens/s", "roofline", "compute rf", "vs mixed")
	for _, x := range r.Runs {
		fmt.Fprintf(w, "%-36s %6d  %-28s %12.0f %8.0f%% %10.0f%% %8.2f×\n", x.Name, x.Calls, x.Seconds.format("%.2f", 1e3, ""), x.TokensSec,
			100*x.Roofline, 100*x.ComputeRoofline, x.VsMixed)
	}
}

// cpuName is the CPU's model name from /proc/cpuinfo (Linux), or the
// architecture where it cannot be read.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
