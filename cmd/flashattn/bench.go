package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/internal/plain"
)

// benchCase is one measured configuration.
type benchCase struct {
	shape
	Mode    string // fwd, bwd, fwdbwd, decode
	Variant string // "" or window/softcap/alibi/dropout
	Window  int    // window size (left) for the window variant
}

// benchResult is one line of the table and one JSON object.
type benchResult struct {
	Mode         string  `json:"mode"`
	Variant      string  `json:"variant"`
	Batch        int     `json:"batch"`
	Heads        int     `json:"heads"`
	KVHeads      int     `json:"kv_heads"`
	SeqlenQ      int     `json:"seqlen_q"`
	SeqlenK      int     `json:"seqlen_k"`
	Headdim      int     `json:"headdim"`
	Causal       bool    `json:"causal"`
	Seconds      float64 `json:"seconds"`
	GFlops       float64 `json:"gflops"`
	PeakGFlops   float64 `json:"peak_gflops"`
	PctPeak      float64 `json:"pct_peak"`
	PlainSeconds float64 `json:"plain_seconds,omitempty"`
	Speedup      float64 `json:"speedup,omitempty"`
	ExtraBytes   uint64  `json:"extra_bytes"`
	PlainBytes   uint64  `json:"plain_extra_bytes,omitempty"`
	// Decode only: bytes of K and V read per second, and a plain copy's rate.
	GBps     float64 `json:"gbytes_per_s,omitempty"`
	CopyGBps float64 `json:"copy_gbytes_per_s,omitempty"`
	Kernel   string  `json:"kernel"`
	Workers  int     `json:"workers"`
}

func runBench(args []string, stdout, stderr io.Writer) error {
	var (
		jsonOut, causal, quick, noPlain bool
		svg, mode, variant              string
		s                               shape
		workers, minMillis, window      int
	)
	fs := newFlags("bench", stderr, "[flags]\n\n"+
		"Measures this machine's FP32 FMA peak, flashattn and the plain algorithm in one run and prints\n"+
		"GFLOP/s, % of peak, speedup over plain and extra memory. Without -seqlen it sweeps seqlen\n"+
		"512…16384, headdim 64 and 128, causal and not, modes fwd, bwd and fwdbwd, then the decode\n"+
		"and window cases. With -seqlen it measures the single case given by the flags.\n")
	fs.BoolVar(&jsonOut, "json", false, "print one JSON object per case instead of the table")
	fs.StringVar(&svg, "svg", "", "also draw GFLOP/s against seqlen into this SVG `file`")
	fs.BoolVar(&quick, "quick", false, "sweep only seqlen 512…4096")
	fs.BoolVar(&noPlain, "no-plain", false, "do not run the plain algorithm")
	fs.IntVar(&s.B, "batch", 0, "batch size (0: 16384/seqlen, at least 1)")
	fs.IntVar(&s.H, "heads", 0, "query heads (0: 512/headdim)")
	fs.IntVar(&s.Hk, "kv-heads", 0, "key/value heads (0: same as heads)")
	fs.IntVar(&s.N, "seqlen", 0, "sequence length of a single case (0: sweep)")
	fs.IntVar(&s.D, "headdim", 64, "head dimension of a single case")
	fs.BoolVar(&causal, "causal", false, "causal mask (single case)")
	fs.StringVar(&mode, "mode", "fwd", "single case: fwd, bwd, fwdbwd or decode")
	fs.StringVar(&variant, "variant", "", "single case: window, softcap, alibi or dropout")
	fs.IntVar(&window, "window", 256, "window size for -variant window")
	fs.IntVar(&workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	fs.IntVar(&minMillis, "min-ms", 300, "repeat each measurement for at least this many milliseconds")
	gf := addGPUFlags(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if _, err := gf.check(); err != nil {
		return err
	} else if gf.on() {
		return benchGPU(gf, s, causal, mode, jsonOut, minMillis, stdout)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var cases []benchCase
	if s.N > 0 {
		s.Causal = causal
		switch mode {
		case "fwd", "bwd", "fwdbwd", "decode":
		default:
			return fmt.Errorf("-mode %q: want fwd, bwd, fwdbwd or decode", mode)
		}
		switch variant {
		case "", "window", "softcap", "alibi", "dropout":
		default:
			return fmt.Errorf("-variant %q: want window, softcap, alibi or dropout", variant)
		}
		if s.D < 1 || s.B < 0 || s.H < 0 || s.Hk < 0 || window < 0 {
			return fmt.Errorf("bad shape or window: -headdim %d -batch %d -heads %d -kv-heads %d -window %d", s.D, s.B, s.H, s.Hk, window)
		}
		cases = append(cases, benchCase{shape: defaults(s), Mode: mode, Variant: variant, Window: window})
	} else {
		cases = sweep(quick)
	}
	for _, c := range cases {
		if c.H%c.Hk != 0 {
			return fmt.Errorf("-heads %d is not a multiple of -kv-heads %d", c.H, c.Hk)
		}
	}

	peak := measurePeak(workers)
	copyBW := 0.0
	progress := isTerminal(stderr) && !jsonOut
	var results []benchResult
	for i, c := range cases {
		if progress {
			fmt.Fprintf(stderr, "\r\033[K[%d/%d] %s", i+1, len(cases), c.label())
		}
		if c.Mode == "decode" && copyBW == 0 {
			copyBW = measureCopy(workers)
		}
		r := measure(c, workers, peak, copyBW, !noPlain, time.Duration(minMillis)*time.Millisecond)
		results = append(results, r)
		if jsonOut {
			b, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(b))
		}
	}
	if progress {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if !jsonOut {
		printTable(stdout, results, peak, workers)
	}
	if svg != "" {
		if err := drawSVG(svg, results); err != nil {
			return err
		}
	}
	return nil
}

// defaults fills the paper's benchmark shape: batch·seqlen = 16k tokens and
// heads·headdim = 512, unless given.
func defaults(s shape) shape {
	if s.B == 0 {
		s.B = max(1, 16384/s.N)
	}
	if s.H == 0 {
		s.H = max(1, 512/s.D)
	}
	if s.Hk == 0 {
		s.Hk = s.H
	}
	return s
}

func sweep(quick bool) []benchCase {
	var cases []benchCase
	top := 16384
	if quick {
		top = 4096
	}
	for _, mode := range []string{"fwd", "bwd", "fwdbwd"} {
		for _, d := range []int{64, 128} {
			for _, causal := range []bool{false, true} {
				for n := 512; n <= top; n *= 2 {
					cases = append(cases, benchCase{shape: defaults(shape{N: n, D: d, Causal: causal}), Mode: mode})
				}
			}
		}
	}
	// Decode: one query row against a long KV cache (flash-decoding).
	cases = append(cases, benchCase{shape: shape{B: 1, H: 32, Hk: 8, N: 32768, D: 128}, Mode: "decode"})
	// Training variants beside plain causal at the longest length.
	for _, v := range []string{"window", "softcap", "alibi", "dropout"} {
		cases = append(cases, benchCase{shape: defaults(shape{N: top, D: 64, Causal: true}), Mode: "fwd", Variant: v, Window: 256})
	}
	return cases
}

func (c benchCase) label() string {
	s := fmt.Sprintf("%s b%d h%d n%d d%d", c.Mode, c.B, c.H, c.N, c.D)
	if c.Causal {
		s += " causal"
	}
	if c.Variant != "" {
		s += " " + c.Variant
	}
	return s
}

func (c benchCase) options(workers int) *flashattn.Options {
	o := &flashattn.Options{Causal: c.Causal, Workers: workers}
	switch c.Variant {
	case "window":
		o.Window = &flashattn.Window{Left: c.Window, Right: 0}
		if !c.Causal {
			o.Window.Right = c.Window
		}
	case "softcap":
		o.Softcap = 30
	case "alibi":
		o.ALiBi = make([]float32, c.H)
		for h := range o.ALiBi {
			o.ALiBi[h] = float32(math.Pow(2, -8*float64(h+1)/float64(c.H)))
		}
	case "dropout":
		o.Dropout, o.Seed = 0.1, 1
	}
	return o
}

// visibleFlops counts SPEC §5 FLOPs for the case: 4·B·H·Sq·Sk·D for a
// forward pass, counting only the visible (i, j) pairs under a causal mask
// or a window; backward is 2.5× that, forward+backward 3.5×.
func (c benchCase) visibleFlops(mode string) float64 {
	sq := c.N
	if c.Mode == "decode" {
		sq = 1
	}
	var pairs float64
	switch {
	case c.Variant == "window":
		for i := 0; i < sq; i++ {
			pos := i + c.N - sq
			lo := max(0, pos-c.Window)
			hi := c.N - 1
			if c.Causal {
				hi = pos
			} else {
				hi = min(hi, pos+c.Window)
			}
			pairs += float64(hi - lo + 1)
		}
	case c.Causal && c.Mode != "decode":
		pairs = float64(c.N) * float64(c.N+1) / 2
	default:
		pairs = float64(sq) * float64(c.N)
	}
	f := 4 * float64(c.B*c.H) * pairs * float64(c.D)
	switch mode {
	case "bwd":
		f *= 2.5
	case "fwdbwd":
		f *= 3.5
	}
	return f
}

// timeIt runs f at least once and until min has passed, and returns the
// fastest run and the bytes the first timed run allocated.
func timeIt(min time.Duration, f func()) (best time.Duration, extra uint64) {
	f() // warm up: workspaces, page faults
	var total time.Duration
	for i := 0; ; i++ {
		d, a := allocated(f)
		if i == 0 || d < best {
			best = d
		}
		if i == 0 {
			extra = a
		}
		total += d
		if total >= min {
			return best, extra
		}
	}
}

func measure(c benchCase, workers int, peak, copyBW float64, withPlain bool, minDur time.Duration) benchResult {
	sq := c.N
	if c.Mode == "decode" {
		sq = 1
	}
	in := randomInputs(shape{B: c.B, H: c.H, Hk: c.Hk, N: c.N, D: c.D}, 7)
	q := flashattn.Dense(in.q[:c.B*sq*c.H*c.D], c.B, sq, c.H, c.D)
	k := flashattn.Dense(in.k, c.B, c.N, c.Hk, c.D)
	v := flashattn.Dense(in.v, c.B, c.N, c.Hk, c.D)
	do := flashattn.Dense(in.do[:c.B*sq*c.H*c.D], c.B, sq, c.H, c.D)
	opts := c.options(workers)
	out := flashattn.NewTensor(c.B, sq, c.H, c.D)
	lse := make([]float32, c.B*c.H*sq)
	dq, dk, dv := flashattn.NewTensor(c.B, sq, c.H, c.D), flashattn.NewTensor(c.B, c.N, c.Hk, c.D), flashattn.NewTensor(c.B, c.N, c.Hk, c.D)
	fwd := func() { must(flashattn.ForwardInto(out, lse, q, k, v, opts)) }
	bwd := func() { must(flashattn.BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts)) }
	fwd()
	var run func()
	switch c.Mode {
	case "fwd", "decode":
		run = fwd
	case "bwd":
		run = bwd
	default:
		run = func() { fwd(); bwd() }
	}
	t, extra := timeIt(minDur, run)
	mode := c.Mode
	if mode == "decode" {
		mode = "fwd"
	}
	r := benchResult{Mode: c.Mode, Variant: c.Variant, Batch: c.B, Heads: c.H, KVHeads: c.Hk, SeqlenQ: sq, SeqlenK: c.N,
		Headdim: c.D, Causal: c.Causal, Seconds: t.Seconds(), PeakGFlops: peak, ExtraBytes: extra,
		Kernel: kernel.Select().Name, Workers: workers}
	r.GFlops = c.visibleFlops(mode) / t.Seconds() / 1e9
	r.PctPeak = 100 * r.GFlops / peak
	if c.Mode == "decode" {
		r.GBps = float64(2*4*c.B*c.N*c.Hk*c.D) / t.Seconds() / 1e9
		r.CopyGBps = copyBW
		return r
	}
	// The plain algorithm: standard attention only (no variants), and only
	// where its N×N matrices fit comfortably.
	if withPlain && c.Variant == "" && c.N <= 16384 {
		pp := &plain.Problem{B: c.B, Sq: c.N, Sk: c.N, H: c.H, Hk: c.Hk, D: c.D, Causal: c.Causal, Workers: workers}
		po, _ := pp.Forward(in.q, in.k, in.v)
		var prun func()
		switch c.Mode {
		case "fwd":
			prun = func() { pp.Forward(in.q, in.k, in.v) }
		case "bwd":
			prun = func() { pp.Backward(in.q, in.k, in.v, po, in.do) }
		default:
			prun = func() { pp.Forward(in.q, in.k, in.v); pp.Backward(in.q, in.k, in.v, po, in.do) }
		}
		pt, pextra := timeIt(minDur/3, prun)
		r.PlainSeconds, r.PlainBytes = pt.Seconds(), pextra
		r.Speedup = pt.Seconds() / t.Seconds()
	}
	return r
}

func must(err error) {
	if err != nil {
		panic(err) // inputs are generated here: an error is a bug
	}
}

// measurePeak runs the FMA loop on every worker at once and returns the
// machine's FP32 peak in GFLOP/s.
func measurePeak(workers int) float64 {
	const iters = 20_000_000
	best := 0.0
	for rep := 0; rep < 3; rep++ {
		var wg sync.WaitGroup
		flops := make([]int, workers)
		t0 := time.Now()
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				flops[w] = kernel.FMAPeak(iters)
			}()
		}
		wg.Wait()
		d := time.Since(t0).Seconds()
		total := 0.0
		for _, f := range flops {
			total += float64(f) * iters
		}
		best = max(best, total/d/1e9)
	}
	return best
}

// measureCopy returns the bandwidth of a parallel copy of 64 MiB, counting
// bytes read (the decode kernel's traffic is reads).
func measureCopy(workers int) float64 {
	const n = 16 << 20 // floats: 64 MiB, twice the L3 of current server parts
	src, dst := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = 1
	}
	best := 0.0
	for rep := 0; rep < 5; rep++ {
		var wg sync.WaitGroup
		t0 := time.Now()
		chunk := n / workers
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[w*chunk:(w+1)*chunk], src[w*chunk:(w+1)*chunk])
			}()
		}
		wg.Wait()
		best = max(best, float64(4*n)/time.Since(t0).Seconds()/1e9)
	}
	return best
}

func printTable(w io.Writer, rs []benchResult, peak float64, workers int) {
	fmt.Fprintf(w, "FP32 FMA peak (all %d workers, measured now): %.1f GFLOP/s; kernel %s\n\n", workers, peak, kernel.Select().Name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tvariant\tbatch\theads\tseqlen\theaddim\tcausal\ttime\tGFLOP/s\t% peak\tplain GFLOP/s\tspeedup\textra mem\tplain mem\t")
	for _, r := range rs {
		plainG, speed, pmem := "-", "-", "-"
		if r.PlainSeconds > 0 {
			plainG = fmt.Sprintf("%.1f", r.GFlops*r.Seconds/r.PlainSeconds)
			speed = fmt.Sprintf("%.2fx", r.Speedup)
			pmem = bytesString(r.PlainBytes)
		}
		v := r.Variant
		if v == "" {
			v = "-"
		}
		seq := fmt.Sprint(r.SeqlenK)
		if r.SeqlenQ != r.SeqlenK {
			seq = fmt.Sprintf("%d/%d", r.SeqlenQ, r.SeqlenK)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%v\t%.4fs\t%.1f\t%.0f%%\t%s\t%s\t%s\t%s\t\n", r.Mode, v, r.Batch, r.Heads, seq, r.Headdim,
			r.Causal, r.Seconds, r.GFlops, r.PctPeak, plainG, speed, bytesString(r.ExtraBytes), pmem)
	}
	tw.Flush()
	for _, r := range rs {
		if r.Mode == "decode" {
			fmt.Fprintf(w, "\ndecode (1 query row, seqlen_k %d, %d KV heads, headdim %d): K+V read at %.1f GB/s = %.0f%% of a plain copy's %.1f GB/s\n",
				r.SeqlenK, r.KVHeads, r.Headdim, r.GBps, 100*r.GBps/r.CopyGBps, r.CopyGBps)
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && !strings.Contains(os.Getenv("TERM"), "dumb")
}
