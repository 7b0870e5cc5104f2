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

// peakMeter measures the FP32 FMA peak of one kernel path (its ISA's FMA
// loop on every worker at once), in short runs that are interleaved with
// the case measurements so that both see the same machine.
type peakMeter struct {
	isa     string
	loop    func(iters int) int // nil: this path has no peak loop
	iters   int                 // per worker and run
	workers int
}

// newPeakMeter calibrates the loop of isa so that one run takes about
// target.
func newPeakMeter(isa string, workers int, target time.Duration) *peakMeter {
	m := &peakMeter{isa: isa, workers: workers}
	loop, ok := kernel.FMAPeakLoop(isa)
	if !ok {
		return m
	}
	m.loop = loop
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

func (m *measurer) measure(c benchCase) (benchResult, error) {
	sq := c.sq()
	in := randomInputs(c.shape, sq, 7)
	q := flashattn.Dense(in.q, c.B, sq, c.H, c.D)
	k := flashattn.Dense(in.k, c.B, c.N, c.Hk, c.D)
	v := flashattn.Dense(in.v, c.B, c.N, c.Hk, c.D)
	do := flashattn.Dense(in.do, c.B, sq, c.H, c.D)
	if c.Variant == "block-sparse" {
		var err error
		if c.mask, err = c.blockMask(); err != nil {
			return benchResult{}, err
		}
	}
	opts := c.options(m.workers)
	out := flashattn.NewTensor(c.B, sq, c.H, c.D)
	lse := make([]float32, c.B*c.H*sq)
	dq, dk, dv := flashattn.NewTensor(c.B, sq, c.H, c.D), flashattn.NewTensor(c.B, c.N, c.Hk, c.D), flashattn.NewTensor(c.B, c.N, c.Hk, c.D)
	var err error
	fwd := func() {
		if e := flashattn.ForwardInto(out, lse, q, k, v, opts); e != nil && err == nil {
			err = e
		}
	}
	bwd := func() {
		if e := flashattn.BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts); e != nil && err == nil {
			err = e
		}
	}
	fwd()
	run := fwd
	switch c.Mode {
	case "bwd":
		run = bwd
	case "fwdbwd":
		run = func() { fwd(); bwd() }
	}
	extra := coldAlloc(run)
	run() // warm: workspaces pooled again, pages faulted in
	if err != nil {
		return benchResult{}, err
	}
	calls := callsFor(run, m.minDur)

	r := benchResult{Mode: c.Mode, Variant: c.Variant, Batch: c.B, Heads: c.H, KVHeads: c.Hk, SeqlenQ: sq, SeqlenK: c.N,
		Headdim: c.D, Causal: c.Causal, Kernel: kernel.Select().Name, Workers: m.workers, Reps: m.reps,
		Calls: calls, PlainSkipped: c.plainSkip, PeakISA: m.peak.isa, ExtraBytes: extra}
	if c.mask != nil {
		r.Density = c.mask.Density()
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
	kvBytes := float64(2 * 4 * c.B * c.N * c.Hk * c.D) // K and V read per call
	r.PlainCalls = pcalls
	var gf, peaks, ratio, pg, speed, kv, rd, cp, rdRatio, cpRatio, secs []float64
	gcs := gcCycles()
	for rep := 0; rep < m.reps; rep++ {
		pk := m.peak.measure()
		// A collection since the last timed batch (the plain algorithm's
		// garbage) may have emptied the pools: refill them untimed, as a
		// training loop's steady state would have them.
		if gcCycles() != gcs {
			run()
		}
		t := timeCalls(run, calls)
		gcs = gcCycles()
		if err != nil {
			return benchResult{}, err
		}
		g := flops / t / 1e9
		secs, gf = append(secs, t), append(gf, g)
		if pk > 0 {
			peaks, ratio = append(peaks, pk), append(ratio, g/pk)
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
	if prun != nil {
		r.setPlain(summarize(pg), summarize(speed))
	}
	if c.Mode == "decode" {
		r.setDecode(summarize(kv), summarize(rd), summarize(cp), summarize(rdRatio), summarize(cpRatio))
		r.LLCBytes = uint64(m.llc.Total())
		if m.bw != nil {
			r.BandwidthBytes = uint64(m.bw.Bytes())
		} else {
			r.BandwidthSkipped = "the bandwidth buffers do not fit in memory"
		}
	}
	return r, nil
}
