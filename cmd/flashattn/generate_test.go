package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
