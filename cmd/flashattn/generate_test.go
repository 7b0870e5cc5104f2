package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gpt"
)

// TestGenerateErrors checks that bad flags and bad checkpoints exit
// non-zero with one line naming the problem, and print no text.
func TestGenerateErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.ckpt")
	if err := os.WriteFile(garbage, []byte("FAGPT001 but nothing else"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 1, "-model is required"},
		{[]string{"-model", filepath.Join(dir, "missing")}, 1, "-model"},
		{[]string{"-model", garbage}, 1, "not a valid checkpoint"},
		{[]string{"-model", garbage, "-tokens", "-1"}, 1, "-tokens"},
		{[]string{"-model", garbage, "-temperature", "-0.5"}, 1, "-temperature"},
		{[]string{"-model", garbage, "-temperature", "NaN"}, 1, "-temperature"},
		{[]string{"-model", garbage, "-workers", "-2"}, 1, "-workers"},
		{[]string{"-model"}, 2, "flag needs an argument"},
	} {
		code, out, errs := atRun(append([]string{"generate"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) || out != "" || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d mentioning %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
}

// A -model that is not a regular file is refused at once with one line (a
// FIFO used to hang, /dev/zero to run out of memory), and so is a
// well-formed checkpoint whose model cannot fit (context 2^20 and 1024
// layers in a 37 MB file used to die in an out-of-memory dump building
// its 64 GiB KV cache), from its header, before the rest is read.
func TestGenerateRefusesBeforeReading(t *testing.T) {
	for _, p := range nonRegular(t) {
		code, out, errs := runGuarded(t, "generate", "-model", p)
		if code != 1 || out != "" {
			t.Errorf("-model %s: exit %d, stdout %q", p, code, out)
		}
		oneLine(t, "-model "+p, errs, "-model: "+p+": not a regular file")
	}
	dir := t.TempDir()
	huge := gpt.Config{Vocab: 256, Context: 1 << 20, Layers: 1024, Heads: 2, Dim: 8}
	b, err := gpt.EncodeCheckpoint(huge, gpt.NewParams(huge), 1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "huge.ckpt")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tiny := gpt.Config{Vocab: 256, Context: 16, Layers: 1, Heads: 1, Dim: 8}
	b, err = gpt.EncodeCheckpoint(tiny, gpt.NewParams(tiny), 1)
	if err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "tiny.ckpt")
	if err := os.WriteFile(small, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-model", path}, 1, []string{"-model " + path, "1024 layers", "context 1048576", "needs", "decoder"}},
		{[]string{"-model", small, "-max-memory", "64K"}, 1, []string{"needs", "-max-memory 64.0 KiB"}},
		{[]string{"-model", small, "-max-memory", "-1"}, 2, []string{"-max-memory"}},
	} {
		start := time.Now()
		code, out, errs := runGuarded(t, append([]string{"generate"}, c.args...)...)
		if code != c.code || out != "" {
			t.Errorf("%q: exit %d, stdout %q", c.args, code, out)
		}
		oneLine(t, fmt.Sprint(c.args), errs, c.want...)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%q: took %v to refuse", c.args, d)
		}
	}
	if code, out, errs := atRun("generate", "-model", small, "-tokens", "5", "-max-memory", "1G"); code != 0 || len(out) != len("package main\n")+5+1 {
		t.Errorf("tiny model: exit %d, %q, %q", code, out, errs)
	}
}
