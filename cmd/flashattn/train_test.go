package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trainText is a small Go-looking text for fast training tests.
var trainText = strings.Repeat(`func (s *Stack) Push(v int) {
	s.items = append(s.items, v)
}

func (s *Stack) Pop() (int, bool) {
	if len(s.items) == 0 {
		return 0, false
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, true
}
`, 30)

// tinyModel are the flags of a model that trains in well under a second.
var tinyModel = []string{"-context", "32", "-layers", "1", "-heads", "2", "-dim", "32", "-batch", "4", "-eval-batches", "1", "-lr", "1e-2", "-warmup", "3"}

func writeText(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "text.go")
	if err := os.WriteFile(p, []byte(trainText), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrainJSONAndGenerate trains a tiny model with -json and -save, checks
// the step objects and the summary, then samples from the checkpoint.
func TestTrainJSONAndGenerate(t *testing.T) {
	data := writeText(t)
	ckpt := filepath.Join(t.TempDir(), "tiny.ckpt")
	args := append([]string{"train", "-data", data, "-steps", "40", "-json", "-eval-every", "20", "-save", ckpt}, tinyModel...)
	code, out, errs := atRun(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var steps []stepRecord
	var sum trainSummary
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Contains(line, []byte(`"summary":true`)) {
			if err := json.Unmarshal(line, &sum); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var r stepRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		steps = append(steps, r)
	}
	if len(steps) != 40 || !sum.Summary {
		t.Fatalf("%d step objects and summary %v, want 40 and a summary", len(steps), sum.Summary)
	}
	for i, r := range steps {
		if r.Step != i+1 || !(r.Ms > 0) || !(r.Loss > 0) {
			t.Fatalf("step object %d: %+v", i, r)
		}
		if (r.ValLoss != nil) != (r.Step%20 == 0) {
			t.Fatalf("step %d: validation loss present = %v", r.Step, r.ValLoss != nil)
		}
	}
	if !(steps[39].Loss < steps[0].Loss-1) {
		t.Errorf("loss %.3f → %.3f: did not fall", steps[0].Loss, steps[39].Loss)
	}
	if sum.ValLoss == nil || !(*sum.ValLoss < sum.Unigram) || sum.Steps != 40 || sum.Params == 0 || !(sum.TokensPerSec > 0) {
		t.Errorf("summary %+v", sum)
	}
	if !strings.Contains(errs, "unigram baseline") || !strings.Contains(errs, "val ") {
		t.Errorf("progress text missing from stderr:\n%s", errs)
	}

	gen := func(seed string) string {
		code, out, errs := atRun("generate", "-model", ckpt, "-prompt", "func (s", "-tokens", "60", "-seed", seed)
		if code != 0 {
			t.Fatalf("generate: exit %d: %s", code, errs)
		}
		return out
	}
	a, b := gen("3"), gen("3")
	if a != b {
		t.Fatal("the same seed gave different text")
	}
	if !strings.HasPrefix(a, "func (s") || len(a) != len("func (s")+60+1 {
		t.Fatalf("generated %q: want the prompt, 60 bytes and a newline", a)
	}
}

// TestTrainErrors checks that bad flags exit non-zero with one line naming
// the problem.
func TestTrainErrors(t *testing.T) {
	data := writeText(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-attention", "plain", "-dropout", "0.1"}, 1, "plain has no dropout"},
		{[]string{"-compare", "3", "-steps", "3", "-dropout", "0.1"}, 1, "-dropout 0"},
		{[]string{"-attention", "sparse"}, 1, "-attention"},
		{[]string{"-heads", "3"}, 1, "divide dim"},
		{[]string{"-dropout", "1"}, 1, "-dropout"},
		{[]string{"-steps", "0"}, 1, "steps"},
		{[]string{"-svg", "x.svg"}, 1, "-svg"},
		{[]string{"-sweep-context", "-save", "x.ckpt"}, 1, "-save"},
		{[]string{"-compare", "9", "-steps", "5"}, 1, "-compare"},
		{[]string{"-data", filepath.Join(t.TempDir(), "missing")}, 1, "-data"},
		{[]string{"-context", "5000", "-steps", "1"}, 1, "text"},
		{[]string{"-bogus"}, 2, "bogus"},
		{[]string{"extra"}, 2, "unexpected argument"},
	} {
		args := append([]string{"train", "-data", data}, tc.args...)
		code, _, errs := atRun(args...)
		if code != tc.code || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 4 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}

// TestTrainCompare trains flash and plain from the same seed and checks
// the reported difference and the figure.
func TestTrainCompare(t *testing.T) {
	data := writeText(t)
	svg := filepath.Join(t.TempDir(), "loss.svg")
	args := append([]string{"train", "-data", data, "-steps", "8", "-compare", "8", "-json", "-eval-every", "0", "-svg", svg}, tinyModel...)
	code, out, errs := atRun(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var c compareSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &c); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 17 || !c.Compare || c.Steps != 8 || c.Flash.Attention != "flash" || c.Plain.Attention != "plain" {
		t.Fatalf("%d lines, summary %+v", len(lines), c)
	}
	if !(c.MaxDiff < 1e-4) {
		t.Errorf("max |loss difference| %g", c.MaxDiff)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("figure: %v, %d bytes", err, len(b))
	}
}

// TestTrainSweep runs a small sweep with the measurements in this process
// and checks the table, the JSON points and the figure.
func TestTrainSweep(t *testing.T) {
	data := writeText(t)
	png := filepath.Join(t.TempDir(), "sweep.png")
	inProcess := func(args []string) ([]byte, error) {
		code, out, errs := atRun(args...)
		if code != 0 {
			return nil, fmt.Errorf("exit %d: %s", code, errs)
		}
		return []byte(out), nil
	}
	var o, e bytes.Buffer
	f, err := parseTrainFlags([]string{"-data", data, "-sweep-context", "-sweep-min", "16", "-sweep-max", "32", "-sweep-tokens", "64",
		"-sweep-steps", "2", "-sweep-rounds", "2", "-layers", "1", "-heads", "2", "-dim", "16", "-svg", png}, &e)
	if err != nil {
		t.Fatal(err)
	}
	if err := runSweep(f, &o, &e, inProcess); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"context", "16", "32", "plain/flash"} {
		if !strings.Contains(o.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, o.String())
		}
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("figure: %v", err)
	}
	if _, err := sweepContexts(trainFlags{sweepMin: 48, sweepMax: 96, sweepTokens: 100, sweepSteps: 1, sweepRounds: 1}); err == nil {
		t.Error("tokens not a multiple of the context: no error")
	}
}

func TestParseSweepRun(t *testing.T) {
	out := `{"step":1,"loss":5,"ms":10,"attn_ms":1}
{"step":2,"loss":4,"ms":30,"attn_ms":10}
{"step":3,"loss":3,"ms":20,"attn_ms":5}
{"step":4,"loss":3,"ms":40,"attn_ms":20}
{"summary":true,"peak_rss_bytes":12345}
`
	p, err := parseSweepRun([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if p.StepMs != 20 || p.AttnMs != 5 || p.PeakRSS != 12345 {
		t.Fatalf("%+v: want the fastest of steps 2..4 (20 ms, 5 ms attention) and the peak", p)
	}
	for _, bad := range []string{"", "{\"step\":1,\"ms\":3}\n", "not json\n", "{\"summary\":true}\n"} {
		if _, err := parseSweepRun([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPeakRSS(t *testing.T) {
	rss, ok := peakRSS()
	if runtime.GOOS == "linux" && (!ok || rss < 1<<20) {
		t.Fatalf("peak RSS %d, %v on Linux", rss, ok)
	}
}

func TestDecadeTicks(t *testing.T) {
	var labels []string
	for _, tk := range (decades{}).Ticks(3e-7, 2e-5) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "5e-07 1e-06 2e-06 5e-06 1e-05 2e-05" {
		t.Fatalf("labels %q", got)
	}
	ticks := (decades{}).Ticks(1, 1000)
	labels = labels[:0]
	for _, tk := range ticks {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, ","); got != "1,,,10,,,100,,,1000" {
		t.Fatalf("ticks between 1 and 1000 labelled %q, want 1 2 5 10 … 1000 with labels on the decades", got)
	}
}

// runGuarded runs the command line in this process and fails the test if
// it is still running after 10 s (a FIFO used to block forever, and huge
// sizes used to end in "fatal error: out of memory").
func runGuarded(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := atRun(args...)
		done <- result{code, out, errs}
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.stderr
	case <-time.After(10 * time.Second):
		t.Fatalf("%q: still running after 10 s", args)
	}
	return 0, "", ""
}

// nonRegular makes a FIFO in a new directory and returns it, /dev/zero
// and the directory: inputs that are not regular files.
func nonRegular(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // let a reader that got through go
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	return []string{fifo, "/dev/zero", dir}
}

// A -data that is not a regular file is refused at once with one line (a
// FIFO used to hang, /dev/zero to run out of memory); so is a run whose
// model and batches cannot fit (-batch 100000000 -context 100000 used to
// die in an out-of-memory dump), before anything is read.
func TestTrainRefusesBeforeReading(t *testing.T) {
	data := writeText(t)
	for _, p := range nonRegular(t) {
		code, out, errs := runGuarded(t, append([]string{"train", "-data", p, "-steps", "1"}, tinyModel...)...)
		if code != 1 || out != "" {
			t.Errorf("-data %s: exit %d, stdout %q", p, code, out)
		}
		oneLine(t, "-data "+p, errs, "-data: "+p+": not a regular file")
	}
	// Text long enough that validation windows of 100000 bytes exist: the
	// huge runs get past the data and used to die allocating.
	long := filepath.Join(t.TempDir(), "long.txt")
	if err := os.WriteFile(long, []byte(strings.Repeat(trainText, 250)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-data", long, "-batch", "100000000", "-context", "100000"}, 1, []string{"-batch 100000000 -context 100000", "needs", "of memory", "activations"}},
		{[]string{"-data", long, "-batch", "100000000", "-context", "100000", "-compare", "2", "-steps", "2"}, 1, []string{"needs", "plain"}},
		{append([]string{"-max-memory", "1M"}, tinyModel...), 1, []string{"needs", "-max-memory 1.0 MiB"}},
		{[]string{"-max-memory", "lots"}, 2, []string{"-max-memory"}},
	} {
		start := time.Now()
		code, out, errs := runGuarded(t, append([]string{"train", "-data", data}, c.args...)...)
		if code != c.code || out != "" {
			t.Errorf("%q: exit %d, stdout %q", c.args, code, out)
		}
		oneLine(t, fmt.Sprint(c.args), errs, c.want...)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%q: took %v to refuse", c.args, d)
		}
	}
	// A limit that fits lets the run go ahead.
	if code, _, errs := atRun(append([]string{"train", "-data", data, "-steps", "2", "-max-memory", "2G"}, tinyModel...)...); code != 0 {
		t.Errorf("-max-memory 2G: exit %d, %q", code, errs)
	}
}
