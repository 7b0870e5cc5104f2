package main

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/reference"
)

// TestBenchVHeadDim: -v-headdim gives V, O and dO their own head dim in
// fwd, bwd and fwdbwd: the FLOPs count 2·(D+DV) per visible pair forward,
// 2·(3D+2DV) backward (4·D and 10·D when DV = D), and the plain algorithm
// (one head dim) is skipped with the reason.
func TestBenchVHeadDim(t *testing.T) {
	const b, h, n, d, dv = 1, 4, 96, 32, 16
	pairs := float64(n * n)
	causalPairs := float64(n * (n + 1) / 2)
	for _, c := range []struct {
		args    []string
		perPair float64
		pairs   float64
	}{
		{[]string{"-mode", "fwd", "-v-headdim", "16"}, 2 * (d + dv), pairs},
		{[]string{"-mode", "bwd", "-v-headdim", "16", "-causal"}, 2 * (3*d + 2*dv), causalPairs},
		{[]string{"-mode", "fwdbwd", "-v-headdim", "16"}, 2 * (4*d + 3*dv), pairs},
		{[]string{"-mode", "fwd", "-v-headdim", "48", "-dtype", "bf16"}, 2 * (d + 48), pairs},
		{[]string{"-mode", "fwdbwd"}, 3.5 * 4 * d, pairs}, // the rule, DV = D
		{[]string{"-mode", "bwd", "-v-headdim", "32"}, 2.5 * 4 * d, pairs},
	} {
		r := benchJSON(t, c.args...)
		wantDV := d
		for i, a := range c.args {
			if a == "-v-headdim" {
				wantDV = map[string]int{"16": 16, "48": 48, "32": 32}[c.args[i+1]]
			}
		}
		want := float64(b*h) * c.pairs * c.perPair
		if r.HeaddimV != wantDV || r.Headdim != d || r.Latent || math.Abs(r.FlopsPerCall-want) > 1e-9*want {
			t.Fatalf("%v: headdim %d/%d, latent %v, %v FLOPs, want %v", c.args, r.Headdim, r.HeaddimV, r.Latent, r.FlopsPerCall, want)
		}
		if got := r.FlopsPerCall / r.Seconds / 1e9; math.Abs(got-r.GFlopsMedian) > 1e-9*got {
			t.Errorf("%v: %v GFLOP/s, FLOPs/time %v", c.args, r.GFlopsMedian, got)
		}
		plain := wantDV == d && !strings.Contains(strings.Join(c.args, " "), "bf16 ")
		if plain != (r.PlainCalls > 0) || !plain && wantDV != d && r.PlainSkipped != "the plain algorithm takes one head dim for Q, K and V" {
			t.Errorf("%v: plain calls %d, skipped %q", c.args, r.PlainCalls, r.PlainSkipped)
		}
	}
}

// TestBenchDecodeMLA: a decode case with -v-headdim < -headdim reads an
// MLA latent cache (V a view of K's first DV columns): the bytes per token
// are one row of D values in the cache's type, the FLOPs 2·B·H·N·(D+DV),
// and the report says which bound applies from the arithmetic intensity
// and the machine balance (the peak of the case's product path over the
// read-only bandwidth). With -v-headdim > -headdim the caches are two.
func TestBenchDecodeMLA(t *testing.T) {
	const b, n, hk, h = 1, 96, 1, 8
	for _, c := range []struct {
		dtype    string
		d, dv    int
		latent   bool
		perValue float64
	}{
		{"f32", 64, 32, true, 4},
		{"bf16", 64, 32, true, 2},
		{"q8_0", 64, 32, true, 34.0 / 32},
		{"f16", 32, 64, false, 2},
		{"f32", 32, 32, false, 4},
	} {
		args := []string{"-mode", "decode", "-heads", "8", "-kv-heads", "1", "-headdim", strconv.Itoa(c.d), "-v-headdim", strconv.Itoa(c.dv), "-dtype", c.dtype}
		full := append([]string{"bench", "-seqlen", "96", "-batch", "1", "-json", "-min-ms", "1", "-reps", "3", "-bw-size", "2M"}, args...)
		code, stdout, stderr := atRun(full...)
		if code != 0 {
			t.Fatalf("%v: exit %d, %q", args, code, stderr)
		}
		var r benchResult
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%v: %v in %q", args, err, stdout)
		}
		cols := c.d + c.dv
		if c.latent {
			cols = c.d
		}
		perToken := float64(hk*cols) * c.perValue
		flops := 2 * float64(b*h*n) * float64(c.d+c.dv)
		if r.Latent != c.latent || r.KVBytesPerToken != perToken || r.KVBytesPerCall != uint64(b*n*perToken) ||
			math.Abs(r.FlopsPerCall-flops) > 1e-9*flops || math.Abs(r.FlopPerByte-flops/(b*n*perToken)) > 1e-9*r.FlopPerByte {
			t.Fatalf("%v: latent %v, %v bytes per token (want %v), %d per call, %v FLOPs (want %v), %v FLOP/byte",
				args, r.Latent, r.KVBytesPerToken, perToken, r.KVBytesPerCall, r.FlopsPerCall, flops, r.FlopPerByte)
		}
		peak, path := r.PeakMedian, "FMA peak of the "+r.PeakISA+" path"
		if c.dtype == "bf16" || c.dtype == "f16" {
			peak, path = r.PeakHalfMedian, c.dtype+" peak of the "+r.PeakHalfPath+" path"
		}
		wantBound := "memory"
		if r.FlopPerByte > peak/r.ReadGBpsMedian {
			wantBound = "compute"
		}
		if r.BoundPeak != path || math.Abs(r.BalanceFlopPerByte-peak/r.ReadGBpsMedian) > 1e-9*r.BalanceFlopPerByte || r.Bound != wantBound {
			t.Errorf("%v: bound %q by %q at balance %v, want %q by %q at %v", args, r.Bound, r.BoundPeak, r.BalanceFlopPerByte, wantBound, path, peak/r.ReadGBpsMedian)
		}
	}
	// The table says it in words.
	code, stdout, stderr := atRun("bench", "-seqlen", "64", "-batch", "1", "-mode", "decode", "-heads", "16", "-kv-heads", "1", "-headdim", "64",
		"-v-headdim", "32", "-min-ms", "1", "-reps", "2", "-bw-size", "2M", "-dtype", "bf16")
	if code != 0 {
		t.Fatalf("exit %d, %q", code, stderr)
	}
	for _, want := range []string{"64/32", "MLA latent bf16 cache of headdim 64 whose first 32 columns are V", "(8.0 KiB per call, 128 bytes per token)",
		"of the FMA peak (avx", "of the bf16 peak (", "2·B·H·N·(D+DV)", "-bound: 24 FLOP per byte read is", "over the read-only bandwidth)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("decode table lacks %q:\n%s", want, stdout)
		}
	}
}

// The V of the bench's MLA latent cache is the first DV columns of K: a
// decode call on the bench's tensors matches the reference with that V.
func TestBenchLatentView(t *testing.T) {
	c := benchCase{shape: shape{B: 2, H: 4, Hk: 2, N: 40, D: 64, DV: 32}, Mode: "decode", DType: flashattn.Float32}
	in := randomInputsV(c.shape, 1, 3, false)
	ts, err := newBenchTensors(c, in, flashattn.Float32)
	if err != nil {
		t.Fatal(err)
	}
	run, runErr := ts.runner("decode", c.options(1))
	run()
	if err := runErr(); err != nil {
		t.Fatal(err)
	}
	var v []float32
	for row := 0; row < c.B*c.N*c.Hk; row++ {
		v = append(v, in.k[row*c.D:row*c.D+c.DV]...)
	}
	p := reference.Params{Batch: c.B, SeqQ: 1, SeqK: c.N, Heads: c.H, KVHeads: c.Hk, HeadDim: c.D, HeadDimV: c.DV}
	o64, l64 := reference.Forward64(p, atTo64(in.q), atTo64(in.k), atTo64(v))
	o32, l32 := reference.Forward32(p, in.q, in.k, v)
	if err := reference.Check("O", ts.out.Data, o32, o64); err != nil {
		t.Error(err)
	}
	if err := reference.Check("LSE", ts.lse, l32, l64); err != nil {
		t.Error(err)
	}
}

func TestBenchVHeadDimErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-v-headdim", "-1"}, "-v-headdim -1: must be ≥ 0"},
		{[]string{"-dtype", "q8_0", "-mode", "decode", "-seqlen", "64", "-headdim", "64", "-v-headdim", "48"}, "-dtype q8_0 needs a -v-headdim that is a multiple of 32"},
		{[]string{"-device", "gpu", "-v-headdim", "64"}, "-v-headdim is not used with -device gpu"},
	} {
		code, stdout, stderr := atRun(append([]string{"bench"}, c.args...)...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, "flashattn bench: "+c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want one line with %q", c.args, code, stderr, c.want)
		}
	}
}
