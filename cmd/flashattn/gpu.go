package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu"
)

// gpuFlags are the flags that choose where and in which element type
// "attn" and "bench" compute: -device, -dtype and -deterministic.
type gpuFlags struct {
	device, dtype string // dtype "": not given
	deterministic bool
	q8            bool // -dtype may be q8_0 (bench's decode cache)
}

// addGPUFlags registers -device, -dtype (with the given help) and
// -deterministic on fs; q8 lets -dtype be q8_0.
func addGPUFlags(fs *flag.FlagSet, dtypeHelp string, q8 bool) *gpuFlags {
	g := &gpuFlags{q8: q8}
	fs.StringVar(&g.device, "device", "cpu", "where to compute: cpu, or gpu (NVIDIA, compute capability ≥ 8.0, through the CUDA driver)")
	fs.StringVar(&g.dtype, "dtype", "", dtypeHelp)
	fs.BoolVar(&g.deterministic, "deterministic", false, "with -device gpu: deterministic backward (dQ from a second kernel instead of float32 atomics)")
	return g
}

// on reports whether -device gpu was given.
func (g *gpuFlags) on() bool { return g.device == "gpu" }

// check validates -device and -dtype together.
func (g *gpuFlags) check() error {
	switch g.device {
	case "cpu", "gpu":
	default:
		return fmt.Errorf("-device %q: want cpu or gpu", g.device)
	}
	if g.deterministic && !g.on() {
		return errors.New("-deterministic needs -device gpu (the CPU's backward is always deterministic)")
	}
	if g.on() {
		_, err := g.gpuType()
		return err
	}
	_, err := g.cpuType()
	return err
}

// cpuType is the element type of -dtype on the CPU: float32 unless given.
func (g *gpuFlags) cpuType() (flashattn.DType, error) {
	if g.dtype == "" {
		return flashattn.Float32, nil
	}
	return parseDType("-dtype", g.dtype, g.q8)
}

// gpuType is the element type of -dtype on the GPU: bf16 unless given;
// the GPU kernels take bf16 and f16 only.
func (g *gpuFlags) gpuType() (gpu.DType, error) {
	if g.dtype == "" {
		return gpu.BF16, nil
	}
	dt, err := parseDType("-dtype", g.dtype, g.q8)
	if err != nil {
		return 0, err
	}
	if f, ok := dt.Format(); ok { // gpu.DType is half.Format
		return f, nil
	}
	return 0, fmt.Errorf("-dtype %q: want bf16 or f16 with -device gpu", g.dtype)
}

// open opens GPU 0; without one the error is a single line saying why.
func (g *gpuFlags) open() (*gpu.Device, gpu.DType, error) {
	dt, err := g.gpuType()
	if err != nil {
		return nil, 0, err
	}
	d, err := gpu.Open(0)
	if err != nil {
		return nil, 0, fmt.Errorf("-device gpu: %w", err)
	}
	return d, dt, nil
}

// forwardFunc and backwardFunc have the signatures of flashattn.Forward and
// flashattn.Backward.
type (
	forwardFunc  func(q, k, v flashattn.Tensor, o *flashattn.Options) (flashattn.Tensor, []float32, error)
	backwardFunc func(q, k, v, out, dout flashattn.Tensor, lse []float32, o *flashattn.Options) (dq, dk, dv flashattn.Tensor, err error)
)

// attnFuncs returns the forward and backward functions "attn" calls:
// flashattn's for -device cpu, the GPU's otherwise, and a function to call
// when done. The GPU's check their arguments (gpu.ValidateShape, whose
// *flashattn.ArgError argFile maps to a flag or file) before they open the
// device, so that a bad value is reported as such with or without a GPU.
func (g *gpuFlags) attnFuncs() (forwardFunc, backwardFunc, func(), error) {
	if err := g.check(); err != nil {
		return nil, nil, nil, err
	}
	if !g.on() {
		return flashattn.Forward, flashattn.Backward, func() {}, nil
	}
	dt, err := g.gpuType()
	if err != nil {
		return nil, nil, nil, err
	}
	var d *gpu.Device
	open := func(q, k, v flashattn.Tensor, opts *gpu.Options) error {
		s := flashattn.Shape{Batch: q.Batch, SeqQ: q.Seq, Heads: q.Heads, Dim: q.Dim, KVBatch: k.Batch, SeqK: k.Seq, KVHeads: k.Heads, DimV: v.Dim}
		if err := gpu.ValidateShape(s, opts); err != nil {
			return err
		}
		if d != nil {
			return nil
		}
		var err error
		if d, _, err = g.open(); err != nil {
			d = nil
		}
		return err
	}
	fwd := func(q, k, v flashattn.Tensor, o *flashattn.Options) (flashattn.Tensor, []float32, error) {
		opts := g.options(o)
		if err := open(q, k, v, opts); err != nil {
			return flashattn.Tensor{}, nil, err
		}
		return d.ForwardHost(dt, q, k, v, opts)
	}
	bwd := func(q, k, v, out, dout flashattn.Tensor, lse []float32, o *flashattn.Options) (dq, dk, dv flashattn.Tensor, err error) {
		opts := g.options(o)
		if err := open(q, k, v, opts); err != nil {
			return dq, dk, dv, err
		}
		return d.BackwardHost(dt, q, k, v, out, dout, lse, opts)
	}
	done := func() {
		if d != nil {
			d.Close()
		}
	}
	return fwd, bwd, done, nil
}

// options are the GPU's options for the library's: the same, with
// -deterministic. Those the GPU kernels do not implement (-alibi,
// -dropout, -cache-seqlens, the masks) are refused by package gpu with an
// *flashattn.ArgError naming the option, which argFile maps to the flag.
func (g *gpuFlags) options(o *flashattn.Options) *gpu.Options {
	opts := &gpu.Options{Deterministic: g.deterministic}
	if o != nil {
		opts.Options = *o
	}
	return opts
}

// gpuResult is one line of "bench -device gpu" and one JSON object.
type gpuResult struct {
	Device        string  `json:"device"`
	DType         string  `json:"dtype"`
	Mode          string  `json:"mode"`
	Batch         int     `json:"batch"`
	Heads         int     `json:"heads"`
	KVHeads       int     `json:"kv_heads"`
	Seqlen        int     `json:"seqlen"`
	Headdim       int     `json:"headdim"`
	Causal        bool    `json:"causal"`
	Deterministic bool    `json:"deterministic,omitempty"`
	Seconds       float64 `json:"seconds"`
	TFlops        float64 `json:"tflops"`
	PeakTFlops    float64 `json:"peak_tflops,omitempty"`
	PctPeak       float64 `json:"pct_peak,omitempty"`
}

// benchGPU measures the GPU kernels: the single case of the flags when
// s.N > 0, otherwise a sweep of seqlen 512…16384 at batch·seqlen = 16k
// tokens and heads·headdim = 2048 (FlashAttention-2's benchmark shape;
// B=4, H=16, N=4096, D=128 among them), headdim 64 and 128, causal or not,
// forward and forward+backward.
func benchGPU(g *gpuFlags, s shape, causal bool, mode string, jsonOut bool, minMillis int, stdout io.Writer) error {
	d, dt, err := g.open()
	if err != nil {
		return err
	}
	defer d.Close()
	var cases []gpuCase
	gpuShape := func(n, dim int, causal bool) shape {
		x := shape{B: s.B, H: s.H, Hk: s.Hk, N: n, D: dim, Causal: causal}
		if x.B == 0 {
			x.B = max(1, 16384/n)
		}
		if x.H == 0 {
			x.H = max(1, 2048/dim)
		}
		if x.Hk == 0 {
			x.Hk = x.H
		}
		return x
	}
	if s.N > 0 {
		switch mode {
		case "fwd", "bwd", "fwdbwd":
		default:
			return fmt.Errorf("-mode %q: want fwd, bwd or fwdbwd with -device gpu", mode)
		}
		cases = append(cases, gpuCase{gpuShape(s.N, s.D, causal), mode})
	} else {
		for _, m := range []string{"fwd", "fwdbwd"} {
			for _, dim := range []int{64, 128} {
				for _, c := range []bool{false, true} {
					for n := 512; n <= 16384; n *= 2 {
						cases = append(cases, gpuCase{gpuShape(n, dim, c), m})
					}
				}
			}
		}
	}
	info := d.Info()
	peak := peakTFlops(info)
	var results []gpuResult
	for _, c := range cases {
		r, err := c.measure(d, dt, g.deterministic, time.Duration(minMillis)*time.Millisecond)
		if err != nil {
			return err
		}
		r.Device = info.Name
		if peak > 0 {
			r.PeakTFlops, r.PctPeak = peak, 100*r.TFlops/peak
		}
		results = append(results, r)
		if jsonOut {
			b, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(b))
		}
	}
	if !jsonOut {
		name := dtypeName(flashattn.DType(dt))
		fmt.Fprintf(stdout, "%s (compute capability %d.%d, %d SMs), %s", info.Name, info.Major, info.Minor, info.SMs, name)
		if peak > 0 {
			fmt.Fprintf(stdout, ", dense %s tensor peak %.0f TFLOP/s", name, peak)
		}
		fmt.Fprintln(stdout)
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "mode\tbatch\theads\tseqlen\theaddim\tcausal\tms\tTFLOP/s\t% of peak\t")
		for _, r := range results {
			pct := "-"
			if r.PctPeak > 0 {
				pct = fmt.Sprintf("%.0f%%", r.PctPeak)
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%v\t%.3f\t%.1f\t%s\t\n", r.Mode, r.Batch, r.Heads, r.Seqlen, r.Headdim, r.Causal, 1e3*r.Seconds, r.TFlops, pct)
		}
		w.Flush()
	}
	return nil
}

// gpuCase is one measured configuration.
type gpuCase struct {
	shape
	mode string
}

// flops counts the FLOPs a case is credited with, the rule of the
// FlashAttention papers and of bench: a forward pass is 4·B·H·N·N·D (two
// products of 2·N·N·D per head), with only the N(N+1)/2 visible pairs
// under a causal mask; backward counts 2.5× the forward and
// forward+backward 3.5×.
func (c gpuCase) flops() float64 {
	pairs := float64(c.N) * float64(c.N)
	if c.Causal {
		pairs = float64(c.N) * float64(c.N+1) / 2
	}
	f := 4 * float64(c.B*c.H) * pairs * float64(c.D)
	switch c.mode {
	case "bwd":
		f *= 2.5
	case "fwdbwd":
		f *= 3.5
	}
	return f
}

// measure runs the case on device tensors (no host copies in the timing):
// once to compile and warm up, then repeatedly for at least minDur,
// keeping the fastest run.
func (c gpuCase) measure(d *gpu.Device, dt gpu.DType, det bool, minDur time.Duration) (gpuResult, error) {
	r := gpuResult{DType: dtypeName(flashattn.DType(dt)), Mode: c.mode, Batch: c.B, Heads: c.H, KVHeads: c.Hk, Seqlen: c.N, Headdim: c.D, Causal: c.Causal, Deterministic: det}
	var ts []gpu.Tensor
	defer func() {
		for _, t := range ts {
			t.Free()
		}
	}()
	alloc := func(h int) (gpu.Tensor, error) {
		t, err := d.NewTensor(dt, c.B, c.N, h, c.D)
		if err == nil {
			ts = append(ts, t)
		}
		return t, err
	}
	var t [8]gpu.Tensor
	for i, h := range []int{c.H, c.Hk, c.Hk, c.H, c.H, c.H, c.Hk, c.Hk} { // q k v o do dq dk dv
		var err error
		if t[i], err = alloc(h); err != nil {
			return r, err
		}
	}
	q, k, v, o, do, dq, dk, dv := t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]
	for i, x := range []gpu.Tensor{q, k, v, do} {
		data := make([]float32, x.Len())
		fillNormal(data, 7+uint64(i))
		if err := x.Upload(data); err != nil {
			return r, err
		}
	}
	lse, err := d.Alloc(4 * c.B * c.H * c.N)
	if err != nil {
		return r, err
	}
	defer lse.Free()
	opts := &gpu.Options{Options: flashattn.Options{Causal: c.Causal}, Deterministic: det}
	fwd := func() error { return d.Forward(q, k, v, o, lse, opts) }
	bwd := func() error { return d.Backward(q, k, v, o, do, lse, dq, dk, dv, opts) }
	run := fwd
	switch c.mode {
	case "bwd":
		run = bwd
	case "fwdbwd":
		run = func() error {
			if err := fwd(); err != nil {
				return err
			}
			return bwd()
		}
	}
	if err := fwd(); err != nil { // compiles the kernels, and O and LSE for bwd
		return r, err
	}
	if err := run(); err != nil {
		return r, err
	}
	var best, total time.Duration
	for i := 0; total < minDur || i == 0; i++ {
		t0 := time.Now()
		if err := run(); err != nil {
			return r, err
		}
		el := time.Since(t0)
		total += el
		if i == 0 || el < best {
			best = el
		}
	}
	r.Seconds = best.Seconds()
	r.TFlops = c.flops() / r.Seconds / 1e12
	return r, nil
}

// peakTFlops returns the GPU's dense FP16/BF16 tensor-core peak with float32
// accumulation, from NVIDIA's data sheets for the GPUs the kernels target,
// or 0 when unknown.
func peakTFlops(info gpu.Info) float64 {
	name := strings.ToUpper(info.Name)
	for _, p := range []struct {
		match string
		tflop float64
	}{
		{"H100 PCIE", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H200", 989}, {"H800", 989}, {"GH200", 989},
		{"A100", 312}, {"A800", 312}, {"A30", 165}, {"L40S", 362}, {"L40", 181}, {"L4", 121}, {"A10", 125},
	} {
		if strings.Contains(name, p.match) {
			return p.tflop
		}
	}
	return 0
}
