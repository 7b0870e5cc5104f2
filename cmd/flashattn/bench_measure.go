package main

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/internal/plain"
)

// peakMeter measures the peak of one kernel path (its register-only
// throughput loop on every worker at once: the FP32 FMA loop of an ISA, or
// the loop of a 16-bit product path), in short runs that are interleaved
// with the case measurements so that all of them see the same machine.
type peakMeter struct {
	isa     string              // the path's name
	loop    func(iters int) int // nil: this path has no peak loop
	iters   int                 // per worker and run
	workers int
}

// newPeakMeter calibrates the FP32 FMA loop of isa so that one run takes
// about target.
func newPeakMeter(isa string, workers int, target time.Duration) *peakMeter {
	loop, ok := kernel.FMAPeakLoop(isa)
	if !ok {
		return &peakMeter{isa: isa, workers: workers}
	}
	return newLoopMeter(isa, loop, workers, target)
}

// elemOf is the kernel element type of a 16-bit DType.
func elemOf(dt flashattn.DType) kernel.Elem {
	if dt == flashattn.Float16 {
		return kernel.F16
	}
	return kernel.BF16
}

// newLoopMeter calibrates loop, the peak loop of the path called name, so
// that one run takes about target.
func newLoopMeter(name string, loop func(iters int) int, workers int, target time.Duration) *peakMeter {
	m := &peakMeter{isa: name, workers: workers, loop: loop}
	n := 1 << 12
	for {
		t0 := time.Now()
		loop(n)
		d := time.Since(t0)
		if d >= time.Millisecond || n >= math.MaxInt/16 {
			m.iters = max(1, int(float64(n)*target.Seconds()/d.Seconds()))
			return m
		}
		n *= 4
	}
}

// measure runs the loop once on every worker at once and returns GFLOP/s
// (0 if there is no loop).
func (m *peakMeter) measure() float64 {
	if m.loop == nil {
		return 0
	}
	var wg sync.WaitGroup
	flops := make([]int, m.workers)
	t0 := time.Now()
	for w := range m.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flops[w] = m.loop(m.iters)
		}()
	}
	wg.Wait()
	d := time.Since(t0).Seconds()
	total := 0.0
	for _, f := range flops {
		total += float64(f) * float64(m.iters)
	}
	return total / d / 1e9
}

// measurer runs one case: reps repetitions, each measuring the peak, then
// flashattn (calls chosen so that a repetition lasts at least minDur), then
// the plain algorithm, then (decode) the bandwidths.
type measurer struct {
	workers, reps int
	minDur        time.Duration
	peak          *peakMeter
	halfPeak      *peakMeter // the 16-bit product path's, for bf16 and f16 cases; nil otherwise
	bw            *bandwidth // decode only; nil: not measured
	llc           llc        // the last-level cache, reported with decode
}

// timeCalls runs f n times and returns the mean seconds per call.
func timeCalls(f func(), n int) float64 {
	t0 := time.Now()
	for range n {
		f()
	}
	return time.Since(t0).Seconds() / float64(n)
}

// coldAlloc returns the bytes one call of f allocates after two garbage
// collections have emptied the library's pools: the extra memory a call
// needs, workspaces included (a warm call in a loop allocates almost
// nothing).
func coldAlloc(f func()) uint64 {
	runtime.GC()
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// gcCycles is the number of completed garbage collections (cheap to read:
// no stop of the world).
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// calls returns how many calls of f (already warm) make up minDur.
func callsFor(f func(), minDur time.Duration) int {
	t0 := time.Now()
	f()
	d := time.Since(t0)
	if d <= 0 {
		d = time.Nanosecond
	}
	return max(1, int((minDur+d-1)/d))
}

// benchTensors are the tensors of one flashattn configuration of a case.
type benchTensors struct {
	q, k, v, do, out, dq, dk, dv flashattn.Tensor
	lse                          []float32
}

// newBenchTensors converts the float32 inputs to the types of a case: Q
// and dO to qt, K and V to kt (the same, except that a q8_0 cache is read
// with float32 queries), and allocates the outputs. Q, K, dQ and dK have
// head dim D; V, dO, O and dV have DV. The V of an MLA latent cache is a
// view of K's first DV columns (in.v is not used).
func newBenchTensors(c benchCase, in inputs, kt flashattn.DType) (benchTensors, error) {
	sq, dv := c.sq(), c.dv()
	qt := kt
	if quantized(kt) {
		qt = flashattn.Float32
	}
	conv := func(x []float32, n, h, d int, dt flashattn.DType) (flashattn.Tensor, error) {
		src := flashattn.Dense(x, c.B, n, h, d)
		if dt == flashattn.Float32 {
			return src, nil
		}
		dst := flashattn.NewTensorOf(dt, c.B, n, h, d)
		return dst, flashattn.Convert(dst, src)
	}
	var t benchTensors
	var err error
	for _, x := range []struct {
		dst     *flashattn.Tensor
		data    []float32
		n, h, d int
		dtype   flashattn.DType
	}{{&t.q, in.q, sq, c.H, c.D, qt}, {&t.k, in.k, c.N, c.Hk, c.D, kt}, {&t.v, in.v, c.N, c.Hk, dv, kt}, {&t.do, in.do, sq, c.H, dv, qt}} {
		if x.dst == &t.v && c.latent() {
			t.v = latentV(t.k, dv)
			continue
		}
		if *x.dst, err = conv(x.data, x.n, x.h, x.d, x.dtype); err != nil {
			return t, err
		}
	}
	gt := kt // the gradients of K and V; there are none for q8_0 and q4_0 (decode only)
	if quantized(kt) {
		gt = flashattn.Float32
	}
	t.out, t.lse = flashattn.NewTensorOf(qt, c.B, sq, c.H, dv), make([]float32, c.B*c.H*sq)
	if c.Mode == "bwd" || c.Mode == "fwdbwd" {
		t.dq = flashattn.NewTensorOf(qt, c.B, sq, c.H, c.D)
		t.dk, t.dv = flashattn.NewTensorOf(gt, c.B, c.N, c.Hk, c.D), flashattn.NewTensorOf(gt, c.B, c.N, c.Hk, dv)
	}
	return t, nil
}

// latentV is the view of the first dv columns of the dense cache k: the V
// of an MLA latent cache, which stores nothing of its own.
func latentV(k flashattn.Tensor, dv int) flashattn.Tensor {
	v := k
	v.Dim = dv
	v.HeadStride, v.SeqStride, v.BatchStride = k.Dim, k.Heads*k.Dim, k.Seq*k.Heads*k.Dim
	return v
}

// runner returns the function one timed call of mode runs on t, and the
// first error any call met.
func (t *benchTensors) runner(mode string, opts *flashattn.Options) (run func(), err func() error) {
	var first error
	fwd := func() {
		if e := flashattn.ForwardInto(t.out, t.lse, t.q, t.k, t.v, opts); e != nil && first == nil {
			first = e
		}
	}
	bwd := func() {
		if e := flashattn.BackwardInto(t.dq, t.dk, t.dv, t.q, t.k, t.v, t.out, t.do, t.lse, opts); e != nil && first == nil {
			first = e
		}
	}
	fwd() // O and LSE for the backward
	run = fwd
	switch mode {
	case "bwd":
		run = bwd
	case "fwdbwd":
		run = func() { fwd(); bwd() }
	}
	return run, func() error { return first }
}

// kvBytes is the number of bytes of K and V one decode call reads: what
// the cache stores, per its type (q8_0: 34 bytes per 32 values); an MLA
// latent cache stores K's D values per token and KV head and nothing more
// for V, its view.
func (c benchCase) kvBytes(dt flashattn.DType) float64 {
	return float64(c.B) * float64(c.N) * c.bytesPerToken(dt)
}

// bytesPerToken is the bytes the cache stores per token (per sequence, all
// KV heads): Hk·(D + DV) values, or Hk·D for an MLA latent cache.
func (c benchCase) bytesPerToken(dt flashattn.DType) float64 {
	cols := c.D + c.dv()
	if c.latent() {
		cols = c.D
	}
	return float64(c.Hk) * float64(cols) * storedBytes(dt)
}

func (m *measurer) measure(c benchCase) (benchResult, error) {
	sq := c.sq()
	in := randomInputsV(c.shape, sq, 7, !c.latent())
	if c.Variant == "block-sparse" {
		var err error
		if c.mask, err = c.blockMask(); err != nil {
			return benchResult{}, err
		}
	}
	opts := c.options(m.workers) // for decode, a KV cache holding N keys per sequence
	ts, err := newBenchTensors(c, in, c.DType)
	if err != nil {
		return benchResult{}, err
	}
	run, runErr := ts.runner(c.Mode, opts)
	extra := coldAlloc(run)
	run() // warm: workspaces pooled again, pages faulted in
	if err := runErr(); err != nil {
		return benchResult{}, err
	}
	calls := callsFor(run, m.minDur)

	r := benchResult{Mode: c.Mode, Variant: c.Variant, DType: dtypeName(c.DType), Batch: c.B, Heads: c.H, KVHeads: c.Hk, SeqlenQ: sq, SeqlenK: c.N,
		Headdim: c.D, HeaddimV: c.dv(), Latent: c.latent(), Causal: c.Causal, Kernel: kernel.Active().Impl.Name, Workers: m.workers, Reps: m.reps,
		Calls: calls, PlainSkipped: c.plainSkip, PeakISA: m.peak.isa, ExtraBytes: extra, Plan: c.plan(opts)}
	if c.mask != nil {
		r.Density = c.mask.Density()
	}
	half := m.halfPeak != nil && is16(c.DType)
	if half {
		r.PeakHalfPath = m.halfPeak.isa
	}
	// Float32 flashattn on the same (unrounded) inputs, beside another type.
	var frun func()
	var frunErr func() error
	fcalls := 0
	if c.f32 {
		fts, err := newBenchTensors(c, in, flashattn.Float32)
		if err != nil {
			return benchResult{}, err
		}
		frun, frunErr = fts.runner(c.Mode, opts)
		frun()
		fcalls = callsFor(frun, m.minDur/2)
		r.F32Calls = fcalls
	}
	var prun func()
	pcalls := 0
	if c.plain {
		pp := &plain.Problem{B: c.B, Sq: c.N, Sk: c.N, H: c.H, Hk: c.Hk, D: c.D, Causal: c.Causal, Workers: m.workers}
		po, _ := pp.Forward(in.q, in.k, in.v)
		switch c.Mode {
		case "fwd":
			prun = func() { pp.Forward(in.q, in.k, in.v) }
		case "bwd":
			prun = func() { pp.Backward(in.q, in.k, in.v, po, in.do) }
		default:
			prun = func() { pp.Forward(in.q, in.k, in.v); pp.Backward(in.q, in.k, in.v, po, in.do) }
		}
		r.PlainBytes = coldAlloc(prun)
		pcalls = callsFor(prun, m.minDur/2)
	}

	mode := c.Mode
	if mode == "decode" {
		mode = "fwd"
	}
	flops := c.visibleFlops(mode)
	kvBytes := c.kvBytes(c.DType)
	r.PlainCalls = pcalls
	r.FlopsPerCall = flops
	var gf, peaks, ratio, pg, speed, kv, rd, cp, rdRatio, cpRatio, secs []float64
	var hpeaks, hratio, hvs, fg, fspeed []float64
	// timed returns the mean seconds of n calls of a flashattn run. A
	// collection since the last timed batch (the plain algorithm's
	// garbage) may have emptied the pools: they are refilled untimed
	// first, as a training loop's steady state would have them.
	gcs := gcCycles()
	timed := func(call func(), n int, callErr func() error) (float64, error) {
		if gcCycles() != gcs {
			call()
		}
		t := timeCalls(call, n)
		gcs = gcCycles()
		return t, callErr()
	}
	for rep := 0; rep < m.reps; rep++ {
		pk := m.peak.measure()
		hp := 0.0
		if half {
			hp = m.halfPeak.measure()
		}
		t, err := timed(run, calls, runErr)
		if err != nil {
			return benchResult{}, err
		}
		g := flops / t / 1e9
		secs, gf = append(secs, t), append(gf, g)
		if pk > 0 {
			peaks, ratio = append(peaks, pk), append(ratio, g/pk)
		}
		if hp > 0 {
			hpeaks, hratio = append(hpeaks, hp), append(hratio, g/hp)
			if pk > 0 {
				hvs = append(hvs, hp/pk)
			}
		}
		if frun != nil {
			ft, err := timed(frun, fcalls, frunErr)
			if err != nil {
				return benchResult{}, err
			}
			fg, fspeed = append(fg, flops/ft/1e9), append(fspeed, ft/t)
		}
		if prun != nil {
			runtime.GC() // each plain batch starts from a clean heap
			pt := timeCalls(prun, pcalls)
			pg, speed = append(pg, flops/pt/1e9), append(speed, pt/t)
		}
		if c.Mode == "decode" {
			kvr := kvBytes / t / 1e9
			kv = append(kv, kvr)
			if m.bw != nil {
				read, cpy := m.bw.read(), m.bw.copy()
				rd, cp = append(rd, read), append(cp, cpy)
				rdRatio, cpRatio = append(rdRatio, kvr/read), append(cpRatio, kvr/cpy)
			}
		}
	}
	r.Seconds = summarize(secs).Median
	r.setGFlops(summarize(gf))
	r.setPeak(summarize(peaks), summarize(ratio))
	if len(hpeaks) > 0 {
		r.setHalfPeak(summarize(hpeaks), summarize(hratio), summarize(hvs))
	}
	if frun != nil {
		r.setF32(summarize(fg), summarize(fspeed))
	}
	if prun != nil {
		r.setPlain(summarize(pg), summarize(speed))
	}
	if c.Mode == "decode" {
		r.KVBytesPerCall = uint64(kvBytes)
		r.KVBytesPerToken = c.bytesPerToken(c.DType)
		r.setDecode(summarize(kv), summarize(rd), summarize(cp), summarize(rdRatio), summarize(cpRatio))
		r.LLCBytes = uint64(m.llc.Total())
		if m.bw != nil {
			r.BandwidthBytes = uint64(m.bw.Bytes())
		} else {
			r.BandwidthSkipped = "the bandwidth buffers do not fit in memory"
		}
		r.setBound(flops/kvBytes, half)
	}
	return r, nil
}
