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
// -json and checks the reported fields: medians inside their ranges, the
// peak of the kernel path that ran, and for decode both bandwidths.
func TestBenchSingleCase(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "fwd", "-causal"},
		{"-mode", "bwd", "-reps", "4"},
		{"-mode", "fwdbwd", "-variant", "window", "-window", "16"},
		{"-mode", "fwd", "-variant", "softcap"},
		{"-mode", "fwd", "-variant", "alibi", "-no-plain"},
		{"-mode", "fwd", "-variant", "dropout"},
		{"-mode", "decode", "-heads", "8", "-kv-heads", "2", "-bw-size", "4M"},
	} {
		full := append([]string{"bench", "-seqlen", "96", "-headdim", "32", "-batch", "1", "-json", "-min-ms", "1", "-reps", "3"}, args...)
		var out, errb bytes.Buffer
		if code := run(full, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		var r benchResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %v in %q", args, err, out.String())
		}
		in := func(s spread) bool { return s.Min > 0 && s.Min <= s.Median && s.Median <= s.Max }
		reps := 3
		if args[1] == "bwd" {
			reps = 4
		}
		if r.Reps != reps || r.Calls < 1 || r.Seconds <= 0 || !in(r.gflops()) || !in(r.peak()) || !in(r.peakRatio()) ||
			r.SeqlenK != 96 || r.Headdim != 32 || r.PeakISA != r.Kernel {
			t.Fatalf("%v: implausible result %+v", args, r)
		}
		// Medians of per-repetition ratios lie within the ratios of the
		// extremes.
		if r.PeakRatioMedian < r.GFlopsMin/r.PeakMax || r.PeakRatioMedian > r.GFlopsMax/r.PeakMin {
			t.Fatalf("%v: peak ratio %v outside [%v, %v]", args, r.PeakRatioMedian, r.GFlopsMin/r.PeakMax, r.GFlopsMax/r.PeakMin)
		}
		wantPlain := r.Variant == "" && r.Mode != "decode"
		if wantPlain != (r.PlainCalls > 0) || wantPlain && (!in(r.plainGFlops()) || !in(r.speedup())) {
			t.Fatalf("%v: plain fields %+v", args, r)
		}
		if r.Mode == "decode" {
			kv, rd, cp := spread{r.KVGBpsMedian, r.KVGBpsMin, r.KVGBpsMax}, spread{r.ReadGBpsMedian, r.ReadGBpsMin, r.ReadGBpsMax}, spread{r.CopyGBpsMedian, r.CopyGBpsMin, r.CopyGBpsMax}
			if r.SeqlenQ != 1 || !in(kv) || !in(rd) || !in(cp) || r.ReadRatioMedian <= 0 || r.CopyRatioMedian <= 0 || r.BandwidthBytes != 4<<20 {
				t.Fatalf("decode result %+v", r)
			}
		}
	}
}

// The table names the kernel, the peak's ISA and every column, with
// medians and ranges.
func TestBenchTable(t *testing.T) {
	code, stdout, stderr := atRun("bench", "-seqlen", "64", "-headdim", "16", "-batch", "1", "-heads", "2", "-min-ms", "1", "-reps", "2")
	if code != 0 {
		t.Fatalf("exit %d, %q", code, stderr)
	}
	for _, want := range []string{"FMA peak loop of the", "% of peak", "GFLOP/s", "plain GFLOP/s", "speedup", "–"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = atRun("bench", "-seqlen", "64", "-headdim", "16", "-mode", "decode", "-heads", "4", "-kv-heads", "2", "-min-ms", "1", "-reps", "2", "-bw-size", "2M")
	if code != 0 || !strings.Contains(stdout, "of the read-only bandwidth") || !strings.Contains(stdout, "of the copy bandwidth (bytes read + written)") {
		t.Fatalf("decode table: exit %d, %q\n%s", code, stderr, stdout)
	}
}
