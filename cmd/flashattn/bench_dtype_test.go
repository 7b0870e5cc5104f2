package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

// benchJSON runs bench with -json on one small case and decodes its line.
func benchJSON(t *testing.T, args ...string) benchResult {
	t.Helper()
	full := append([]string{"bench", "-seqlen", "96", "-headdim", "32", "-batch", "1", "-heads", "4", "-kv-heads", "2",
		"-json", "-min-ms", "1", "-reps", "3", "-bw-size", "2M"}, args...)
	code, stdout, stderr := atRun(full...)
	if code != 0 {
		t.Fatalf("%v: exit %d, %q", args, code, stderr)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %v in %q", args, err, stdout)
	}
	return r
}

// in reports whether a spread is positive and ordered.
func in(s spread) bool { return s.Min > 0 && s.Min <= s.Median && s.Median <= s.Max }

// TestBenchDType: -dtype bf16 and f16 run flashattn on tensors of that
// type and report the 16-bit product path's peak (the path the library
// uses, forced or measured) beside the FP32 FMA peak, float32 flashattn
// beside the case, and the float32 plain algorithm; f32 reports none of
// the 16-bit fields; -no-f32 drops float32 flashattn.
func TestBenchDType(t *testing.T) {
	for _, c := range []struct {
		dtype string
		elem  kernel.Elem
		force string // the path forced with kernel.Force, "" for the measured choice
		args  []string
	}{
		{"bf16", kernel.BF16, "", []string{"-mode", "fwdbwd", "-causal"}},
		{"f16", kernel.F16, "", []string{"-mode", "fwd"}},
		{"bf16", kernel.BF16, "generic", []string{"-mode", "bwd", "-variant", "softcap"}},
	} {
		r, path := func() (benchResult, string) {
			if c.force != "" {
				restore, err := kernel.Force(c.elem.String() + "=" + c.force)
				if err != nil {
					t.Fatal(err)
				}
				defer restore()
			}
			return benchJSON(t, append([]string{"-dtype", c.dtype}, c.args...)...), kernel.Active().Half(c.elem).Name
		}()
		if c.force != "" && path != c.force {
			t.Fatalf("%s=%s: the library uses %s", c.elem, c.force, path)
		}
		half := spread{r.PeakHalfMedian, r.PeakHalfMin, r.PeakHalfMax}
		hr := spread{r.PeakHalfRatioMedian, r.PeakHalfRatioMin, r.PeakHalfRatioMax}
		hv := spread{r.PeakHalfVsF32Median, r.PeakHalfVsF32Min, r.PeakHalfVsF32Max}
		f32 := spread{r.F32GFlopsMedian, r.F32GFlopsMin, r.F32GFlopsMax}
		fs := spread{r.F32SpeedupMedian, r.F32SpeedupMin, r.F32SpeedupMax}
		if r.DType != c.dtype || r.PeakHalfPath != path || !in(half) || !in(hr) || !in(hv) || !in(f32) || !in(fs) || r.F32Calls < 1 || !in(r.gflops()) || !in(r.peak()) {
			t.Fatalf("%s %v: result %+v", c.dtype, c.args, r)
		}
		// Ratios within a repetition lie within the ratios of the extremes.
		if r.PeakHalfVsF32Median < r.PeakHalfMin/r.PeakMax || r.PeakHalfVsF32Median > r.PeakHalfMax/r.PeakMin {
			t.Errorf("half peak / FMA peak %v outside [%v, %v]", r.PeakHalfVsF32Median, r.PeakHalfMin/r.PeakMax, r.PeakHalfMax/r.PeakMin)
		}
		if r.F32SpeedupMedian < r.GFlopsMin/r.F32GFlopsMax || r.F32SpeedupMedian > r.GFlopsMax/r.F32GFlopsMin {
			t.Errorf("speedup over f32 %v outside [%v, %v]", r.F32SpeedupMedian, r.GFlopsMin/r.F32GFlopsMax, r.GFlopsMax/r.F32GFlopsMin)
		}
		if (r.Variant == "") != (r.PlainCalls > 0) {
			t.Errorf("plain calls %d for variant %q", r.PlainCalls, r.Variant)
		}
	}
	r := benchJSON(t, "-mode", "fwd")
	if r.DType != "f32" || r.PeakHalfPath != "" || r.PeakHalfMedian != 0 || r.F32Calls != 0 || r.F32GFlopsMedian != 0 {
		t.Errorf("f32: %+v", r)
	}
	r = benchJSON(t, "-mode", "fwd", "-dtype", "f16", "-no-f32")
	if r.F32Calls != 0 || r.F32GFlopsMedian != 0 || r.PeakHalfMedian <= 0 {
		t.Errorf("-no-f32: %+v", r)
	}
}

// TestBenchDecodeDType: decode reads a cache of each type through a KV
// cache call; its GB/s count the bytes that type stores (4, 2, or 34 per
// 32 values for q8_0) and float32 decode runs beside the others.
func TestBenchDecodeDType(t *testing.T) {
	const b, n, hk, d = 1, 96, 2, 32
	for dt, per := range map[string]float64{"f32": 4, "bf16": 2, "f16": 2, "q8_0": 34.0 / 32, "fp8_e4m3": 1, "fp8_e5m2": 1} {
		r := benchJSON(t, "-mode", "decode", "-dtype", dt)
		want := uint64(2 * b * n * hk * d * per)
		kv := spread{r.KVGBpsMedian, r.KVGBpsMin, r.KVGBpsMax}
		if r.DType != dt || r.KVBytesPerCall != want || !in(kv) || r.SeqlenQ != 1 {
			t.Fatalf("%s: kv bytes %d (want %d), result %+v", dt, r.KVBytesPerCall, want, r)
		}
		// With an odd number of repetitions the median rate is the bytes
		// over the median time.
		if got := float64(r.KVBytesPerCall) / r.Seconds / 1e9; math.Abs(got-r.KVGBpsMedian) > 1e-9*got {
			t.Errorf("%s: %v GB/s, bytes/time %v", dt, r.KVGBpsMedian, got)
		}
		if (dt != "f32") != (r.F32Calls > 0) || (dt == "bf16" || dt == "f16") != (r.PeakHalfMedian > 0) {
			t.Errorf("%s: f32 calls %d, half peak %v", dt, r.F32Calls, r.PeakHalfMedian)
		}
	}
}

// The table of a 16-bit run shows both peaks, float32 flashattn and the
// note that plain is float32; a q8_0 decode names its cache type.
func TestBenchDTypeTable(t *testing.T) {
	code, stdout, stderr := atRun("bench", "-seqlen", "64", "-headdim", "16", "-batch", "1", "-heads", "2", "-min-ms", "1", "-reps", "2", "-dtype", "bf16")
	if code != 0 {
		t.Fatalf("exit %d, %q", code, stderr)
	}
	for _, want := range []string{"bf16 peak loop of the", "bf16 peak (", "× the FMA peak", "% of bf16 peak", "f32 GFLOP/s", "vs f32",
		"flashattn's tensors are bf16; the plain algorithm is float32", "plain GFLOP/s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = atRun("bench", "-seqlen", "64", "-headdim", "32", "-mode", "decode", "-heads", "4", "-kv-heads", "2",
		"-min-ms", "1", "-reps", "2", "-bw-size", "2M", "-dtype", "q8_0")
	if code != 0 {
		t.Fatalf("exit %d, %q", code, stderr)
	}
	for _, want := range []string{"q8_0 cache", "the speed of the float32 cache", "(the cache; queries float32)", "of the copy bandwidth"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("decode table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBenchDTypeErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-dtype", "q8_0", "-seqlen", "64"}, "-dtype q8_0 is a KV-cache type: it needs -mode decode"},
		{[]string{"-dtype", "q8_0", "-mode", "decode", "-seqlen", "64", "-headdim", "48"}, "-dtype q8_0 needs a -headdim that is a multiple of 32"},
		{[]string{"-dtype", "int8"}, `-dtype "int8": want f32, bf16, f16, q8_0, q4_0, fp8_e4m3 or fp8_e5m2`},
		{[]string{"-dtype", "f32", "-device", "gpu"}, `-dtype "f32": want bf16 or f16 with -device gpu`},
	} {
		code, stdout, stderr := atRun(append([]string{"bench"}, c.args...)...)
		if code == 0 || stdout != "" || !strings.Contains(stderr, "flashattn bench: "+c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want one line with %q", c.args, code, stderr, c.want)
		}
	}
}
