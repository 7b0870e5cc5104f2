package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// TestBenchServe: -mode serve measures one continuous-batching step (a
// small one here) three ways — one mixed VarLen call, one call per kind,
// one per sequence — and reports each run's time, tokens per second and
// fraction of a roofline whose bandwidth and peak it measured in the same
// run, and of the compute-aware roofline (per sequence the larger of its
// bytes at that bandwidth and its FLOPs at that peak) with the parts it
// finds compute-bound; the table names the CPU, every run and every part;
// bad serve flags are refused.
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
			if want := r.ComputeRooflineSeconds / x.Seconds.Median; !(x.ComputeRoofline > 0) || math.Abs(x.ComputeRoofline-want) > 1e-9*want {
				t.Errorf("%s: run %s: compute-aware roofline fraction %v, want %v", dt, x.Name, x.ComputeRoofline, want)
			}
		}
		checkServeParts(t, dt, r)
	}
	code, stdout, stderr := atRun(args...)
	for _, want := range []string{"one mixed call", "one call per kind", "one call per sequence", "roofline", "tokens/s",
		"compute-aware roofline", "compute rf", "decode rows", "prompt chunk", "speculative rows", "-bound"} {
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

// checkServeParts checks the compute-aware roofline of the step
// TestBenchServe runs against its sequences: the parts' bytes and FLOPs
// (decode rows' and speculative rows' products counted too), which
// sequences are compute-bound at the measured peak and bandwidth, and the
// sum of their times.
func checkServeParts(t *testing.T, dt string, r serveResult) {
	t.Helper()
	type seq struct{ ctx, new int }
	kinds := map[string][]seq{"prompt chunk": {{100, 48}}, "speculative rows": {{40, 3}, {40, 3}}}
	for i := range 5 {
		kinds["decode rows"] = append(kinds["decode rows"], seq{40 + 160*i/4, 1})
	}
	bw, peak := r.ReadGBs.Median*1e9, r.PeakGFlops.Median*1e9
	if len(r.Parts) != 3 || !(peak > 0) || math.Abs(r.Balance-peak/bw) > 1e-9*r.Balance {
		t.Fatalf("%s: parts %+v, balance %v, want 3 parts and %v", dt, r.Parts, r.Balance, peak/bw)
	}
	const h, hk, d = 4, 2, 32
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	total := 0.0
	for _, p := range r.Parts {
		var bytes, flops, secs float64
		bound := 0
		for _, q := range kinds[p.Kind] {
			b := float64((q.ctx+q.new)*hk*2*d) * storedBytes(r.parseDType(t))
			f := float64(2*2*d*h) * (float64(q.new*q.ctx) + float64(q.new*(q.new+1))/2)
			bytes, flops = bytes+b, flops+f
			if f/peak > b/bw {
				bound++
				secs += f / peak
			} else {
				secs += b / bw
			}
		}
		if p.Seqs != len(kinds[p.Kind]) || !near(p.CacheBytes, bytes) || !near(p.Flops, flops) || !near(p.Intensity, flops/bytes) ||
			p.ComputeBound != bound || !near(p.RooflineSeconds, secs) {
			t.Errorf("%s: part %+v, want %d sequences, %v bytes, %v FLOPs, %d compute-bound, %v s", dt, p, len(kinds[p.Kind]), bytes, flops, bound, secs)
		}
		total += secs
	}
	if !near(r.ComputeRooflineSeconds, total) {
		t.Errorf("%s: compute-aware roofline %v s, want %v (the parts' sum)", dt, r.ComputeRooflineSeconds, total)
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
