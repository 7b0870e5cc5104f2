package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/reference"
)

// atWriteF16 writes data rounded to float16 as a '<f2' file and returns
// the values it holds.
func atWriteF16(t testing.TB, path string, data []float32, shape ...int) []float32 {
	t.Helper()
	h := make([]half.F16, len(data))
	half.EncodeF16(h, data)
	if err := npy.WriteFloat16(path, h, shape); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(h))
	half.DecodeF16(out, h)
	return out
}

// atReadTyped reads an output file, checks its dtype ('<f4' or '<f2') and
// shape, and returns its values as float32.
func atReadTyped(t testing.TB, path, descr string, shape ...int) []float32 {
	t.Helper()
	info, err := npy.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Descr != descr || !slices.Equal(info.Shape, shape) {
		t.Fatalf("%s: dtype %s shape %v, want %s %v", filepath.Base(path), info.Descr, info.Shape, descr, shape)
	}
	a, err := npy.ReadFloat(path)
	if err != nil {
		t.Fatal(err)
	}
	return floats32(a)
}

// atExactBF16 fails unless every value of x is a bfloat16 value.
func atExactBF16(t *testing.T, name string, x []float32) {
	t.Helper()
	for i, v := range x {
		if math.Float32bits(v)&0xffff != 0 {
			t.Fatalf("%s[%d] = %v is not a bfloat16 value", name, i, v)
		}
	}
}

// halfCase is one "attn -dtype bf16|f16" run checked against the
// half-precision rule.
type halfCase struct {
	name                 string
	prec                 reference.Precision
	B, Sq, Sk, H, KVH, D int
	causal               bool
	window               []int
	softcap              float64
	alibi                bool
	dropout              float64
	backward             bool
	f2                   bool // inputs written as '<f2' (else '<f4', rounded on load)
}

// TestAttnHalf: -dtype bf16 and f16 through the command, with '<f4' and
// '<f2' inputs, against the float64 reference of the rounded inputs under
// flash-attn's rule (at most 2× the error of the same-type plain algorithm
// plus 1e-3 for bf16, 1e-4 for f16), for O, LSE and every gradient; the
// files are '<f2' for f16 and exact bf16 values in '<f4' for bf16, LSE
// '<f4'.
func TestAttnHalf(t *testing.T) {
	for _, c := range []halfCase{
		{name: "bf16-causal-gqa-bwd", prec: reference.BF16, B: 2, Sq: 7, Sk: 11, H: 4, KVH: 2, D: 24, causal: true, backward: true},
		{name: "f16-f2-window-softcap-bwd", prec: reference.F16, B: 1, Sq: 13, Sk: 9, H: 3, KVH: 1, D: 40, window: []int{3, 2}, softcap: 2.5, backward: true, f2: true},
		{name: "f16-f4-alibi", prec: reference.F16, B: 2, Sq: 5, Sk: 5, H: 2, KVH: 2, D: 64, alibi: true},
		{name: "bf16-f2-dropout-bwd", prec: reference.BF16, B: 1, Sq: 9, Sk: 17, H: 2, KVH: 2, D: 16, dropout: 0.2, backward: true, f2: true},
	} {
		t.Run(c.name, func(t *testing.T) { checkHalfCase(t, c) })
	}
}

func checkHalfCase(t *testing.T, c halfCase) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(c.D), 11))
	p := func(n string) string { return filepath.Join(dir, n) }
	write := func(name string, n int, shape ...int) []float32 {
		x := atRand(r, n)
		if c.f2 {
			return atWriteF16(t, p(name), x, shape...)
		}
		atWriteF32(t, p(name), x, shape...)
		return x
	}
	q := write("q.npy", c.B*c.Sq*c.H*c.D, c.B, c.Sq, c.H, c.D)
	k := write("k.npy", c.B*c.Sk*c.KVH*c.D, c.B, c.Sk, c.KVH, c.D)
	v := write("v.npy", c.B*c.Sk*c.KVH*c.D, c.B, c.Sk, c.KVH, c.D)
	dtype := "bf16"
	if c.prec == reference.F16 {
		dtype = "f16"
	}
	args := []string{"attn", "-q", p("q.npy"), "-k", p("k.npy"), "-v", p("v.npy"), "-o", p("out"), "-dtype", dtype}
	par := reference.Params{Batch: c.B, SeqQ: c.Sq, SeqK: c.Sk, Heads: c.H, KVHeads: c.KVH, HeadDim: c.D,
		Causal: c.causal, Softcap: c.softcap, Dropout: c.dropout, Seed: 3}
	var dout []float32
	if c.backward {
		dout = write("dout.npy", c.B*c.Sq*c.H*c.D, c.B, c.Sq, c.H, c.D)
		args = append(args, "-dout", p("dout.npy"))
	}
	if c.causal {
		args = append(args, "-causal")
	}
	if c.window != nil {
		args = append(args, "-window-left", strconv.Itoa(c.window[0]), "-window-right", strconv.Itoa(c.window[1]))
		par.Window, par.WindowLeft, par.WindowRight = true, c.window[0], c.window[1]
	}
	if c.softcap > 0 {
		args = append(args, "-softcap", strconv.FormatFloat(c.softcap, 'g', -1, 64))
	}
	if c.dropout > 0 {
		args = append(args, "-dropout", strconv.FormatFloat(c.dropout, 'g', -1, 64), "-seed", "3")
	}
	if c.alibi {
		slopes := make([]float32, c.H)
		for h := range slopes {
			slopes[h] = 0.3 / float32(h+1)
		}
		atWriteF32(t, p("slopes.npy"), slopes, c.H)
		args = append(args, "-alibi", p("slopes.npy"))
		par.ALiBi = atTo64(slopes)
	}
	if code, _, stderr := atRun(args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	descr := "<f2"
	if c.prec == reference.BF16 {
		descr = "<f4"
	}
	out := atReadTyped(t, p("out/out.npy"), descr, c.B, c.Sq, c.H, c.D)
	lse := atReadTyped(t, p("out/lse.npy"), "<f4", c.B, c.H, c.Sq)
	rq, rk, rv := c.prec.RoundSlice(q), c.prec.RoundSlice(k), c.prec.RoundSlice(v)
	oh, lh := reference.ForwardHalf(par, c.prec, q, k, v)
	o64, l64 := reference.Forward64(par, atTo64(rq), atTo64(rk), atTo64(rv))
	for _, e := range []error{reference.CheckHalf("O", c.prec, out, oh, o64), reference.CheckHalf("LSE", c.prec, lse, lh, l64)} {
		if e != nil {
			t.Error(e)
		}
	}
	if c.prec == reference.BF16 {
		atExactBF16(t, "out", out)
	}
	if !c.backward {
		if names := atDirNames(t, p("out")); !slices.Equal(names, []string{"lse.npy", "out.npy"}) {
			t.Errorf("out dir holds %v", names)
		}
		return
	}
	dq := atReadTyped(t, p("out/dq.npy"), descr, c.B, c.Sq, c.H, c.D)
	dk := atReadTyped(t, p("out/dk.npy"), descr, c.B, c.Sk, c.KVH, c.D)
	dv := atReadTyped(t, p("out/dv.npy"), descr, c.B, c.Sk, c.KVH, c.D)
	dqh, dkh, dvh := reference.BackwardHalf(par, c.prec, q, k, v, dout)
	dq64, dk64, dv64 := reference.Backward64(par, atTo64(rq), atTo64(rk), atTo64(rv), atTo64(c.prec.RoundSlice(dout)))
	for _, g := range []struct {
		name       string
		got, plain []float32
		ref        []float64
	}{{"dQ", dq, dqh, dq64}, {"dK", dk, dkh, dk64}, {"dV", dv, dvh, dv64}} {
		if err := reference.CheckHalf(g.name, c.prec, g.got, g.plain, g.ref); err != nil {
			t.Error(err)
		}
		if c.prec == reference.BF16 {
			atExactBF16(t, g.name, g.got)
		}
	}
}

// Inputs are converted on load, exactly when widening: -dtype f32 on a
// '<f2' file gives the bytes of -dtype f32 on its float32 widening, and
// -dtype bf16 on a '<f4' file gives the bytes of -dtype bf16 on that file
// rounded to bfloat16 first.
func TestAttnConvertOnLoad(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	const B, S, H, D = 1, 6, 2, 8
	files := func(prefix string, f func(name string, x []float32)) []string {
		var args []string
		for _, n := range []string{"q", "k", "v", "dout"} {
			x := atRand(rand.New(rand.NewPCG(uint64(len(n)), 1)), B*S*H*D)
			name := p(prefix + n + ".npy")
			f(name, x)
			args = append(args, "-"+n, name)
		}
		return args
	}
	f2 := files("h_", func(name string, x []float32) { atWriteF16(t, name, x, B, S, H, D) })
	widened := files("w_", func(name string, x []float32) {
		atWriteF32(t, name, atWriteF16(t, name+".tmp", x, B, S, H, D), B, S, H, D)
	})
	f4 := files("f_", func(name string, x []float32) { atWriteF32(t, name, x, B, S, H, D) })
	rounded := files("r_", func(name string, x []float32) { atWriteF32(t, name, reference.BF16.RoundSlice(x), B, S, H, D) })
	run := func(out string, args []string, extra ...string) map[string][]byte {
		t.Helper()
		full := append(append([]string{"attn", "-o", p(out), "-causal"}, args...), extra...)
		if code, _, stderr := atRun(full...); code != 0 {
			t.Fatalf("%v: exit %d: %s", full, code, stderr)
		}
		files := map[string][]byte{}
		for _, n := range atDirNames(t, p(out)) {
			b, err := os.ReadFile(filepath.Join(p(out), n))
			if err != nil {
				t.Fatal(err)
			}
			files[n] = b
		}
		return files
	}
	same := func(what string, a, b map[string][]byte) {
		t.Helper()
		if len(a) != 5 || len(a) != len(b) {
			t.Fatalf("%s: %d and %d files", what, len(a), len(b))
		}
		for n := range a {
			if !bytes.Equal(a[n], b[n]) {
				t.Errorf("%s: %s differs", what, n)
			}
		}
	}
	same("f32 on <f2 vs widened", run("a", f2), run("b", widened, "-dtype", "f32"))
	same("bf16 on <f4 vs pre-rounded", run("c", f4, "-dtype", "bf16"), run("d", rounded, "-dtype", "bf16"))
	same("f16 on <f2 vs <f4 of the same values", run("e", f2, "-dtype", "f16"), run("f", widened, "-dtype", "f16"))
}
