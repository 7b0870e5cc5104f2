package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// TestBenchServe: -mode serve measures one continuous-batching step (a
// small one here) three ways — one mixed VarLen call, one call per kind,
// one per sequence — and reports each run's time, tokens per second and
// fraction of a roofline whose bandwidth and peak it measured in the same
// run; the table names the CPU and every run; bad serve flags are refused.
func TestBenchServe(t *testing.T) {
	args := []string{"bench", "-mode", "serve", "-serve-decode", "5", "-serve-ctx-min", "40", "-serve-ctx-max", "200", "-serve-chunk", "48",
		"-serve-prefix", "100", "-serve-spec", "2", "-serve-spec-tokens", "3", "-serve-block", "32",
		"-heads", "4", "-kv-heads", "2", "-headdim", "32", "-min-ms", "1", "-reps", "3", "-bw-size", "2M"}
	for _, dt := range []string{"f32", "bf16", "q4_0"} {
		code, stdout, stderr := atRun(append(args, "-dtype", dt, "-json")...)
		if code != 0 {
			t.Fatalf("%s: exit %d, %q", dt, code, stderr)
		}
		var r serveResult
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%s: %v in %q", dt, err, stdout)
		}
		if r.Tokens != 5+48+2*3 || len(r.Runs) != 3 || !in(r.ReadGBs) || !in(r.PeakGFlops) || r.CPU == "" {
			t.Fatalf("%s: %+v", dt, r)
		}
		// The cache bytes: every sequence's cached and new keys, k and v.
		keys := 0
		for i := range 5 {
			keys += 40 + 160*i/4 + 1
		}
		keys += 100 + 48 + 2*(40+3)
		if want := float64(keys) * 2 * 2 * 32 * storedBytes(r.parseDType(t)); r.CacheBytes != want {
			t.Errorf("%s: cache bytes %v, want %v", dt, r.CacheBytes, want)
		}
		// Every run is timed first after the meters in one repetition of
		// the three (the mixed call always was).
		firsts := map[int]int{}
		for _, o := range r.Order {
			if len(o) != 3 {
				t.Fatalf("%s: order %v", dt, r.Order)
			}
			firsts[o[0]]++
		}
		if len(r.Order) != 3 || firsts[0] != 1 || firsts[1] != 1 || firsts[2] != 1 {
			t.Errorf("%s: the runs were timed in the order %v, want each first once", dt, r.Order)
		}
		for i, x := range r.Runs {
			if want := []int{1, 3, 8}[i]; x.Calls != want || !in(x.Seconds) || x.TokensSec <= 0 || !(x.Roofline > 0) {
				t.Errorf("%s: run %+v, want %d calls and positive figures", dt, x, want)
			}
		}
	}
	code, stdout, stderr := atRun(args...)
	for _, want := range []string{"one mixed call", "one call per kind", "one call per sequence", "roofline", "tokens/s"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("table: exit %d, %q lacks %q (%s)", code, stdout, want, stderr)
		}
	}
	for _, bad := range [][]string{{"-serve-block", "40"}, {"-serve-ctx-max", "10"}, {"-seqlen", "64"}} {
		code, _, stderr := atRun(append(args, bad...)...)
		if code == 0 || !strings.Contains(stderr, bad[0]) {
			t.Errorf("%v: exit %d, stderr %q", bad, code, stderr)
		}
	}
}

// parseDType is the cache type the result names.
func (r serveResult) parseDType(t *testing.T) flashattn.DType {
	dt, err := parseDType("-dtype", r.DType, true)
	if err != nil {
		t.Fatal(err)
	}
	return dt
}
