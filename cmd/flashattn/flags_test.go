package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every flag of every command is validated before anything runs: a bad
// value or a flag that the run would ignore exits non-zero with one stderr
// line per problem, naming the flag, and prints nothing on stdout
// ("train -compare -5" used to start the default training run, "demo
// -workers -2" was accepted).
func TestEveryFlagValidated(t *testing.T) {
	data := writeText(t)
	dir := t.TempDir()
	in := atInputs(t, dir)
	train := func(args ...string) []string {
		return append(append([]string{"train", "-data", data, "-steps", "2"}, tinyModel...), args...)
	}
	for _, c := range []struct {
		args []string
		want []string // one stderr line each, containing this
	}{
		{train("-compare", "-5"), []string{"-compare -5: want at least 0"}},
		{train("-lr", "Inf"), []string{"-lr +Inf: want a finite value > 0"}},
		{train("-lr", "NaN"), []string{"-lr NaN"}},
		{train("-min-lr", "1"), []string{"-min-lr 1: want a finite value in [0, -lr 0.01]"}},
		{train("-weight-decay", "NaN"), []string{"-weight-decay NaN"}},
		{train("-clip", "-1"), []string{"-clip -1"}},
		{train("-clip", "Inf"), []string{"-clip +Inf"}},
		{train("-warmup", "-1"), []string{"-warmup -1"}},
		{train("-eval-batches", "0"), []string{"-eval-batches 0"}},
		{train("-eval-every", "-1"), []string{"-eval-every -1"}},
		{train("-workers", "-3"), []string{"-workers -3"}},
		{train("-batch", "0"), []string{"-batch 0"}},
		{train("-sweep-tokens", "64"), []string{"-sweep-tokens needs -sweep-context"}},
		{train("-sweep-max", "64"), []string{"-sweep-max needs -sweep-context"}},
		{train("-sweep-context", "-sweep-tokens", "0"), []string{"-sweep-tokens 0"}},
		{train("-sweep-context", "-sweep-steps", "0"), []string{"-sweep-steps 0"}},
		{train("-sweep-context", "-sweep-rounds", "-1"), []string{"-sweep-rounds -1"}},
		{train("-sweep-context", "-sweep-min", "64", "-sweep-max", "32"), []string{"-sweep-max 32"}},
		{train("-sweep-context", "-sweep-min", "2097152", "-sweep-max", "2097152", "-sweep-tokens", "2097152"), []string{"-sweep-max 2097152: model: context"}},
		{train("-save", filepath.Join(dir, "nodir", "m.ckpt")), []string{"-save " + filepath.Join(dir, "nodir", "m.ckpt") + ": directory"}},
		{train("-save", dir), []string{"-save " + dir + " is a directory"}},
		{train("-compare", "2", "-svg", filepath.Join(dir, "nodir", "f.svg")), []string{"-svg " + filepath.Join(dir, "nodir", "f.svg") + ": directory"}},
		{[]string{"demo", "-workers", "-2"}, []string{"-workers -2: must be ≥ 0"}},
		{[]string{"demo", "-kv-heads", "-1"}, []string{"-kv-heads -1"}},
		{[]string{"bench", "-deterministic"}, []string{"-deterministic needs -device gpu"}},
		{[]string{"bench", "-device", "gpu", "-variant", "alibi", "-reps", "3"}, []string{"-variant is not used with -device gpu", "-reps is not used with -device gpu"}},
		{[]string{"bench", "-device", "gpu", "-mode", "decode"}, []string{"-mode decode is not measured with -device gpu"}},
		{append(slices.Clone(in), "-o", filepath.Join(dir, "o"), "-deterministic"), []string{"-deterministic needs -device gpu"}},
		{[]string{"generate", "-model", data, "-workers", "-1"}, []string{"-workers -1"}},
		{[]string{"io", "-seqlen", "0"}, []string{"-seqlen 0"}},
		{[]string{"merge", "-o", filepath.Join(dir, "m")}, []string{"give at least one DIR"}},
	} {
		name := fmt.Sprint(c.args)
		start := time.Now()
		code, stdout, stderr := runGuarded(t, c.args...)
		if code != 1 || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q", name, code, stdout)
		}
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if len(lines) != len(c.want) {
			t.Errorf("%s: %d stderr lines, want %d: %q", name, len(lines), len(c.want), stderr)
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(lines[i], "flashattn "+c.args[0]+": ") || !strings.Contains(lines[i], w) {
				t.Errorf("%s: stderr line %q, want %q", name, lines[i], w)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %v to refuse", name, d)
		}
	}
}
