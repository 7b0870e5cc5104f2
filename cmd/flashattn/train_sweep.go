package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// sweepPoint is one (context, attention) measurement of -sweep-context.
type sweepPoint struct {
	Attention string  `json:"attention"`
	Context   int     `json:"context"`
	Batch     int     `json:"batch"`
	StepMs    float64 `json:"step_ms"` // the fastest of the steps after the first
	AttnMs    float64 `json:"attn_ms"` // of which attention (same steps)
	PeakRSS   int64   `json:"peak_rss_bytes"`
}

// runner runs "flashattn ARGS" in a fresh process and returns its stdout.
type runner func(args []string) ([]byte, error)

// childRunner re-executes this program, so that each measurement's peak
// resident memory (VmHWM) is its own.
func childRunner(args []string) ([]byte, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(exe, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return nil, fmt.Errorf("%v: %s", err, msg)
	}
	return out, nil
}

// peakRSS returns this process's peak resident set size (VmHWM), where
// the OS reports it (Linux).
func peakRSS() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// sweepContexts lists the contexts of the sweep.
func sweepContexts(f trainFlags) ([]int, error) {
	switch {
	case f.sweepMin < 1:
		return nil, fmt.Errorf("-sweep-min %d: want at least 1", f.sweepMin)
	case f.sweepMax < f.sweepMin:
		return nil, fmt.Errorf("-sweep-max %d: want -sweep-min %d or more", f.sweepMax, f.sweepMin)
	case f.sweepSteps < 1:
		return nil, fmt.Errorf("-sweep-steps %d: want at least 1", f.sweepSteps)
	case f.sweepRounds < 1:
		return nil, fmt.Errorf("-sweep-rounds %d: want at least 1", f.sweepRounds)
	case f.sweepTokens < 1:
		return nil, fmt.Errorf("-sweep-tokens %d: want at least 1", f.sweepTokens)
	}
	var ts []int
	for t := f.sweepMin; t <= f.sweepMax; t *= 2 {
		if f.sweepTokens%t != 0 {
			return nil, fmt.Errorf("-sweep-tokens %d is not a multiple of context %d", f.sweepTokens, t)
		}
		ts = append(ts, t)
		if t > f.sweepMax/2 { // the next would pass -sweep-max (and might overflow)
			break
		}
	}
	return ts, nil
}

// runSweep measures, in a child process per point, the step time, the
// attention's part of it and the peak memory of training the same model
// with the same number of tokens per step at each context length, flash
// and plain.
func runSweep(f trainFlags, stdout, stderr io.Writer, run runner) error {
	ts, err := sweepContexts(f)
	if err != nil {
		return err
	}
	human := f.humanOut(stdout, stderr)
	fmt.Fprintf(human, "sweep: %d layers, %d heads, width %d; %d tokens per step; %d rounds of %d steps per point (the fastest step after each run's first)\n",
		f.cfg.Layers, f.cfg.Heads, f.cfg.Dim, f.sweepTokens, f.sweepRounds, f.sweepSteps)
	// Rounds repeat the whole sweep, so that a burst of other work on a
	// shared machine hits one round of a point, not all of them; each point
	// keeps its fastest step and its largest peak memory.
	best := map[[2]any]*sweepPoint{}
	var pts []*sweepPoint
	enc := json.NewEncoder(stdout)
	for round := 1; round <= f.sweepRounds; round++ {
		for _, t := range ts {
			for _, a := range []string{"flash", "plain"} {
				args := []string{"train", "-json", "-eval-every", "0", "-attention", a,
					"-context", strconv.Itoa(t), "-batch", strconv.Itoa(f.sweepTokens / t), "-steps", strconv.Itoa(f.sweepSteps),
					"-layers", strconv.Itoa(f.cfg.Layers), "-heads", strconv.Itoa(f.cfg.Heads), "-dim", strconv.Itoa(f.cfg.Dim),
					"-seed", strconv.FormatUint(f.tc.Seed, 10), "-workers", strconv.Itoa(f.workers), "-eval-batches", "1",
					"-warmup", "1"}
				if f.data != "" {
					args = append(args, "-data", f.data)
				}
				if f.maxMem.String() != "" { // each point checks its own memory
					args = append(args, "-max-memory", strconv.FormatUint(uint64(f.maxMem.Limit().Bytes), 10))
				}
				fmt.Fprintf(stderr, "  round %d, context %d, %s ...\n", round, t, a)
				out, err := run(args)
				if err != nil {
					return fmt.Errorf("context %d, %s: %v", t, a, err)
				}
				p, err := parseSweepRun(out)
				if err != nil {
					return fmt.Errorf("context %d, %s: %v", t, a, err)
				}
				p.Attention, p.Context, p.Batch = a, t, f.sweepTokens/t
				if f.json {
					if err := enc.Encode(p); err != nil {
						return err
					}
				}
				key := [2]any{t, a}
				if b := best[key]; b == nil {
					best[key] = &p
					pts = append(pts, &p)
				} else {
					if p.StepMs < b.StepMs {
						b.StepMs, b.AttnMs = p.StepMs, p.AttnMs
					}
					b.PeakRSS = max(b.PeakRSS, p.PeakRSS)
				}
			}
		}
	}
	rows := make([]sweepPoint, len(pts))
	for i, p := range pts {
		rows[i] = *p
	}
	printSweep(human, rows)
	if f.svg != "" {
		if err := drawSweep(f.svg, rows); err != nil {
			return err
		}
		fmt.Fprintf(human, "wrote %s\n", f.svg)
	}
	return nil
}

// parseSweepRun reads a child's -json output.
func parseSweepRun(out []byte) (sweepPoint, error) {
	var p sweepPoint
	var steps, attn []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	found := false
	for sc.Scan() {
		var rec struct {
			Summary bool    `json:"summary"`
			Step    int     `json:"step"`
			Ms      float64 `json:"ms"`
			AttnMs  float64 `json:"attn_ms"`
			PeakRSS int64   `json:"peak_rss_bytes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return p, fmt.Errorf("bad output line %q: %v", sc.Text(), err)
		}
		if rec.Summary {
			p.PeakRSS, found = rec.PeakRSS, true
			continue
		}
		steps, attn = append(steps, rec.Ms), append(attn, rec.AttnMs)
	}
	if !found || len(steps) == 0 {
		return p, errors.New("no steps or no summary in the output")
	}
	if len(steps) > 1 { // the first step allocates and warms up
		steps, attn = steps[1:], attn[1:]
	}
	// The fastest step is the one least disturbed by other work on a
	// shared machine; its attention time goes with it.
	i := 0
	for j, ms := range steps {
		if ms < steps[i] {
			i = j
		}
	}
	p.StepMs, p.AttnMs = steps[i], attn[i]
	return p, nil
}

// printSweep prints the sweep as a table, flash and plain side by side.
func printSweep(w io.Writer, pts []sweepPoint) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "context\tbatch\tflash ms/step\tattn\tplain ms/step\tattn\tplain/flash\tflash peak MiB\tplain peak MiB\t")
	by := map[[2]any]sweepPoint{}
	var ts []int
	for _, p := range pts {
		by[[2]any{p.Context, p.Attention}] = p
		if !slices.Contains(ts, p.Context) {
			ts = append(ts, p.Context)
		}
	}
	for _, t := range ts {
		fl, pl := by[[2]any{t, "flash"}], by[[2]any{t, "plain"}]
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f%%\t%.0f\t%.0f%%\t%.2f×\t%.0f\t%.0f\t\n", t, fl.Batch,
			fl.StepMs, 100*fl.AttnMs/fl.StepMs, pl.StepMs, 100*pl.AttnMs/pl.StepMs, pl.StepMs/fl.StepMs,
			float64(fl.PeakRSS)/(1<<20), float64(pl.PeakRSS)/(1<<20))
	}
	tw.Flush()
}
