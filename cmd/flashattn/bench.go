package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/kernel"
)

// benchCase is one measured configuration.
type benchCase struct {
	shape
	Mode    string          // fwd, bwd, fwdbwd, decode
	Variant string          // "" or window/softcap/alibi/dropout/block-sparse
	Window  int             // window size (left) for the window variant
	Density float64         // block density for the block-sparse variant
	DType   flashattn.DType // of flashattn's tensors (the cache's, for decode)

	mask *flashattn.BlockMask // block-sparse: built by measure (see blockMask)

	plain     bool   // also run the plain algorithm
	plainSkip string // why plain is not run, when it is not ("" if it is, or never would be)
	f32       bool   // also run float32 flashattn (DType is not float32)
}

// benchFlags are the flags of "flashattn bench".
type benchFlags struct {
	jsonOut, causal, quick, noPlain bool
	noF32                           bool
	svg, mode, variant              string
	s                               shape
	workers, minMillis, window      int
	density                         float64
	reps                            int
	maxMem                          *memlimit.Flag
	bwSize                          sizeValue
	gpu                             *gpuFlags
	serve                           serveFlags
	dt                              flashattn.DType
	set                             map[string]bool // flags given on the command line
}

// sizeValue is a flag holding a size such as "64M" (0: unset).
type sizeValue memlimit.Size

func (v *sizeValue) String() string {
	if *v == 0 {
		return ""
	}
	return memlimit.Size(*v).String()
}

func (v *sizeValue) Set(s string) error {
	n, err := memlimit.ParseSize(s)
	*v = sizeValue(n)
	return err
}

func runBench(args []string, stdout, stderr io.Writer) error {
	f := benchFlags{maxMem: memlimit.NewFlag("-max-memory")}
	fs := newFlags("bench", stderr, "[flags]\n\n"+
		"Measures flashattn and the plain algorithm, interleaved with the FP32 FMA peak of the kernel path\n"+
		"that runs, in -reps repetitions, and prints medians with their range: GFLOP/s, fraction of the\n"+
		"peak, speedup over plain, extra memory. Without -seqlen it sweeps seqlen 512…16384, headdim 64\n"+
		"and 128, causal and not, modes fwd, bwd and fwdbwd, then the decode and training-variant cases and\n"+
		"block-sparse forward+backward at densities 0.05, 0.1, 0.2 and 0.5;\n"+
		"-mode, -headdim, -causal, -variant and -density then select among them and -batch, -heads, -kv-heads\n"+
		"override their shapes. With -seqlen it measures the single case given by the flags.\n"+
		"With -dtype bf16 or f16 flashattn runs on tensors of that type (the random inputs rounded to it),\n"+
		"float32 flashattn runs beside it, and the peak of the 16-bit product path is measured beside the\n"+
		"FP32 FMA peak; the plain algorithm stays float32. Decode reports the bytes the cache stores per type.\n"+
		"-v-headdim gives V (and O, dO) another head dim than Q and K (MLA); FLOPs count 2·(D+DV) per visible\n"+
		"pair forward and 2·(3D+2DV) backward (4·D and 10·D, the usual rule, when DV = D). A decode case\n"+
		"with -v-headdim < -headdim reads an MLA latent cache: one -headdim-wide row per token and KV head, V\n"+
		"being a view of its first -v-headdim columns, so the bytes per token are those of that one row.\n"+
		"Decode also reports whether the step is bound by the read bandwidth or by the peak of its product path.\n")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON object per case instead of the table")
	fs.StringVar(&f.svg, "svg", "", "also draw GFLOP/s against seqlen (median, min–max bars) into this SVG (or PNG) `file`")
	fs.BoolVar(&f.quick, "quick", false, "sweep only seqlen 512…4096")
	fs.BoolVar(&f.noPlain, "no-plain", false, "do not run the plain algorithm")
	fs.BoolVar(&f.noF32, "no-f32", false, "with a -dtype other than f32: do not run float32 flashattn beside it")
	fs.IntVar(&f.s.B, "batch", 0, "batch size (0: 16384/seqlen, at least 1)")
	fs.IntVar(&f.s.H, "heads", 0, "query heads (0: 512/headdim)")
	fs.IntVar(&f.s.Hk, "kv-heads", 0, "key/value heads (0: same as heads)")
	fs.IntVar(&f.s.N, "seqlen", 0, "sequence length of a single case (0: sweep)")
	fs.IntVar(&f.s.D, "headdim", 64, "head dimension")
	fs.IntVar(&f.s.DV, "v-headdim", 0, "V's head dimension, also O's and dO's (0: -headdim); with -mode decode and less than -headdim, "+
		"an MLA latent cache whose first -v-headdim columns are V")
	fs.BoolVar(&f.causal, "causal", false, "causal mask")
	fs.StringVar(&f.mode, "mode", "fwd", "fwd, bwd, fwdbwd, decode or serve (one continuous-batching step: see -serve-*)")
	fs.StringVar(&f.variant, "variant", "", "window, softcap, alibi, dropout or block-sparse")
	fs.IntVar(&f.window, "window", 256, "window size for -variant window")
	fs.Float64Var(&f.density, "density", 0.1, "block density `S` for -variant block-sparse: non-causal, 128×128 blocks, per head a random mask "+
		"holding the diagonal block and round(S × blocks per row) − 1 others in every row of blocks (without -seqlen: selects the sweep's density)")
	f.serve.register(fs)
	fs.IntVar(&f.workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	fs.IntVar(&f.reps, "reps", 5, "repetitions of every measurement, interleaved with the peak; medians and ranges are reported")
	fs.IntVar(&f.minMillis, "min-ms", 200, "time each repetition of a measurement for at least this many milliseconds")
	fs.Var(f.maxMem, "max-memory", "refuse cases whose estimated peak memory exceeds this `size` (e.g. 512M, 4G; default: the memory available now)")
	fs.Var(&f.bwSize, "bw-size", "`size` of each of the two bandwidth buffers for decode (default: 4× the last-level cache, at least 256M)")
	f.gpu = addGPUFlags(fs, "element `type` of flashattn's tensors: f32, bf16, f16, or q8_0, q4_0, fp8_e4m3 or fp8_e5m2 as the cache type of -mode decode "+
		"(default f32; with -device gpu bf16 or f16, default bf16); the plain algorithm stays float32", true)
	var err error
	if f.set, err = parseSet(fs, args, stderr); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.gpu.check(); err != nil {
		return err
	} else if f.gpu.on() {
		return benchGPU(f.gpu, f.s, f.causal, f.mode, f.jsonOut, f.minMillis, stdout)
	}
	if f.workers == 0 {
		f.workers = runtime.GOMAXPROCS(0)
	}
	if f.mode == "serve" {
		return f.runServe(stdout, stderr)
	}
	cases := f.cases()
	if len(cases) == 0 {
		return errors.New("no case of the sweep matches -mode, -headdim, -causal and -variant")
	}
	for _, c := range cases {
		if c.H%c.Hk != 0 {
			return fmt.Errorf("-kv-heads %d does not divide the %d heads of case %s (give -heads)", c.Hk, c.H, c.label())
		}
	}
	if f.svg != "" && !drawable(cases) {
		return fmt.Errorf("-svg %s: the figure needs sweep cases of modes fwd, bwd or fwdbwd without -variant", f.svg)
	}
	cache := readLLC(os.DirFS("/sys"))
	bwSize, err := f.plan(cases, cache)
	if err != nil {
		return err
	}
	return f.measureAll(cases, bwSize, cache, stdout, stderr)
}

// validate checks every flag and reports every bad one, one line each,
// before anything is measured.
func (f *benchFlags) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch f.mode {
	case "fwd", "bwd", "fwdbwd", "decode":
	case "serve":
		f.serve.validate(bad)
		for _, name := range []string{"seqlen", "batch", "v-headdim", "variant", "causal", "svg", "quick", "no-plain", "no-f32"} {
			if f.set[name] {
				bad("-%s is not used with -mode serve", name)
			}
		}
	default:
		bad("-mode %q: want fwd, bwd, fwdbwd, decode or serve", f.mode)
	}
	switch f.variant {
	case "", "window", "softcap", "alibi", "dropout", "block-sparse":
	default:
		bad("-variant %q: want window, softcap, alibi, dropout or block-sparse", f.variant)
	}
	switch {
	case !(f.density > 0 && f.density <= 1):
		bad("-density %v: want 0 < density ≤ 1", f.density)
	case f.set["density"] && f.variant != "block-sparse":
		bad("-density needs -variant block-sparse")
	}
	if f.variant == "block-sparse" && f.causal {
		bad("-variant block-sparse is not causal: drop -causal")
	}
	// -device, -deterministic and -dtype for that device.
	if err := f.gpu.check(); err != nil {
		errs = append(errs, err)
	}
	if !f.gpu.on() {
		dt, err := f.gpu.cpuType()
		switch {
		case err != nil: // reported by check
		case quantized(dt) && f.mode != "decode" && f.mode != "serve":
			bad("-dtype %s is a KV-cache type: it needs -mode decode or serve", dtypeName(dt))
		case f.s.D%dtypeBlock(dt) != 0 && (f.s.N > 0 || f.set["headdim"]):
			bad("-dtype %s needs a -headdim that is a multiple of %d (it quantises blocks of %[2]d values), not %d", dtypeName(dt), dtypeBlock(dt), f.s.D)
		}
		if quantized(dt) && f.mode == "decode" && f.s.DV%dtypeBlock(dt) != 0 && f.s.DV > 0 {
			bad("-dtype %s needs a -v-headdim that is a multiple of %d (it quantises blocks of %[2]d values), not %d", dtypeName(dt), dtypeBlock(dt), f.s.DV)
		}
		f.dt = dt
	}
	for _, v := range []struct {
		name string
		val  int
		min  int
	}{
		{"-headdim", f.s.D, 1}, {"-v-headdim", f.s.DV, 0}, {"-batch", f.s.B, 0}, {"-heads", f.s.H, 0}, {"-kv-heads", f.s.Hk, 0},
		{"-seqlen", f.s.N, 0}, {"-window", f.window, 0}, {"-workers", f.workers, 0}, {"-reps", f.reps, 1},
		{"-min-ms", f.minMillis, 0},
	} {
		if v.val < v.min {
			bad("%s %d: must be ≥ %d", v.name, v.val, v.min)
		}
	}
	if f.reps > 1000 {
		bad("-reps %d: at most 1000", f.reps)
	}
	if f.minMillis > 600_000 {
		bad("-min-ms %d: at most 600000 (10 minutes)", f.minMillis)
	}
	if f.s.H > 0 && f.s.Hk > 0 && f.s.H%f.s.Hk != 0 {
		bad("-heads %d is not a multiple of -kv-heads %d", f.s.H, f.s.Hk)
	}
	if f.svg != "" {
		if st, err := os.Stat(filepath.Dir(f.svg)); err != nil || !st.IsDir() {
			bad("-svg %s: directory %s does not exist", f.svg, filepath.Dir(f.svg))
		}
	}
	if f.gpu.on() {
		// The GPU's benchmark measures the shape, -causal and -mode of
		// its own sweep or of one case: the other flags would be ignored.
		for _, name := range []string{"quick", "no-plain", "no-f32", "variant", "window", "density", "workers", "reps",
			"max-memory", "bw-size", "svg", "v-headdim"} {
			if f.set[name] {
				bad("-%s is not used with -device gpu", name)
			}
		}
		if f.mode == "decode" || f.mode == "serve" {
			bad("-mode %s is not measured with -device gpu (want fwd, bwd or fwdbwd)", f.mode)
		}
	}
	return errors.Join(errs...)
}

// cases returns the single case, or the sweep cases that match the flags
// given explicitly.
func (f *benchFlags) cases() []benchCase {
	override := func(s shape) shape {
		if f.set["batch"] && f.s.B > 0 {
			s.B = f.s.B
		}
		if f.set["heads"] && f.s.H > 0 {
			s.H = f.s.H
		}
		if f.set["kv-heads"] && f.s.Hk > 0 {
			s.Hk = f.s.Hk
		} else if f.set["heads"] && f.s.H > 0 {
			s.Hk = s.H
		}
		return s
	}
	var cases []benchCase
	if f.s.N > 0 {
		s := f.s
		s.Causal = f.causal
		cases = append(cases, benchCase{shape: defaults(s), Mode: f.mode, Variant: f.variant, Window: f.window, Density: f.density})
	} else {
		for _, c := range sweep(f.quick) {
			if f.set["mode"] && c.Mode != f.mode || f.set["headdim"] && c.D != f.s.D ||
				f.set["causal"] && c.Causal != f.causal || f.set["variant"] && c.Variant != f.variant ||
				f.set["density"] && c.Density != f.density {
				continue
			}
			if f.set["window"] && c.Variant == "window" {
				c.Window = f.window
			}
			c.shape = override(c.shape)
			c.DV = f.s.DV
			cases = append(cases, c)
		}
	}
	for i := range cases {
		c := &cases[i]
		c.plain = !f.noPlain && c.Variant == "" && c.Mode != "decode" && c.N <= 16384
		if c.plain && c.dv() != c.D {
			c.plain, c.plainSkip = false, "the plain algorithm takes one head dim for Q, K and V"
		}
		c.DType = f.dt
		c.f32 = !f.noF32 && f.dt != flashattn.Float32
	}
	return cases
}

// drawable reports whether the figure has anything to draw.
func drawable(cases []benchCase) bool {
	for _, c := range cases {
		if c.Variant == "" && c.Mode != "decode" {
			return true
		}
	}
	return false
}

// plan checks, before anything is allocated, that every case fits in the
// memory limit (one line per case that does not), decides for each case
// whether the plain algorithm fits beside it, and sizes the bandwidth
// buffers of the decode cases.
func (f *benchFlags) plan(cases []benchCase, cache llc) (bwSize memlimit.Size, err error) {
	limit := f.maxMem.Limit()
	var errs []error
	for i := range cases {
		c := &cases[i]
		n := c.need(f.workers)
		if err := n.check(limit, c.label(), "-max-memory overrides"); err != nil {
			errs = append(errs, err)
			continue
		}
		if c.plain {
			withPlain := *n
			withPlain.names, withPlain.sizes = append([]string(nil), n.names...), append([]memlimit.Size(nil), n.sizes...)
			withPlain.addPlainWork(c.B, c.N, c.N, c.H, c.Hk, c.D, c.Mode != "fwd")
			if err := withPlain.check(limit, "plain", ""); err != nil {
				c.plain, c.plainSkip = false, strings.TrimPrefix(err.Error(), "plain: ")
			}
		}
		if c.Mode == "decode" {
			room := memlimit.Inf
			if limit.Known() {
				room = limit.Bytes - min(limit.Bytes, n.total())
			}
			size := memlimit.Size(f.bwSize)
			if size == 0 {
				size = bandwidthBuffer(cache, room)
			} else if size.Times(2) > room {
				errs = append(errs, fmt.Errorf("-bw-size %v: two buffers need %v, but only %v is left beside %s (%s)", size, size.Times(2), room, c.label(), limit.Source))
			}
			if bwSize == 0 || size < bwSize {
				bwSize = size
			}
		}
	}
	return bwSize, errors.Join(errs...)
}

// need estimates a case's peak memory (the plain algorithm aside): the
// float32 inputs and outputs (those of float32 flashattn when it runs
// beside another type) and, for another type, the converted inputs and
// their outputs. Q, dQ, K and dK have head dim D; V, dV, O and dO DV (an
// MLA latent cache has no V of its own).
func (c benchCase) need(workers int) *need {
	sq, dv := c.sq(), c.dv()
	vCols := dv
	if c.latent() {
		vCols = 0
	}
	n := &need{}
	types := []flashattn.DType{flashattn.Float32}
	if c.DType != flashattn.Float32 {
		types = append(types, c.DType)
	}
	for _, dt := range types {
		size := func(dims ...int) memlimit.Size {
			if dt == flashattn.Float32 {
				return memlimit.Mul(append(dims, 4)...)
			}
			return typedBytes(dt, dims...)
		}
		// Sums of sizes, not of head dims, which may be near overflowing.
		n.add("inputs", memlimit.Add(size(c.B, sq, c.H, c.D), size(c.B, sq, c.H, dv)))        // q, dout
		n.add("inputs", memlimit.Add(size(c.B, c.N, c.Hk, c.D), size(c.B, c.N, c.Hk, vCols))) // k, v
		n.add("outputs", memlimit.Add(size(c.B, sq, c.H, dv), size(c.B, sq, c.H, c.D)))       // out, dq
		n.add("outputs", memlimit.Add(size(c.B, c.N, c.Hk, c.D), size(c.B, c.N, c.Hk, dv)))   // dk, dv
		n.floats("outputs", c.B, c.H, sq)                                                     // lse
	}
	n.addFlashWork(c.B, sq, c.N, c.H, c.Hk, c.D, dv, workers, c.Mode == "bwd" || c.Mode == "fwdbwd")
	if c.Variant == "alibi" {
		n.floats("inputs", c.H)
	}
	if c.Variant == "block-sparse" { // the block table and the library's copy
		nb := c.N/sparseBlock + 1
		n.add("inputs", memlimit.Mul(2, c.H, nb, nb))
	}
	return n
}

// latent reports whether the case reads an MLA latent cache: a decode
// case whose V is the first DV columns of K (DV < D), so that the cache
// holds one row of D values per token and KV head.
func (c benchCase) latent() bool { return c.Mode == "decode" && c.dv() < c.D }

// sq is the number of query rows per sequence: one when decoding.
func (c benchCase) sq() int {
	if c.Mode == "decode" {
		return 1
	}
	return c.N
}

// measureAll measures every case, printing JSON lines as they come or the
// table at the end, and draws the figure.
func (f *benchFlags) measureAll(cases []benchCase, bwSize memlimit.Size, cache llc, stdout, stderr io.Writer) error {
	minDur := time.Duration(f.minMillis) * time.Millisecond
	isa := kernel.Active().Impl.Name
	target := min(max(minDur/4, 2*time.Millisecond), 50*time.Millisecond)
	meter := newPeakMeter(isa, f.workers, target)
	var halfMeter *peakMeter
	if is16(f.dt) {
		h := kernel.Active().Half(elemOf(f.dt))
		halfMeter = newLoopMeter(h.Name, h.Peak, f.workers, target)
	}
	var bw *bandwidth
	progress := isTerminal(stderr) && !f.jsonOut
	var results []benchResult
	for i, c := range cases {
		if progress {
			fmt.Fprintf(stderr, "\r\033[K[%d/%d] %s", i+1, len(cases), c.label())
		}
		if c.Mode == "decode" && bw == nil && bwSize > 0 {
			bw = newBandwidth(bwSize, f.workers)
		}
		m := measurer{workers: f.workers, reps: f.reps, minDur: minDur, peak: meter, halfPeak: halfMeter, llc: cache}
		if c.Mode == "decode" {
			m.bw = bw
		}
		r, err := m.measure(c)
		if err != nil {
			if progress {
				fmt.Fprint(stderr, "\r\033[K")
			}
			return fmt.Errorf("%s: %v", c.label(), err)
		}
		results = append(results, r)
		if f.jsonOut {
			b, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(b))
		}
	}
	if progress {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if !f.jsonOut {
		printTable(stdout, results, f.workers, f.reps)
	}
	if f.svg != "" {
		return drawSVG(f.svg, results)
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
	// Block-sparse forward+backward beside dense non-causal fwdbwd at the
	// longest length (time ∝ density).
	for _, s := range []float64{0.05, 0.1, 0.2, 0.5} {
		cases = append(cases, benchCase{shape: defaults(shape{N: top, D: 64}), Mode: "fwdbwd", Variant: "block-sparse", Density: s})
	}
	return cases
}

func (c benchCase) label() string {
	s := fmt.Sprintf("%s b%d h%d", c.Mode, c.B, c.H)
	if c.DType != flashattn.Float32 {
		s = dtypeName(c.DType) + " " + s
	}
	if c.Hk != c.H {
		s += fmt.Sprintf(" kv%d", c.Hk)
	}
	s += fmt.Sprintf(" n%d d%d", c.N, c.D)
	if c.dv() != c.D {
		s += fmt.Sprintf(" dv%d", c.dv())
	}
	if c.latent() {
		s += " latent"
	}
	if c.Causal {
		s += " causal"
	}
	if c.Variant != "" {
		s += " " + c.Variant
	}
	if c.Variant == "block-sparse" {
		s += fmt.Sprintf(" %g", c.Density)
	}
	return s
}

// blockMask builds the block-sparse variant's mask: one random mask per
// query head at the case's density (a fixed seed).
func (c benchCase) blockMask() (*flashattn.BlockMask, error) {
	return randomBlockMask(c.H, c.N, c.Density, 1)
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
	case "block-sparse":
		o.BlockMask = c.mask
	}
	if c.Mode == "decode" {
		// Decoding reads a KV cache (flash_attn_with_kvcache): full.
		lens := make([]int32, c.B)
		for i := range lens {
			lens[i] = int32(c.N)
		}
		o.KVCache = &flashattn.KVCache{SeqLens: lens}
	}
	return o
}

// visibleFlops counts the FLOPs the case is credited with, the rule of the
// FlashAttention papers: 4·B·H·Sq·Sk·D for a forward pass (two products of
// 2·Sq·Sk·D per head), counting only the visible (i, j) pairs under a
// causal mask, a window or a block mask; backward is 2.5× that,
// forward+backward 3.5×. With another head dim DV for V the products are
// counted as they are: forward S = QKᵀ (D) and PV (DV), 2·(D+DV) per pair;
// backward S again, dP = dO·Vᵀ and dV = Pᵀ·dO (DV), dQ = dS·K and
// dK = dSᵀ·Q (D), 2·(3D+2DV) per pair — the same as the rule when DV = D.
func (c benchCase) visibleFlops(mode string) float64 {
	sq := c.sq()
	var pairs float64
	switch {
	case c.mask != nil: // pairs of every head: per head on average
		pairs = visiblePairs(c.mask) / float64(c.mask.Shape().Heads)
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
	d, dv := float64(c.D), float64(c.dv())
	perPair := 2 * (d + dv)
	switch mode {
	case "bwd":
		perPair = 2 * (3*d + 2*dv)
	case "fwdbwd":
		perPair = 2 * (4*d + 3*dv)
	}
	return float64(c.B) * float64(c.H) * pairs * perPair
}

// isTerminal reports whether w is a character device (a terminal) and
// TERM does not say it is a dumb one.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && !strings.Contains(os.Getenv("TERM"), "dumb")
}
