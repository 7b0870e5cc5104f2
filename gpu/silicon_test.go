package gpu

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/flashattn/flashattn/gpu/internal/cuda"
)

// The tests that only mean something on a real GPU (they skip without
// libcuda): the split-KV cases, and what the driver's JIT compiler made of
// every kernel. TestAttentionGPU and TestStreamsGPU are beside their
// simulator twins.

// TestSplitGPU runs the split-KV cases (forced split counts, every mask
// and layout feature) on the GPU against the float64 reference.
func TestSplitGPU(t *testing.T) {
	d := openOrSkip(t)
	for i, c := range decodeCases {
		for _, dt := range []DType{BF16, F16} {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				for _, err := range c.check(d, dt, uint64(100+i)) {
					t.Error(err)
				}
			})
		}
	}
}

// entryRE finds the kernels of a PTX text.
var entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_][A-Za-z0-9_]*)`)

// TestKernelResourcesGPU JIT-compiles every embedded PTX module and logs,
// per kernel, the registers per thread and the local memory (spills) the
// driver's compiler gave it: one "kernel ..." line each, for the device
// check's report.
func TestKernelResourcesGPU(t *testing.T) {
	d := openOrSkip(t)
	c, ok := d.ctx.backend.(*cuda.Context)
	if !ok {
		t.Fatalf("backend is %T, not the driver's context", d.ctx.backend)
	}
	files, err := ptxFiles.ReadDir("ptx")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded PTX: %d files, %v", len(files), err)
	}
	n := 0
	for _, f := range files {
		text, err := ptxFiles.ReadFile("ptx/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.LoadModule(text)
		if err != nil {
			t.Errorf("%s: %v", f.Name(), err)
			continue
		}
		for _, e := range entryRE.FindAllSubmatch(text, -1) {
			name := string(e[1])
			fn, err := c.Function(m, name, 0)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			fi, err := c.FuncInfo(fn)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			spill := ""
			if fi.LocalBytes > 0 {
				spill = " SPILLS"
			}
			t.Logf("kernel %-28s %3d registers, %5d B local%s, %6d B static smem, max %4d threads, sm_%d (%s)", name, fi.Registers, fi.LocalBytes, spill, fi.StaticSmem, fi.MaxThreads, fi.BinaryArch, f.Name())
			n++
		}
		if err := c.Unload(m); err != nil {
			t.Error(err)
		}
	}
	if n == 0 {
		t.Error("no kernel found in the embedded PTX")
	}
}

// mmaFlopsPerClock is the dense 16-bit tensor-core rate (float32
// accumulation) per SM per clock of compute capability major.minor, from
// NVIDIA's data sheets (A100: 312 TFLOP/s = 108 SMs × 1.41 GHz × 2048;
// H100 SXM: 989 = 132 × 1.83 × 4096), or 0 when unknown.
func mmaFlopsPerClock(major, minor int) float64 {
	switch {
	case major == 8 && minor == 0:
		return 2048
	case major == 8:
		return 1024 // sm_86, sm_89
	case major == 9:
		return 4096
	}
	return 0
}

// TestYardstickGPU logs the same-run yardsticks: the device's dense
// bf16/fp16 tensor peak, an ESTIMATE (SMs × the driver's maximum SM clock ×
// the per-SM rate of its architecture), and the device-memory bandwidth,
// MEASURED with device-to-device copies (bytes read + written per second,
// the best of a few 1 GiB copies). The device check divides the
// benchmarks' TFLOP/s by the estimate.
func TestYardstickGPU(t *testing.T) {
	d := openOrSkip(t)
	info := d.Info()
	if rate := mmaFlopsPerClock(info.Major, info.Minor); rate > 0 {
		peak := float64(info.SMs) * info.ClockHz * rate / 1e12
		t.Logf("yardstick ESTIMATE (not measured): %s, %d SMs × %.0f MHz max SM clock × %.0f FLOP/clock/SM = %.0f TFLOP/s dense 16-bit tensor peak",
			info.Name, info.SMs, info.ClockHz/1e6, rate, peak)
	} else {
		t.Logf("no per-SM tensor rate known for compute capability %d.%d: no peak estimate", info.Major, info.Minor)
	}
	c, ok := d.ctx.backend.(*cuda.Context)
	if !ok {
		t.Fatalf("backend is %T, not the driver's context", d.ctx.backend)
	}
	n := int(min(1<<30, info.MemoryBytes/8))
	src, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	var best time.Duration
	for i := range 6 { // the first warms up
		t0 := time.Now()
		if err := c.CopyDevice(dst.ptr, src.ptr, n); err != nil {
			t.Fatal(err)
		}
		if err := c.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(t0); i == 1 || i > 1 && el < best {
			best = el
		}
	}
	t.Logf("yardstick MEASURED: device-memory copy of %d MiB: %.0f GB/s (read + write)", n>>20, 2*float64(n)/best.Seconds()/1e9)
}
