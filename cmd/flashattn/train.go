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
	"slices"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gpt"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/regfile"
)

// trainFlags are the flags of "flashattn train".
type trainFlags struct {
	cfg       gpt.Config
	tc        gpt.TrainConfig
	attention string
	data      string
	save      string
	svg       string
	json      bool
	evalEvery int
	workers   int
	maxMem    *memlimit.Flag
	set       map[string]bool // flags given on the command line

	compare     int  // > 0: train flash and plain for this many steps and compare
	sweep       bool // step time and memory against context length
	sweepTokens int
	sweepSteps  int
	sweepRounds int
	sweepMin    int
	sweepMax    int
}

const trainHelp = `[flags]

Trains a small GPT (decoder-only transformer, byte-level) on the CPU with
flashattn as its attention, and prints progress, validation loss and the
unigram baseline. The default data is the Go standard library's sources
under GOROOT/src, split into training and validation by file.

  flashattn train -save gpt.ckpt                  train the default model (a few minutes)
  flashattn train -compare 200 -svg loss.svg      flash vs plain loss curves, same seed
  flashattn train -sweep-context -svg sweep.svg   step time and peak memory vs context

`

func runTrain(args []string, stdout, stderr io.Writer) error {
	f, err := parseTrainFlags(args, stderr)
	if err != nil {
		return err
	}
	switch {
	case f.sweep:
		return runSweep(f, stdout, stderr, childRunner)
	case f.compare > 0:
		if err := f.checkMemory(); err != nil {
			return err
		}
		return runCompare(f, stdout, stderr)
	}
	if err := f.checkMemory(); err != nil {
		return err
	}
	_, err = trainOnce(f, f.attention, f.tc.Steps, stdout, stderr)
	return err
}

// parseTrainFlags parses and checks the flags of "flashattn train".
func parseTrainFlags(args []string, stderr io.Writer) (trainFlags, error) {
	f := trainFlags{cfg: gpt.DefaultConfig(), tc: gpt.DefaultTrainConfig(), maxMem: memlimit.NewFlag("-max-memory")}
	var dropout float64
	fs := newFlags("train", stderr, trainHelp)
	fs.IntVar(&f.tc.Steps, "steps", f.tc.Steps, "optimizer steps")
	fs.IntVar(&f.cfg.Context, "context", f.cfg.Context, "context length T (tokens per sequence)")
	fs.IntVar(&f.cfg.Layers, "layers", f.cfg.Layers, "transformer blocks")
	fs.IntVar(&f.cfg.Heads, "heads", f.cfg.Heads, "attention heads (must divide -dim)")
	fs.IntVar(&f.cfg.Dim, "dim", f.cfg.Dim, "model width")
	fs.IntVar(&f.tc.Batch, "batch", f.tc.Batch, "sequences per step")
	fs.StringVar(&f.attention, "attention", "flash", "attention: flash (flashattn) or plain (materialised scores)")
	fs.Float64Var(&dropout, "dropout", 0, "attention dropout in [0, 1) (plain needs 0)")
	fs.Uint64Var(&f.tc.Seed, "seed", f.tc.Seed, "seed of initialisation, batches and dropout")
	fs.Float64Var(&f.tc.LR, "lr", f.tc.LR, "peak learning rate (AdamW)")
	fs.Float64Var(&f.tc.MinLR, "min-lr", f.tc.MinLR, "final learning rate of the cosine schedule")
	fs.IntVar(&f.tc.Warmup, "warmup", f.tc.Warmup, "warm-up steps (linear from lr/warmup)")
	fs.Float64Var(&f.tc.WeightDecay, "weight-decay", f.tc.WeightDecay, "AdamW weight decay")
	fs.Float64Var(&f.tc.Clip, "clip", f.tc.Clip, "clip the gradient norm at this value (0: off)")
	fs.IntVar(&f.evalEvery, "eval-every", 100, "validation loss every N steps and at the end (0: never)")
	fs.IntVar(&f.tc.EvalBatches, "eval-batches", f.tc.EvalBatches, "batches per validation")
	fs.StringVar(&f.data, "data", "", "train on this text `FILE` instead of GOROOT/src")
	fs.StringVar(&f.save, "save", "", "write a checkpoint to `FILE` at the end (atomically)")
	fs.BoolVar(&f.json, "json", false, `print one JSON object per step {"step","loss","ms",...} and a summary`)
	fs.IntVar(&f.workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	fs.IntVar(&f.compare, "compare", 0, "train flash, then plain, for the first `N` steps from the same seed and compare the losses")
	fs.BoolVar(&f.sweep, "sweep-context", false, "measure step time, attention share and peak memory against context length")
	fs.IntVar(&f.sweepTokens, "sweep-tokens", 8192, "tokens per step in the sweep (batch = tokens / context)")
	fs.IntVar(&f.sweepSteps, "sweep-steps", 4, "steps per sweep point (the first is a warm-up; the fastest of the others counts)")
	fs.IntVar(&f.sweepRounds, "sweep-rounds", 1, "repeat the sweep this many times and keep each point's fastest step")
	fs.IntVar(&f.sweepMin, "sweep-min", 256, "shortest context of the sweep")
	fs.IntVar(&f.sweepMax, "sweep-max", 8192, "longest context of the sweep (doubling from -sweep-min)")
	fs.StringVar(&f.svg, "svg", "", "with -compare or -sweep-context, draw the figure to `FILE` (.svg, else .png)")
	fs.Var(f.maxMem, "max-memory", "refuse a run whose estimated peak memory exceeds this `size` (e.g. 512M, 4G; default: the memory available now; "+
		"with -sweep-context, each point's)")
	var err error
	if f.set, err = parseSet(fs, args, stderr); err != nil {
		return f, err
	}
	f.cfg.Dropout = float32(dropout)
	return f, f.check(dropout)
}

// check validates every flag beyond what the flag package parses, before
// anything runs, and returns the first bad one as one line naming it.
func (f *trainFlags) check(dropout float64) error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	for _, v := range []struct {
		bad  bool
		flag string
		val  any
		want string
	}{
		{!(dropout >= 0 && dropout < 1), "-dropout", dropout, "want a value in [0, 1)"},
		{f.tc.Steps < 1, "-steps", f.tc.Steps, "want at least 1"},
		{f.tc.Batch < 1, "-batch", f.tc.Batch, "want at least 1"},
		{!finite(f.tc.LR) || f.tc.LR <= 0, "-lr", f.tc.LR, "want a finite value > 0"},
		{!finite(f.tc.MinLR) || f.tc.MinLR < 0 || f.tc.MinLR > f.tc.LR, "-min-lr", f.tc.MinLR, fmt.Sprintf("want a finite value in [0, -lr %g]", f.tc.LR)},
		{f.tc.Warmup < 0, "-warmup", f.tc.Warmup, "want at least 0"},
		{!finite(f.tc.WeightDecay) || f.tc.WeightDecay < 0, "-weight-decay", f.tc.WeightDecay, "want a finite value ≥ 0"},
		{!finite(f.tc.Clip) || f.tc.Clip < 0, "-clip", f.tc.Clip, "want a finite value ≥ 0 (0: off)"},
		{f.tc.EvalBatches < 1, "-eval-batches", f.tc.EvalBatches, "want at least 1"},
		{f.evalEvery < 0, "-eval-every", f.evalEvery, "want at least 0 (0: never)"},
		{f.workers < 0, "-workers", f.workers, "want at least 0 (0: GOMAXPROCS)"},
		{f.compare < 0, "-compare", f.compare, "want at least 0 (0: no comparison)"},
	} {
		if v.bad {
			return fmt.Errorf("%s %v: %s", v.flag, v.val, v.want)
		}
	}
	if err := f.cfg.Validate(); err != nil {
		return fmt.Errorf("model: %v", err)
	}
	if err := f.tc.Validate(); err != nil { // not reached: the flags above cover it
		return fmt.Errorf("training: %v", err)
	}
	if _, err := gpt.NewAttention(f.attention, 0); err != nil {
		return fmt.Errorf("-attention: %v", err)
	}
	if f.attention == "plain" && dropout != 0 {
		return errors.New("-attention plain has no dropout: use -dropout 0")
	}
	if f.compare > 0 && dropout != 0 {
		return errors.New("-compare trains plain attention too, which has no dropout: use -dropout 0")
	}
	if f.compare > f.tc.Steps {
		return fmt.Errorf("-compare %d is more than -steps %d", f.compare, f.tc.Steps)
	}
	if f.compare > 0 && f.sweep {
		return errors.New("-compare and -sweep-context are separate runs: give one")
	}
	if f.save != "" && (f.compare > 0 || f.sweep) {
		return errors.New("-save writes the model of a plain training run, not of -compare or -sweep-context")
	}
	if f.svg != "" && f.compare == 0 && !f.sweep {
		return errors.New("-svg draws the figure of -compare or -sweep-context: give one of them")
	}
	for _, name := range []string{"sweep-tokens", "sweep-steps", "sweep-rounds", "sweep-min", "sweep-max"} {
		if f.set[name] && !f.sweep {
			return fmt.Errorf("-%s needs -sweep-context", name)
		}
	}
	if f.sweep {
		ts, err := sweepContexts(*f)
		if err != nil {
			return err
		}
		for _, t := range ts { // each point's model must be valid
			c := f.cfg
			c.Context = t
			if err := c.Validate(); err != nil {
				return fmt.Errorf("-sweep-max %d: model: %v", f.sweepMax, err)
			}
		}
	}
	// The outputs are written at the end: a -save or -svg that cannot be
	// written is refused before the training, not after it.
	for _, o := range []struct{ flag, path string }{{"-save", f.save}, {"-svg", f.svg}} {
		if o.path == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(o.path)); err != nil || !st.IsDir() {
			return fmt.Errorf("%s %s: directory %s does not exist", o.flag, o.path, filepath.Dir(o.path))
		}
		if st, err := os.Stat(o.path); err == nil && st.IsDir() {
			return fmt.Errorf("%s %s is a directory", o.flag, o.path)
		}
	}
	return nil
}

// checkMemory refuses, with one line and before anything is read or
// allocated, a run whose model, activations, attention buffers and data
// would not fit in -max-memory or the memory available. For -compare it
// counts both runs, which the process may hold at once until the first one
// is collected. It also checks that -data is a regular file.
func (f *trainFlags) checkMemory() error {
	var n need
	attns := []string{f.attention}
	if f.compare > 0 {
		attns = []string{"flash", "plain"}
	}
	c, b, t := f.cfg, f.tc.Batch, f.cfg.Context
	for _, a := range attns {
		n.add("model", c.ParamsBytes().Times(4)) // parameters, gradients, AdamW's two moments
		n.add("activations", c.ActivationBytes(b, t))
		// The training batch (and the one before it, not yet collected)
		// and the validation batches: int32 inputs and targets.
		n.add("batches", memlimit.Mul(f.tc.EvalBatches+2, b, t, 8))
		n.add("work", c.GemmBytes(f.workers))
		if a == "plain" {
			n.add("plain", c.PlainBytes(b, t))
			n.addPlainWork(b, t, t, c.Heads, c.Heads, c.HeadDim(), true)
		} else {
			n.addFlashWork(b, t, t, c.Heads, c.Heads, c.HeadDim(), c.HeadDim(), f.workers, true)
		}
	}
	// The text is read whole, then split into a training and a
	// validation copy that grow by appending.
	var size int64
	if f.data != "" {
		st, err := regfile.Stat(f.data)
		if err != nil {
			return fmt.Errorf("-data: %v", err)
		}
		size = st.Size()
	} else {
		var err error
		if size, err = gpt.GoSourcesBytes(filepath.Join(runtime.GOROOT(), "src")); err != nil {
			return err
		}
	}
	n.add("data", memlimit.Mul(3, int(min(size, math.MaxInt/3))))
	return n.check(f.maxMem.Limit(), fmt.Sprintf("-batch %d -context %d -layers %d -dim %d", b, t, c.Layers, c.Dim), "-max-memory overrides")
}

// humanOut is where the lines for people go: stdout, or stderr when -json
// keeps stdout for the JSON objects.
func (f *trainFlags) humanOut(stdout, stderr io.Writer) io.Writer {
	if f.json {
		return stderr
	}
	return stdout
}

// loadData reads -data, or the Go sources under GOROOT/src.
func loadData(path string) (*gpt.Dataset, error) {
	if path != "" {
		ds, err := gpt.TextFile(path)
		if err != nil {
			return nil, fmt.Errorf("-data: %v", err)
		}
		return ds, nil
	}
	return gpt.GoSources(filepath.Join(runtime.GOROOT(), "src"))
}

// stepRecord is the JSON object of one step.
type stepRecord struct {
	Attention string   `json:"attention,omitempty"`
	Step      int      `json:"step"`
	Loss      float64  `json:"loss"`
	Ms        float64  `json:"ms"`
	AttnMs    float64  `json:"attn_ms"`
	LR        float64  `json:"lr"`
	ValLoss   *float64 `json:"val_loss,omitempty"`
}

// trainSummary is the final JSON object of a run.
type trainSummary struct {
	Summary      bool       `json:"summary"`
	Attention    string     `json:"attention"`
	Model        gpt.Config `json:"model"`
	Params       int        `json:"params"`
	Steps        int        `json:"steps"`
	Batch        int        `json:"batch"`
	Kernel       string     `json:"kernel"`
	TrainLoss    float64    `json:"train_loss"` // mean of the last 10 steps
	ValLoss      *float64   `json:"val_loss,omitempty"`
	Unigram      float64    `json:"unigram"`
	TokensPerSec float64    `json:"tokens_per_s"`
	StepMs       float64    `json:"step_ms"` // median
	AttnShare    float64    `json:"attn_share"`
	Seconds      float64    `json:"seconds"`
	PeakRSS      int64      `json:"peak_rss_bytes,omitempty"`
}

// trainResult is what a run leaves for -compare.
type trainResult struct {
	losses  []float64
	summary trainSummary
}

// trainOnce trains a model with the given attention for steps steps of
// f's schedule and reports progress.
func trainOnce(f trainFlags, attention string, steps int, stdout, stderr io.Writer) (trainResult, error) {
	var res trainResult
	ds, err := loadData(f.data)
	if err != nil {
		return res, err
	}
	attn, err := gpt.NewAttention(attention, f.workers)
	if err != nil {
		return res, err
	}
	m, err := gpt.New(f.cfg, attn, f.tc.Seed, f.workers)
	if err != nil {
		return res, err
	}
	tr, err := gpt.NewTrainer(m, ds, f.tc)
	if err != nil {
		return res, err
	}
	human := f.humanOut(stdout, stderr)
	unigram := ds.Unigram()
	fmt.Fprintf(human, "model: %v, attention %s, dropout %g, kernel %s\n", f.cfg, attention, f.cfg.Dropout, m.Kernel())
	fmt.Fprintf(human, "data: %s\n", ds.Source)
	fmt.Fprintf(human, "training: %d steps of %d × %d tokens, lr %g → %g (warm-up %d), seed %d; unigram baseline %.4f nats/byte\n",
		steps, f.tc.Batch, f.cfg.Context, f.tc.LR, f.tc.MinLR, f.tc.Warmup, f.tc.Seed, unigram)
	enc := json.NewEncoder(stdout)
	prog := newProgress(stderr, steps)
	defer prog.clear() // before any error is printed
	var times, attnTimes []time.Duration
	var valLoss *float64
	var tokens int
	start := time.Now()
	for step := 1; step <= steps; step++ {
		st, err := tr.Step()
		if err != nil {
			return res, fmt.Errorf("step %d: %v", step, err)
		}
		if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) {
			return res, fmt.Errorf("step %d: the loss diverged (%v); try a lower -lr", step, st.Loss)
		}
		res.losses = append(res.losses, st.Loss)
		times, attnTimes = append(times, st.Time), append(attnTimes, st.AttnTime)
		tokens += st.Tokens
		rec := stepRecord{Step: step, Loss: st.Loss, Ms: ms(st.Time), AttnMs: ms(st.AttnTime), LR: st.LR}
		if f.evalEvery > 0 && (step%f.evalEvery == 0 || step == steps) {
			v, err := tr.Evaluate()
			if err != nil {
				return res, err
			}
			valLoss, rec.ValLoss = &v, &v
			prog.clear()
			fmt.Fprintf(human, "step %5d  train %.4f  val %.4f  (unigram %.4f)\n", step, st.Loss, v, unigram)
		}
		if f.json {
			if f.compare > 0 {
				rec.Attention = attention
			}
			if err := enc.Encode(rec); err != nil {
				return res, err
			}
		}
		prog.update(step, st.Loss, tokens, sum(times), time.Since(start))
	}
	prog.clear()
	elapsed := time.Since(start)
	s := trainSummary{
		Summary: true, Attention: attention, Model: f.cfg, Params: f.cfg.NumParams(), Steps: steps, Batch: f.tc.Batch,
		Kernel: m.Kernel(), TrainLoss: mean(res.losses[max(0, len(res.losses)-10):]), ValLoss: valLoss, Unigram: unigram,
		TokensPerSec: float64(tokens) / sum(times).Seconds(), StepMs: ms(median(times)),
		AttnShare: sum(attnTimes).Seconds() / sum(times).Seconds(), Seconds: elapsed.Seconds(),
	}
	if rss, ok := peakRSS(); ok {
		s.PeakRSS = rss
	}
	res.summary = s
	if f.save != "" {
		if err := gpt.SaveCheckpoint(f.save, m, steps); err != nil {
			return res, fmt.Errorf("-save: %v", err)
		}
	}
	fmt.Fprintf(human, "done: %d steps in %s, %.0f tokens/s, %.1f ms/step (attention %.0f%%), final train loss %.4f",
		steps, elapsed.Round(time.Second), s.TokensPerSec, s.StepMs, 100*s.AttnShare, s.TrainLoss)
	if valLoss != nil {
		fmt.Fprintf(human, ", val loss %.4f vs unigram %.4f", *valLoss, unigram)
	}
	fmt.Fprintln(human)
	if f.save != "" {
		fmt.Fprintf(human, "saved %s\n", f.save)
	}
	if f.json && f.compare == 0 {
		return res, enc.Encode(s)
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(1, len(xs)))
}

// progress is the live status line, drawn on a terminal only and at most
// ten times a second.
type progress struct {
	w     io.Writer
	on    bool
	total int
	last  time.Time
	drawn bool
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, on: isTerminal(w), total: total}
}

func (p *progress) update(step int, loss float64, tokens int, busy, elapsed time.Duration) {
	if !p.on || (time.Since(p.last) < 100*time.Millisecond && step < p.total) {
		return
	}
	p.last = time.Now()
	eta := time.Duration(float64(elapsed) / float64(step) * float64(p.total-step)).Round(time.Second)
	fmt.Fprintf(p.w, "\r\033[Kstep %d/%d  loss %.4f  %.0f tokens/s  ETA %s", step, p.total, loss, float64(tokens)/busy.Seconds(), eta)
	p.drawn = true
}

func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}
