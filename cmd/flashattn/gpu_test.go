package main

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/gpu"
)

// gpuInputs writes q, k, v and dout .npy files ([1, 70, 2, 64]) and returns
// the attn arguments naming them.
func gpuInputs(t *testing.T, dir string) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	var args []string
	for _, n := range []string{"q", "k", "v", "dout"} {
		args = append(args, "-"+n, atWriteF32(t, filepath.Join(dir, n+".npy"), atRand(rng, 70*2*64), 1, 70, 2, 64))
	}
	return append([]string{"attn"}, args...)
}

// gpuErr returns nil if GPU 0 opens, or why not.
func gpuErr() error {
	d, err := gpu.Open(0)
	if err != nil {
		return err
	}
	return d.Close()
}

// Without a GPU, -device gpu fails with one line saying why and writes
// nothing.
func TestGPUNoDevice(t *testing.T) {
	if gpuErr() == nil {
		t.Skip("a GPU is present: the no-device path cannot be reached")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, args := range [][]string{
		append(gpuInputs(t, dir), "-o", out, "-device", "gpu"),
		{"bench", "-device", "gpu", "-seqlen", "128"},
	} {
		code, stdout, stderr := atRun(args...)
		if code != 1 || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q", args[0], code, stdout)
		}
		if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "-device gpu: no CUDA device") {
			t.Errorf("%v: stderr %q, want one line saying there is no CUDA device", args[0], stderr)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output directory created: %v", err)
	}
}

func TestGPUFlagValues(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(gpuInputs(t, dir), "-o", filepath.Join(dir, "o"), "-device", "tpu"), `-device "tpu": want cpu or gpu`},
		{append(gpuInputs(t, dir), "-o", filepath.Join(dir, "o"), "-device", "gpu", "-dtype", "f32"), `-dtype "f32": want bf16 or f16 with -device gpu`},
		{append(gpuInputs(t, dir), "-o", filepath.Join(dir, "o"), "-dtype", "q8_0"), `-dtype "q8_0": want f32, bf16 or f16`},
		{[]string{"bench", "-device", "gpu", "-dtype", "q8_0", "-mode", "decode"}, `-dtype "q8_0": want bf16 or f16 with -device gpu`},
		{[]string{"bench", "-device", "tpu"}, `-device "tpu"`},
		{[]string{"bench", "-dtype", "int8"}, `-dtype "int8"`},
	} {
		code, _, stderr := atRun(c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
}

// Bad values and options the GPU does not implement are refused before the
// device is opened, as one line naming the flag or file (argFile's
// mapping of the *flashattn.ArgError package gpu returns), whether or not
// a GPU is present; nothing is written.
func TestGPUArgErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	base := append(gpuInputs(t, dir), "-o", out, "-device", "gpu")
	with := func(extra ...string) []string { return append(slices.Clip(base), extra...) }
	alibi := atWriteF32(t, filepath.Join(dir, "alibi.npy"), []float32{0.5, 0.25}, 2)
	ids := make([]int32, 70)
	idsQ := atWriteI32(t, filepath.Join(dir, "ids_q.npy"), ids, 1, 70)
	idsK := atWriteI32(t, filepath.Join(dir, "ids_k.npy"), ids, 1, 70)
	rng := rand.New(rand.NewPCG(1, 2))
	var d96 []string
	for _, n := range []string{"q", "k", "v"} {
		d96 = append(d96, "-"+n, atWriteF32(t, filepath.Join(dir, n+"96.npy"), atRand(rng, 70*2*96), 1, 70, 2, 96))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{with("-scale", "-1"), "-scale: Scale -1 must be a finite number > 0"},
		{with("-softcap", "-2"), "-softcap: Softcap -2 must be"},
		{with("-window-left", "-5"), "-window-left/-window-right: Window {-5, -1}"},
		{with("-dropout", "0.1"), "-dropout: Options.Dropout is not supported by package gpu"},
		{with("-alibi", alibi), alibi + ": Options.ALiBi is not supported by package gpu"},
		// Masks used to be dropped silently on the GPU.
		{with("-segment-ids-q", idsQ, "-segment-ids-k", idsK), idsQ + ": Options.Mask is not supported by package gpu"},
		{append(append([]string{"attn"}, d96...), "-o", out, "-device", "gpu"), d96[1] + ": head dim 96 is not supported by package gpu"},
	} {
		code, stdout, stderr := atRun(c.args...)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q, want one line containing %q", c.args[len(c.args)-2:], code, stdout, stderr, c.want)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output directory created: %v", err)
	}
}

func TestGPUOptions(t *testing.T) {
	g := &gpuFlags{device: "gpu", dtype: "bf16", deterministic: true}
	w := &flashattn.Window{Left: 3, Right: 1}
	vl := &flashattn.VarLen{CuSeqlensQ: []int32{0, 4}, CuSeqlensK: []int32{0, 5}}
	o := g.options(&flashattn.Options{Scale: 0.5, Causal: true, Window: w, Softcap: 7, VarLen: vl, Workers: 3})
	if o.Scale != 0.5 || !o.Causal || o.Window != w || o.Softcap != 7 || o.VarLen != vl || o.Workers != 3 || !o.Deterministic {
		t.Errorf("options = %+v", o)
	}
	if o := g.options(nil); o == nil || !o.Deterministic || o.Causal {
		t.Errorf("options(nil) = %+v", o)
	}
	for _, c := range []struct {
		g    gpuFlags
		want gpu.DType
		ok   bool
	}{
		{gpuFlags{device: "gpu", dtype: "fp16"}, gpu.F16, true},
		{gpuFlags{device: "gpu", dtype: "f16"}, gpu.F16, true},
		{gpuFlags{device: "gpu"}, gpu.BF16, true},
		{gpuFlags{device: "gpu", dtype: "f32"}, 0, false},
		{gpuFlags{device: "gpu", dtype: "q8_0", q8: true}, 0, false},
	} {
		dt, err := c.g.gpuType()
		if (err == nil) != c.ok || c.ok && dt != c.want || (c.g.check() == nil) != c.ok {
			t.Errorf("%+v: gpuType %v, %v; check %v", c.g, dt, err, c.g.check())
		}
	}
	for _, c := range []struct {
		g    gpuFlags
		want flashattn.DType
		ok   bool
	}{
		{gpuFlags{device: "cpu"}, flashattn.Float32, true},
		{gpuFlags{device: "cpu", dtype: "bf16"}, flashattn.BFloat16, true},
		{gpuFlags{device: "cpu", dtype: "fp16"}, flashattn.Float16, true},
		{gpuFlags{device: "cpu", dtype: "q8_0"}, 0, false},
		{gpuFlags{device: "cpu", dtype: "q8_0", q8: true}, flashattn.Q8_0, true},
		{gpuFlags{device: "cpu", dtype: "bfloat16"}, 0, false},
	} {
		dt, err := c.g.cpuType()
		if (err == nil) != c.ok || c.ok && dt != c.want || (c.g.check() == nil) != c.ok {
			t.Errorf("%+v: cpuType %v, %v; check %v", c.g, dt, err, c.g.check())
		}
	}
}

func TestGPUPeakAndFlops(t *testing.T) {
	for name, want := range map[string]float64{
		"NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA A100-SXM4-80GB": 312,
		"NVIDIA L40S": 362, "NVIDIA L4": 121, "NVIDIA GeForce RTX 4090": 0,
	} {
		if got := peakTFlops(gpu.Info{Name: name}); got != want {
			t.Errorf("peakTFlops(%q) = %v, want %v", name, got, want)
		}
	}
	c := gpuCase{shape{B: 4, H: 16, N: 4096, D: 128}, "fwd"}
	if f := c.flops(); f != 4*4*16*4096*4096*128 {
		t.Errorf("flops = %v", f)
	}
	c.Causal, c.mode = true, "fwdbwd"
	if f, want := c.flops(), 3.5*4*4*16*(4096.0*4097/2)*128; math.Abs(f-want) > 1 {
		t.Errorf("causal fwdbwd flops = %v, want %v", f, want)
	}
}

// With a GPU, "attn -device gpu" writes the files the CPU path writes, with
// values close to the CPU's (bf16 inputs).
func TestAttnGPU(t *testing.T) {
	if err := gpuErr(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	dir := t.TempDir()
	args := gpuInputs(t, dir)
	for _, dev := range []string{"cpu", "gpu"} {
		code, _, stderr := atRun(append(args, "-o", filepath.Join(dir, dev), "-device", dev, "-causal")...)
		if code != 0 {
			t.Fatalf("-device %s: exit %d: %s", dev, code, stderr)
		}
	}
	for _, f := range []string{"out.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"} {
		a, _, err1 := npy.ReadFloat32(filepath.Join(dir, "cpu", f))
		b, _, err2 := npy.ReadFloat32(filepath.Join(dir, "gpu", f))
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", f, err1, err2)
		}
		if len(a) != len(b) {
			t.Fatalf("%s: %d values on the CPU, %d on the GPU", f, len(a), len(b))
		}
		for i := range a {
			if d := math.Abs(float64(a[i] - b[i])); d > 0.1 || math.IsInf(float64(a[i]), 0) != math.IsInf(float64(b[i]), 0) {
				t.Fatalf("%s[%d]: cpu %v, gpu %v", f, i, a[i], b[i])
			}
		}
	}
}

// With a GPU, "attn -device gpu -dtype f16" writes out, dq, dk, dv as
// '<f2' (the GPU's float16 results, narrowed exactly) like the CPU's
// -dtype f16, with values close to the CPU's; lse stays '<f4'.
func TestAttnGPUFloat16(t *testing.T) {
	if err := gpuErr(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	dir := t.TempDir()
	args := gpuInputs(t, dir)
	for _, dev := range []string{"cpu", "gpu"} {
		code, _, stderr := atRun(append(args, "-o", filepath.Join(dir, dev), "-device", dev, "-dtype", "f16", "-causal")...)
		if code != 0 {
			t.Fatalf("-device %s: exit %d: %s", dev, code, stderr)
		}
	}
	for _, f := range []string{"out.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"} {
		descr, shape := "<f2", []int{1, 70, 2, 64}
		if f == "lse.npy" {
			descr, shape = "<f4", []int{1, 2, 70}
		}
		a := atReadTyped(t, filepath.Join(dir, "cpu", f), descr, shape...)
		b := atReadTyped(t, filepath.Join(dir, "gpu", f), descr, shape...)
		for i := range a {
			if d := math.Abs(float64(a[i] - b[i])); d > 0.05 || math.IsInf(float64(a[i]), 0) != math.IsInf(float64(b[i]), 0) {
				t.Fatalf("%s[%d]: cpu %v, gpu %v", f, i, a[i], b[i])
			}
		}
	}
}
