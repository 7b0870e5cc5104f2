package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/internal/plain"
)

// shape is one benchmark or demo problem. DV is V's head dim (and O's and
// dO's: MLA's value head dim); 0 means D.
type shape struct {
	B, H, Hk, N, D int
	DV             int
	Causal         bool
}

// dv is V's head dim.
func (s shape) dv() int {
	if s.DV == 0 {
		return s.D
	}
	return s.DV
}

type inputs struct {
	q, k, v, do []float32
}

// randomInputs returns standard normal Q and dO with sq rows per sequence
// and K, V with s.N rows (V and dO of head dim s.dv()).
func randomInputs(s shape, sq int, seed uint64) inputs { return randomInputsV(s, sq, seed, true) }

// randomInputsV is randomInputs without V unless withV (for a cache whose
// V is a view of K).
func randomInputsV(s shape, sq int, seed uint64, withV bool) inputs {
	r := rand.New(rand.NewPCG(seed, 1))
	gen := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	in := inputs{q: gen(s.B * sq * s.H * s.D), k: gen(s.B * s.N * s.Hk * s.D)}
	if withV {
		in.v = gen(s.B * s.N * s.Hk * s.dv())
	}
	in.do = gen(s.B * sq * s.H * s.dv())
	return in
}

// allocated runs f and returns its duration and the bytes it allocated.
func allocated(f func()) (time.Duration, uint64) {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	t0 := time.Now()
	f()
	d := time.Since(t0)
	runtime.ReadMemStats(&b)
	return d, b.TotalAlloc - a.TotalAlloc
}

func runDemo(args []string, stdout, stderr io.Writer) error {
	s := shape{B: 1, H: 8, N: 4096, D: 64}
	var workers int
	var noPlain bool
	maxMem := memlimit.NewFlag("-max-memory")
	fs := newFlags("demo", stderr, "[flags]\n\nRuns flashattn and the plain algorithm (which materialises the N×N scores) on\n"+
		"random inputs, forward and backward, and prints time, GFLOP/s, speedup, extra memory\n"+
		"and the largest error against float64 on a sample of rows.\n")
	fs.IntVar(&s.B, "batch", s.B, "batch size")
	fs.IntVar(&s.H, "heads", s.H, "query heads")
	fs.IntVar(&s.Hk, "kv-heads", 0, "key/value heads (0: same as -heads)")
	fs.IntVar(&s.N, "seqlen", s.N, "sequence length")
	fs.IntVar(&s.D, "headdim", s.D, "head dimension")
	fs.BoolVar(&s.Causal, "causal", false, "causal mask")
	fs.IntVar(&workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	fs.BoolVar(&noPlain, "no-plain", false, "skip the plain algorithm (it needs N×N memory)")
	fs.Var(maxMem, "max-memory", "refuse a run whose estimated peak memory exceeds this `size` (e.g. 512M, 4G; default: the memory available now)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if s.Hk == 0 {
		s.Hk = s.H
	}
	if s.B < 1 || s.H < 1 || s.Hk < 1 || s.N < 1 || s.D < 1 || s.H%s.Hk != 0 {
		return fmt.Errorf("bad shape -batch %d -heads %d -kv-heads %d -seqlen %d -headdim %d (all ≥ 1, heads %% kv-heads == 0)", s.B, s.H, s.Hk, s.N, s.D)
	}
	if workers < 0 {
		return fmt.Errorf("-workers %d: must be ≥ 0 (0: GOMAXPROCS)", workers)
	}
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if err := demoNeed(s, workers, !noPlain).check(maxMem.Limit(), fmt.Sprintf("-batch %d -heads %d -kv-heads %d -seqlen %d -headdim %d", s.B, s.H, s.Hk, s.N, s.D), demoHint(s, noPlain)); err != nil {
		return err
	}
	in := randomInputs(s, s.N, 1)
	t, err := newBenchTensors(benchCase{shape: s, Mode: "fwdbwd"}, in, flashattn.Float32)
	if err != nil {
		return err
	}
	opts := &flashattn.Options{Causal: s.Causal, Workers: workers}
	// One untimed call warms the workspaces, as a training loop would.
	_ = flashattn.ForwardInto(t.out, t.lse, t.q, t.k, t.v, opts)
	tf, mf := allocated(func() { err = flashattn.ForwardInto(t.out, t.lse, t.q, t.k, t.v, opts) })
	if err != nil {
		return err
	}
	tb, mb := allocated(func() { err = flashattn.BackwardInto(t.dq, t.dk, t.dv, t.q, t.k, t.v, t.out, t.do, t.lse, opts) })
	if err != nil {
		return err
	}
	sample := sampleRows(s, 16)
	errF := rowErrors(s, in, sample, t.out.Data, t.lse, t.dq.Data)

	type line struct {
		pass, algo string
		t          time.Duration
		mem        uint64
		errs       [2]float64
	}
	lines := []line{
		{"forward", "flashattn", tf, mf, [2]float64{errF.o, errF.lse}},
		{"backward", "flashattn", tb, mb, [2]float64{errF.dq, 0}},
	}
	if !noPlain {
		pp := &plain.Problem{B: s.B, Sq: s.N, Sk: s.N, H: s.H, Hk: s.Hk, D: s.D, Causal: s.Causal, Workers: workers}
		var po, plse, pdq []float32
		outBytes := uint64(4 * (len(in.q) + s.B*s.H*s.N))
		tpf, mpf := allocated(func() { po, plse = pp.Forward(in.q, in.k, in.v) })
		tpb, mpb := allocated(func() { pdq, _, _ = pp.Backward(in.q, in.k, in.v, po, in.do) })
		errP := rowErrors(s, in, sample, po, plse, pdq)
		lines = append(lines[:1], line{"forward", "plain", tpf, mpf - outBytes, [2]float64{errP.o, errP.lse}}, lines[1],
			line{"backward", "plain", tpb, mpb - uint64(4*(len(in.q)+2*len(in.k))), [2]float64{errP.dq, 0}})
	}

	mask := "non-causal"
	if s.Causal {
		mask = "causal"
	}
	fmt.Fprintf(stdout, "flashattn demo: batch %d, heads %d (kv %d), seqlen %d, headdim %d, %s; kernel %s, %d workers\n\n",
		s.B, s.H, s.Hk, s.N, s.D, mask, kernel.Active().Impl.Name, workers)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pass\talgorithm\ttime\tGFLOP/s\tspeedup\textra memory\tmax err (O/dQ)\tmax err (LSE)\t")
	for i, l := range lines {
		mode := "fwd"
		if l.pass == "backward" {
			mode = "bwd"
		}
		base := l.t
		if !noPlain {
			base = lines[i/2*2+1].t
		}
		lseErr := fmt.Sprintf("%.1e", l.errs[1])
		if l.pass == "backward" {
			lseErr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3fs\t%.1f\t%.2fx\t%s\t%.1e\t%s\t\n", l.pass, l.algo, l.t.Seconds(),
			benchCase{shape: s}.visibleFlops(mode)/l.t.Seconds()/1e9, base.Seconds()/l.t.Seconds(), bytesString(l.mem), l.errs[0], lseErr)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nerrors: largest |x - float64 reference| over %d sampled rows of batch 0, head 0.\n"+
		"extra memory: bytes allocated by the call beyond its inputs and outputs.\n", len(sample))
	return nil
}

// demoNeed estimates the demo's peak memory: random Q, K, V, dO, the
// outputs and gradients, flashattn's work buffers and, unless skipped, the
// plain algorithm's N×N matrices and results.
func demoNeed(s shape, workers int, withPlain bool) *need {
	n := &need{}
	n.floats("inputs", 2, s.B, s.N, s.H, s.D)
	n.floats("inputs", 2, s.B, s.N, s.Hk, s.D)
	n.floats("outputs", 2, s.B, s.N, s.H, s.D)
	n.floats("outputs", 2, s.B, s.N, s.Hk, s.D)
	n.floats("outputs", s.B, s.H, s.N)
	n.addFlashWork(s.B, s.N, s.N, s.H, s.Hk, s.D, s.D, workers, true)
	if withPlain {
		n.addPlainWork(s.B, s.N, s.N, s.H, s.Hk, s.D, true)
	}
	return n
}

func demoHint(s shape, noPlain bool) string {
	if noPlain {
		return "-max-memory overrides"
	}
	var p need
	p.addPlainWork(s.B, s.N, s.N, s.H, s.Hk, s.D, true)
	return fmt.Sprintf("-no-plain saves %v, -max-memory overrides", memlimit.Add(p.sizes...))
}

func bytesString(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func sampleRows(s shape, n int) []int {
	n = min(n, s.N)
	rows := make([]int, n)
	for i := range rows {
		rows[i] = i * (s.N - 1) / max(1, n-1)
	}
	return rows
}

type demoErrors struct{ o, lse, dq float64 }

// rowErrors compares O, LSE and dQ of batch 0, head 0 at the sampled rows
// with attention computed in float64 for those rows alone.
func rowErrors(s shape, in inputs, rows []int, o, lse, dq []float32) demoErrors {
	var e demoErrors
	D := s.D
	scale := 1 / math.Sqrt(float64(D))
	qrow := func(x []float32, i int) []float32 { return x[(i*s.H)*D:][:D] } // batch 0, head 0
	krow := func(x []float32, j int) []float32 { return x[(j*s.Hk)*D:][:D] }
	dot := func(a, b []float32) float64 {
		var acc float64
		for c := range a {
			acc += float64(a[c]) * float64(b[c])
		}
		return acc
	}
	x := make([]float64, s.N)
	for _, i := range rows {
		n := s.N
		if s.Causal {
			n = i + 1
		}
		m := math.Inf(-1)
		for j := 0; j < n; j++ {
			x[j] = scale * dot(qrow(in.q, i), krow(in.k, j))
			m = math.Max(m, x[j])
		}
		var l float64
		for j := 0; j < n; j++ {
			x[j] = math.Exp(x[j] - m)
			l += x[j]
		}
		oi := make([]float64, D)
		for j := 0; j < n; j++ {
			x[j] /= l
			for c, vv := range krow(in.v, j) {
				oi[c] += x[j] * float64(vv)
			}
		}
		// dQ_i = scale · Σ_j P_ij (dO_i·V_j − dO_i·O_i) K_j
		var delta float64
		for c := range oi {
			delta += float64(in.do[i*s.H*D+c]) * oi[c]
		}
		dqi := make([]float64, D)
		for j := 0; j < n; j++ {
			ds := x[j] * (dot(qrow(in.do, i), krow(in.v, j)) - delta)
			for c, kv := range krow(in.k, j) {
				dqi[c] += scale * ds * float64(kv)
			}
		}
		for c := 0; c < D; c++ {
			e.o = math.Max(e.o, math.Abs(float64(o[i*s.H*D+c])-oi[c]))
			e.dq = math.Max(e.dq, math.Abs(float64(dq[i*s.H*D+c])-dqi[c]))
		}
		e.lse = math.Max(e.lse, math.Abs(float64(lse[i])-(m+math.Log(l))))
	}
	return e
}
