package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestDemo runs the README's main job on a small shape.
func TestDemo(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-seqlen", "200", "-heads", "2", "-headdim", "24"},
		{"demo", "-seqlen", "130", "-heads", "4", "-kv-heads", "2", "-headdim", "64", "-causal", "-no-plain"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		for _, want := range []string{"forward", "backward", "flashattn", "GFLOP/s", "max err"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("%v: output lacks %q:\n%s", args, want, out.String())
			}
		}
		// The errors against float64 must be small: parse the last two
		// columns of the flashattn lines.
		for _, line := range strings.Split(out.String(), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || f[1] != "flashattn" {
				continue
			}
			for _, e := range f[len(f)-2:] {
				if e == "-" {
					continue
				}
				var v float64
				if err := json.Unmarshal([]byte(e), &v); err != nil || v > 1e-5 {
					t.Fatalf("%v: error column %q in %q", args, e, line)
				}
			}
		}
	}
	var errb bytes.Buffer
	if code := run([]string{"demo", "-heads", "3", "-kv-heads", "2"}, &bytes.Buffer{}, &errb); code == 0 || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("bad shape: exit %d, stderr %q", code, errb.String())
	}
}

// TestBenchSingleCase runs one small case of each mode and variant with
// -json and checks the reported fields.
func TestBenchSingleCase(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "fwd", "-causal"},
		{"-mode", "bwd"},
		{"-mode", "fwdbwd", "-variant", "window", "-window", "16"},
		{"-mode", "fwd", "-variant", "softcap"},
		{"-mode", "fwd", "-variant", "alibi"},
		{"-mode", "fwd", "-variant", "dropout"},
		{"-mode", "decode", "-heads", "8", "-kv-heads", "2"},
	} {
		full := append([]string{"bench", "-seqlen", "96", "-headdim", "32", "-batch", "1", "-json", "-min-ms", "1"}, args...)
		var out, errb bytes.Buffer
		if code := run(full, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		var r benchResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %v in %q", args, err, out.String())
		}
		if r.Seconds <= 0 || r.GFlops <= 0 || r.PeakGFlops <= 0 || r.SeqlenK != 96 || r.Headdim != 32 {
			t.Fatalf("%v: implausible result %+v", args, r)
		}
		if r.Mode == "decode" && (r.SeqlenQ != 1 || r.GBps <= 0 || r.CopyGBps <= 0) {
			t.Fatalf("decode result %+v", r)
		}
	}
	var errb bytes.Buffer
	if code := run([]string{"bench", "-seqlen", "64", "-mode", "sideways"}, &bytes.Buffer{}, &errb); code == 0 || !strings.Contains(errb.String(), "-mode") {
		t.Fatalf("bad mode: exit %d, stderr %q", code, errb.String())
	}
}
