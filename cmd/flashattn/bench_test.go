package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/kernel"
)

// Every bench flag is checked before anything is measured, with or without
// -seqlen: one line per bad flag and a non-zero exit (bad flags used to be
// ignored without -seqlen, and the full sweep started).
func TestBenchFlagValidation(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // one stderr line each
	}{
		{[]string{"-mode", "sideways"}, []string{"-mode"}},
		{[]string{"-variant", "turbo"}, []string{"-variant"}},
		{[]string{"-headdim", "0"}, []string{"-headdim"}},
		{[]string{"-batch", "-1"}, []string{"-batch"}},
		{[]string{"-heads", "-2"}, []string{"-heads"}},
		{[]string{"-kv-heads", "-1"}, []string{"-kv-heads"}},
		{[]string{"-seqlen", "-5"}, []string{"-seqlen"}},
		{[]string{"-window", "-1"}, []string{"-window"}},
		{[]string{"-workers", "-1"}, []string{"-workers"}},
		{[]string{"-reps", "0"}, []string{"-reps"}},
		{[]string{"-min-ms", "-1"}, []string{"-min-ms"}},
		{[]string{"-heads", "6", "-kv-heads", "4"}, []string{"-kv-heads 4"}},
		{[]string{"-kv-heads", "3"}, []string{"-kv-heads 3"}},
		{[]string{"-svg", "/nonexistent/dir/fig.svg"}, []string{"-svg"}},
		{[]string{"-svg", "/tmp/x.svg", "-mode", "decode"}, []string{"-svg"}},
		{[]string{"-mode", "decode", "-headdim", "32"}, []string{"no case of the sweep"}},
		{[]string{"-mode", "sideways", "-variant", "x", "-headdim", "0", "-batch", "-3"}, []string{"-mode", "-variant", "-headdim", "-batch"}},
		{[]string{"-seqlen", "64", "-mode", "sideways", "-reps", "-1"}, []string{"-mode", "-reps"}},
		{[]string{"-variant", "block-sparse", "-density", "0"}, []string{"-density"}},
		{[]string{"-variant", "block-sparse", "-density", "1.5"}, []string{"-density"}},
		{[]string{"-seqlen", "64", "-variant", "block-sparse", "-density", "NaN"}, []string{"-density"}},
		{[]string{"-density", "0.2"}, []string{"-density needs -variant block-sparse"}},
		{[]string{"-seqlen", "64", "-variant", "block-sparse", "-causal"}, []string{"-causal"}},
		{[]string{"-variant", "block-sparse", "-density", "0.3"}, []string{"no case of the sweep"}},
	} {
		done := make(chan [3]string, 1)
		start := time.Now()
		go func() {
			code, stdout, stderr := atRun(append([]string{"bench"}, c.args...)...)
			done <- [3]string{fmt.Sprint(code), stdout, stderr}
		}()
		var r [3]string
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: still running after 20 s (measuring instead of refusing)", c.args)
		}
		if r[0] == "0" || r[1] != "" {
			t.Errorf("%v: exit %s, stdout %q", c.args, r[0], r[1])
		}
		lines := strings.Split(strings.TrimSuffix(r[2], "\n"), "\n")
		if len(lines) != len(c.want) {
			t.Errorf("%v: %d stderr lines, want %d: %q", c.args, len(lines), len(c.want), r[2])
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(lines[i], "flashattn bench: ") || !strings.Contains(lines[i], w) {
				t.Errorf("%v: line %q does not name %q", c.args, lines[i], w)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v: took %v", c.args, d)
		}
	}
}

// Without -seqlen, -mode, -headdim, -causal and -variant select sweep
// cases and -batch, -heads, -kv-heads override their shapes.
func TestBenchSweepSelection(t *testing.T) {
	sel := func(args ...string) []benchCase {
		t.Helper()
		f := benchFlags{set: map[string]bool{}, s: shape{D: 64}, mode: "fwd", window: 256}
		for i := 0; i < len(args); i += 2 {
			name, v := args[i], args[i+1]
			f.set[name] = true
			var n int
			fmt.Sscan(v, &n)
			switch name {
			case "mode":
				f.mode = v
			case "variant":
				f.variant = v
			case "causal":
				f.causal = v == "true"
			case "headdim":
				f.s.D = n
			case "v-headdim":
				f.s.DV = n
			case "batch":
				f.s.B = n
			case "heads":
				f.s.H = n
			case "kv-heads":
				f.s.Hk = n
			case "quick":
				f.quick = v == "true"
			case "density":
				fmt.Sscan(v, &f.density)
			}
		}
		return f.cases()
	}
	all := sel()
	if len(all) != 3*2*2*6+1+4+4 {
		t.Fatalf("full sweep: %d cases", len(all))
	}
	for _, c := range sel("mode", "bwd", "headdim", "128", "causal", "true") {
		if c.Mode != "bwd" || c.D != 128 || !c.Causal || c.Variant != "" || !c.plain {
			t.Errorf("selected %+v", c)
		}
	}
	if n := len(sel("mode", "bwd", "headdim", "128", "causal", "true", "quick", "true")); n != 4 {
		t.Errorf("quick bwd d128 causal: %d cases, want 4", n)
	}
	if cs := sel("variant", "softcap"); len(cs) != 1 || cs[0].Variant != "softcap" || cs[0].plain {
		t.Errorf("softcap: %+v", cs)
	}
	if cs := sel("variant", "block-sparse"); len(cs) != 4 || cs[0].Mode != "fwdbwd" || cs[0].Causal || cs[0].N != 16384 || cs[0].plain {
		t.Errorf("block-sparse: %+v", cs)
	}
	if cs := sel("variant", "block-sparse", "density", "0.2"); len(cs) != 1 || cs[0].Density != 0.2 {
		t.Errorf("block-sparse 0.2: %+v", cs)
	}
	for _, c := range sel("mode", "fwd", "batch", "2", "heads", "4", "kv-heads", "2") {
		if c.B != 2 || c.H != 4 || c.Hk != 2 {
			t.Errorf("overrides not applied: %+v", c)
		}
	}
	if cs := sel("mode", "decode", "heads", "16"); len(cs) != 1 || cs[0].H != 16 || cs[0].Hk != 16 {
		t.Errorf("decode with -heads: %+v", cs)
	}
	// -v-headdim applies to every selected case; the plain algorithm (one
	// head dim) is skipped, saying why.
	for _, c := range sel("mode", "fwdbwd", "headdim", "128", "v-headdim", "64") {
		if c.dv() != 64 || c.D != 128 || c.plain || c.plainSkip == "" || c.latent() {
			t.Errorf("-v-headdim 64: %+v", c)
		}
	}
	if cs := sel("mode", "decode", "v-headdim", "64"); len(cs) != 1 || cs[0].dv() != 64 || !cs[0].latent() {
		t.Errorf("decode with -v-headdim 64 < headdim 128: %+v", cs)
	}
	for _, c := range sel("mode", "bwd", "v-headdim", "0") {
		if c.dv() != c.D || !c.plain {
			t.Errorf("-v-headdim 0: %+v", c)
		}
	}
}

// The peak divides by the FMA loop of the kernel path that ran: forcing
// the generic (scalar) kernels reports a scalar peak far below the vector
// one, and each path names its own ISA.
func TestBenchPeakOfTheISAThatRan(t *testing.T) {
	peaks := map[string]float64{}
	for _, im := range kernel.Available() {
		spec := "f32=" + im.Name
		if _, err := kernel.LookupDecode(im.Name); err == nil {
			spec += ",decode=" + im.Name
		}
		restore, err := kernel.Force(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer restore()
		code, stdout, stderr := atRun("bench", "-seqlen", "64", "-headdim", "16", "-batch", "1", "-heads", "1", "-json",
			"-min-ms", "20", "-reps", "3", "-no-plain", "-workers", "1")
		if code != 0 {
			t.Fatalf("%s: exit %d, %q", im.Name, code, stderr)
		}
		var r benchResult
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatal(err)
		}
		if r.Kernel != im.Name || r.PeakISA != im.Name || r.PeakMedian <= 0 {
			t.Fatalf("forced %s: kernel %q, peak of %q = %v", im.Name, r.Kernel, r.PeakISA, r.PeakMedian)
		}
		peaks[im.Name] = r.PeakMedian
	}
	for _, isa := range []string{"avx2", "avx512"} {
		if p, ok := peaks[isa]; ok && !(peaks["generic"] < p/2) {
			t.Errorf("generic peak %.1f is not far below the %s peak %.1f", peaks["generic"], isa, p)
		}
	}
}

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want spread
	}{
		{[]float64{3, 1, 2}, spread{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, spread{2.5, 1, 4}},
		{[]float64{7}, spread{7, 7, 7}},
		{nil, spread{}},
	} {
		if got := summarize(c.in); got != c.want {
			t.Errorf("summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if s := (spread{0.5, 0.25, 0.75}).format("%.0f", 100, "%"); s != "50% (25–75%)" {
		t.Errorf("format: %q", s)
	}
}

// The last-level cache is read from sysfs (the highest level, counting
// instances shared by different CPUs once each), and the bandwidth
// buffers are 4× all of it and at least 256 MiB, shrunk only to fit the
// memory limit.
func TestBandwidthBuffer(t *testing.T) {
	sys := fstest.MapFS{}
	put := func(cpu, idx int, level, typ, size, shared string) {
		d := fmt.Sprintf("devices/system/cpu/cpu%d/cache/index%d/", cpu, idx)
		for name, v := range map[string]string{"level": level, "type": typ, "size": size, "shared_cpu_list": shared} {
			sys[d+name] = &fstest.MapFile{Data: []byte(v + "\n")}
		}
	}
	for cpu := 0; cpu < 4; cpu++ {
		put(cpu, 0, "1", "Data", "32K", fmt.Sprint(cpu))
		put(cpu, 1, "1", "Instruction", "32K", fmt.Sprint(cpu))
		put(cpu, 2, "2", "Unified", "1024K", fmt.Sprint(cpu))
		put(cpu, 3, "3", "Unified", "96M", []string{"0-1", "0-1", "2-3", "2-3"}[cpu])
	}
	c := readLLC(sys)
	if c.Size != 96<<20 || c.Instances != 2 || c.Total() != 192<<20 {
		t.Fatalf("readLLC = %+v", c)
	}
	if got := bandwidthBuffer(c, memlimit.Inf); got != 768<<20 {
		t.Errorf("buffer %v, want 4 × 192 MiB", got)
	}
	if got := bandwidthBuffer(llc{Size: 8 << 20, Instances: 1}, memlimit.Inf); got != 256<<20 {
		t.Errorf("small LLC: buffer %v, want 256 MiB", got)
	}
	if got := bandwidthBuffer(llc{}, memlimit.Inf); got != 256<<20 {
		t.Errorf("unknown LLC: buffer %v, want 256 MiB", got)
	}
	if got := bandwidthBuffer(c, 2<<30); got != 768<<20 {
		t.Errorf("room for 2 GiB: buffer %v, want 768 MiB", got)
	}
	if got := bandwidthBuffer(c, 1<<30); got != 0 {
		t.Errorf("no room for 2 × 4× LLC: buffer %v, want 0", got)
	}
	small := llc{Size: 32 << 20, Instances: 1}
	if got := bandwidthBuffer(small, 400<<20); got != 200<<20 {
		t.Errorf("room for 400 MiB: buffer %v, want 200 MiB", got)
	}
	if got := bandwidthBuffer(small, 200<<20); got != 0 {
		t.Errorf("room for 200 MiB: buffer %v, want 0 (below 4× LLC)", got)
	}
	for _, s := range []string{"", "x", "-1K", "0"} {
		if parseCacheSize(s) != 0 {
			t.Errorf("parseCacheSize(%q) != 0", s)
		}
	}
	if readLLC(fstest.MapFS{}) != (llc{}) {
		t.Error("empty sysfs gives a cache")
	}
}

// FuzzBenchFlags fuzzes bench's flags (-dtype among them) with a 1K memory
// limit, so that no case can run: every bad flag must be reported on its own line, and
// flags that pass validation must end in the memory refusal, never in a
// measurement, a panic or an overflow.
func FuzzBenchFlags(f *testing.F) {
	f.Add("fwd", "", 64, 0, 0, 0, 0, 5, 200, 256, false, 0.1, "", 0)
	f.Add("sideways", "turbo", 0, -1, -2, -3, -4, 0, -1, -1, true, 0.1, "", 0)
	f.Add("decode", "window", math.MaxInt/2, math.MaxInt/3, math.MaxInt/5, 1<<20, math.MaxInt/7, 1000, 1, 0, false, 0.1, "", 0)
	f.Add("bwd", "alibi", 128, 3, 6, 4, 0, 2, 0, 1, true, 0.1, "", 0)
	f.Add("fwdbwd", "dropout", 1, math.MaxInt, math.MaxInt, 1, math.MaxInt, 1, 600000, math.MaxInt, false, 0.1, "", 0)
	f.Add("fwdbwd", "block-sparse", 64, 1, 8, 0, math.MaxInt/3, 5, 200, 256, false, 0.05, "", 0)
	f.Add("fwdbwd", "block-sparse", 64, 1, 8, 0, 4096, 5, 200, 256, false, math.NaN(), "", 0)
	f.Add("fwd", "block-sparse", 64, 0, 0, 0, 0, 5, 200, 256, true, 1e-300, "", 0)
	f.Add("decode", "", 64, 1, 4, 2, 4096, 3, 1, 256, false, 0.1, "q8_0", 0)
	f.Add("fwd", "", 48, 1, 4, 2, 4096, 3, 1, 256, false, 0.1, "q8_0", 0)
	f.Add("decode", "", 48, 1, 4, 2, 4096, 3, 1, 256, false, 0.1, "q8_0", 0)
	f.Add("fwdbwd", "window", 64, 1, 4, 2, 256, 3, 1, 16, false, 0.1, "bf16", 0)
	f.Add("fwd", "", 64, 0, 0, 0, 0, 3, 1, 16, true, 0.1, "fp8", 0)
	f.Add("decode", "", 576, 1, 128, 1, 32768, 3, 1, 256, false, 0.1, "bf16", 512)
	f.Add("decode", "", 64, 1, 4, 2, 4096, 3, 1, 256, false, 0.1, "q8_0", 48)
	f.Add("decode", "", 48, 1, 4, 2, 4096, 3, 1, 256, false, 0.1, "q8_0", 92)
	f.Add("fwdbwd", "", 64, 1, 4, 2, 4096, 3, 1, 256, false, 0.1, "", -3)
	f.Add("bwd", "window", 32, 1, 4, 2, 128, 3, 1, 16, true, 0.1, "f16", math.MaxInt)
	f.Fuzz(func(t *testing.T, mode, variant string, d, b, h, hk, n, reps, minMs, window int, quick bool, density float64, dtype string, dv int) {
		if strings.ContainsAny(mode+variant+dtype, "\n\r") {
			return // not something a shell passes as one argument
		}
		it := strconv.Itoa
		args := []string{"bench", "-mode", mode, "-variant", variant, "-headdim", it(d), "-batch", it(b), "-heads", it(h),
			"-kv-heads", it(hk), "-seqlen", it(n), "-reps", it(reps), "-min-ms", it(minMs), "-window", it(window),
			"-max-memory", "1K", "-json"}
		if variant == "block-sparse" {
			args = append(args, "-density", strconv.FormatFloat(density, 'g', -1, 64))
		}
		if quick {
			args = append(args, "-quick")
		}
		if dtype != "" {
			args = append(args, "-dtype", dtype)
		}
		if dv != 0 {
			args = append(args, "-v-headdim", it(dv))
		}
		code, stdout, stderr := atRun(args...)
		if code == 0 || stdout != "" {
			t.Fatalf("%q: exit %d, stdout %q", args, code, stdout)
		}
		for _, c := range []struct {
			bad  bool
			flag string
		}{
			{!slices.Contains([]string{"fwd", "bwd", "fwdbwd", "decode"}, mode), "-mode"},
			{!slices.Contains([]string{"", "window", "softcap", "alibi", "dropout", "block-sparse"}, variant), "-variant"},
			{variant == "block-sparse" && !(density > 0 && density <= 1), "-density"},
			{d < 1, "-headdim"}, {b < 0, "-batch"}, {h < 0, "-heads"}, {hk < 0, "-kv-heads"}, {n < 0, "-seqlen"},
			{reps < 1 || reps > 1000, "-reps"}, {minMs < 0 || minMs > 600000, "-min-ms"}, {window < 0, "-window"},
			{dtype != "" && !slices.Contains([]string{"f32", "bf16", "f16", "fp16", "q8_0"}, dtype), "-dtype"},
			{dtype == "q8_0" && mode != "decode", "-dtype q8_0 is a KV-cache type"},
			{dtype == "q8_0" && mode == "decode" && d%32 != 0, "-dtype q8_0 needs a -headdim"},
			{dv < 0, "-v-headdim"},
			{dtype == "q8_0" && mode == "decode" && dv > 0 && dv%32 != 0, "-dtype q8_0 needs a -v-headdim"},
		} {
			if c.bad && !strings.Contains(stderr, "flashattn bench: "+c.flag) {
				t.Fatalf("%q: bad %s not reported: %q", args, c.flag, stderr)
			}
		}
		for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
			if !strings.HasPrefix(line, "flashattn bench: ") {
				t.Fatalf("%q: stderr line %q", args, line)
			}
		}
	})
}
