package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/reference"
)

// openOrSkip opens GPU 0 or skips the test with the reason.
func openOrSkip(tb testing.TB) *Device {
	tb.Helper()
	d, err := Open(0)
	if errors.Is(err, ErrNoDevice) {
		tb.Skipf("no GPU: %v", err)
	}
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := d.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return d
}

// Without a driver Open reports ErrNoDevice; with one it describes the GPU.
func TestOpen(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		if !errors.Is(err, ErrNoDevice) {
			t.Fatalf("Open: %v (neither a device nor ErrNoDevice)", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	defer d.Close()
	info := d.Info()
	if info.Name == "" || info.Major < 8 || info.SMs < 1 || info.MemoryBytes == 0 {
		t.Errorf("Info = %+v", info)
	}
	t.Logf("%+v", info)
	if _, err := Open(1 << 20); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open of a device that does not exist: %v", err)
	}
}

type gpuCase struct {
	name                 string
	batch, sq, sk, h, hk int
	dim                  int
	causal               bool
	window               *flashattn.Window
	softcap              float32
	cuQ, cuK, used       []int32 // varlen when cuQ != nil
	deterministic, noBwd bool
	splits               int  // Options.NumSplits
	noPack               bool // Options.NoPackGQA
}

var gpuCases = []gpuCase{
	{name: "plain", batch: 1, sq: 77, sk: 77, h: 2, hk: 2, dim: 64},
	{name: "causal-gqa-odd", batch: 2, sq: 77, sk: 131, h: 4, hk: 2, dim: 128, causal: true},
	{name: "causal-sq>sk-mqa", batch: 1, sq: 200, sk: 64, h: 4, hk: 1, dim: 64, causal: true},
	{name: "window", batch: 1, sq: 129, sk: 300, h: 2, hk: 2, dim: 128, window: &flashattn.Window{Left: 32, Right: 8}},
	{name: "softcap", batch: 2, sq: 65, sk: 65, h: 2, hk: 2, dim: 64, softcap: 5},
	{name: "deterministic-causal", batch: 1, sq: 100, sk: 100, h: 4, hk: 4, dim: 128, causal: true, deterministic: true},
	{name: "deterministic-gqa-window", batch: 2, sq: 90, sk: 70, h: 4, hk: 2, dim: 64, window: &flashattn.Window{Left: 10, Right: -1}, deterministic: true},
	{name: "varlen-causal", h: 4, hk: 2, dim: 64, causal: true, cuQ: []int32{0, 30, 30, 130}, cuK: []int32{0, 50, 51, 140}},
	{name: "varlen-used", h: 2, hk: 2, dim: 128, cuQ: []int32{0, 70, 75}, cuK: []int32{0, 90, 100}, used: []int32{60, 0}, deterministic: true},
	{name: "headdim256-forward", batch: 1, sq: 70, sk: 90, h: 2, hk: 2, dim: 256, noBwd: true},
	{name: "long-mqa", batch: 1, sq: 300, sk: 333, h: 2, hk: 1, dim: 64},
	{name: "long-d128", batch: 1, sq: 260, sk: 200, h: 1, hk: 1, dim: 128, softcap: 3},
	{name: "long-deterministic", batch: 1, sq: 200, sk: 260, h: 2, hk: 2, dim: 128, causal: true, deterministic: true},
}

func randRounded(rng *rand.Rand, dt DType, n int, s float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = dt.Round(float32(rng.NormFloat64() * s))
	}
	return x
}

// seqs lists the (query start, query len, key start, key len) of each
// sequence of a case.
func (c gpuCase) seqs() [][4]int {
	if c.cuQ == nil {
		out := make([][4]int, c.batch)
		for b := range out {
			out[b] = [4]int{b * c.sq, c.sq, b * c.sk, c.sk}
		}
		return out
	}
	out := make([][4]int, len(c.cuQ)-1)
	for b := range out {
		nk := int(c.cuK[b+1] - c.cuK[b])
		if c.used != nil {
			nk = int(c.used[b])
		}
		out[b] = [4]int{int(c.cuQ[b]), int(c.cuQ[b+1] - c.cuQ[b]), int(c.cuK[b]), nk}
	}
	return out
}

// references runs, per sequence, the float64 reference and the same-type
// plain algorithm and scatters the results into packed [rows, heads, dim]
// arrays (LSE [heads, rows_q] when varlen, [batch, heads, sq] otherwise).
type results struct {
	o, lse, dq, dk, dv []float32
}

func (c gpuCase) references(dt DType, q, k, v, dout []float32, rowsQ, rowsK int) (ref64 [5][]float64, plain results) {
	D := c.dim
	ref64 = [5][]float64{make([]float64, rowsQ*c.h*D), make([]float64, c.h*rowsQ), make([]float64, rowsQ*c.h*D), make([]float64, rowsK*c.hk*D), make([]float64, rowsK*c.hk*D)}
	plain = results{make([]float32, rowsQ*c.h*D), make([]float32, c.h*rowsQ), make([]float32, rowsQ*c.h*D), make([]float32, rowsK*c.hk*D), make([]float32, rowsK*c.hk*D)}
	for b, s := range c.seqs() {
		q0, nq, k0, nk := s[0], s[1], s[2], s[3]
		if nq == 0 {
			continue
		}
		p := reference.Params{Batch: 1, SeqQ: nq, SeqK: nk, Heads: c.h, KVHeads: c.hk, HeadDim: D, Causal: c.causal, Softcap: float64(c.softcap)}
		if c.window != nil {
			p.Window, p.WindowLeft, p.WindowRight = true, c.window.Left, c.window.Right
		}
		qs, dos := q[q0*c.h*D:][:nq*c.h*D], dout[q0*c.h*D:][:nq*c.h*D]
		ks, vs := k[k0*c.hk*D:][:nk*c.hk*D], v[k0*c.hk*D:][:nk*c.hk*D]
		o64, l64 := reference.Forward64(p, f64(qs), f64(ks), f64(vs))
		dq64, dk64, dv64 := reference.Backward64(p, f64(qs), f64(ks), f64(vs), f64(dos))
		o, l, dq, dk, dv := plainSameType(dt, p, qs, ks, vs, dos)
		copy(ref64[0][q0*c.h*D:], o64)
		copy(ref64[2][q0*c.h*D:], dq64)
		copy(ref64[3][k0*c.hk*D:], dk64)
		copy(ref64[4][k0*c.hk*D:], dv64)
		copy(plain.o[q0*c.h*D:], o)
		copy(plain.dq[q0*c.h*D:], dq)
		copy(plain.dk[k0*c.hk*D:], dk)
		copy(plain.dv[k0*c.hk*D:], dv)
		for h := 0; h < c.h; h++ {
			for i := 0; i < nq; i++ {
				at := h*rowsQ + q0 + i // varlen layout
				if c.cuQ == nil {
					at = (b*c.h+h)*c.sq + i
				}
				ref64[1][at], plain.lse[at] = l64[h*nq+i], l[h*nq+i]
			}
		}
	}
	return ref64, plain
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// sameType applies the same-type rule: err(got) <= 2·err(plain) + atol.
func sameType(dt DType, name string, got, plain []float32, ref []float64) error {
	atol := 1e-3
	if dt == F16 {
		atol = 1e-4
	}
	eg := reference.MaxAbsDiff32vs64(got, ref)
	ep := reference.MaxAbsDiff32vs64(plain, ref)
	if eg <= 2*ep+atol {
		return nil
	}
	return fmt.Errorf("%s: max abs error %.3g exceeds 2×%.3g (same-type plain) + %g", name, eg, ep, atol)
}

// TestAttentionGPU runs every case twice on the GPU: with NumSplits 1, the
// ordinary forward kernels, and with NumSplits 0, the automatic rule, which
// on a GPU of 100+ SMs sends most of these small grids through split-KV.
func TestAttentionGPU(t *testing.T) {
	d := openOrSkip(t)
	for _, m := range []struct {
		name   string
		splits int
	}{{"unsplit", 1}, {"auto", 0}} {
		t.Run(m.name, func(t *testing.T) { runCases(t, d, withSplits(gpuCases, m.splits), BF16, F16) })
	}
}

// withSplits returns the cases with Options.NumSplits set to n.
func withSplits(cases []gpuCase, n int) []gpuCase {
	out := append([]gpuCase(nil), cases...)
	for i := range out {
		out[i].splits = n
	}
	return out
}

// runCases checks forward and backward of each case and type against the
// float64 reference under the same-type rule.
func runCases(t *testing.T, d *Device, cases []gpuCase, types ...DType) {
	for ci, c := range cases {
		for _, dt := range types {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				for _, err := range c.check(d, dt, uint64(ci)) {
					t.Error(err)
				}
			})
		}
	}
}

// check runs the case (forward, and backward unless noBwd; a deterministic
// backward twice) and returns every failure: a call's error, a result
// outside the same-type bound, a deterministic result that changed.
func (c gpuCase) check(d *Device, dt DType, seed uint64) []error {
	rng := rand.New(rand.NewPCG(seed, uint64(dt)))
	rowsQ, rowsK, batch := c.batch*c.sq, c.batch*c.sk, c.batch
	if c.cuQ != nil {
		rowsQ, rowsK, batch = int(c.cuQ[len(c.cuQ)-1]), int(c.cuK[len(c.cuK)-1]), 1
	}
	tq, tk := rowsQ/batch, rowsK/batch
	q := randRounded(rng, dt, rowsQ*c.h*c.dim, 1)
	k := randRounded(rng, dt, rowsK*c.hk*c.dim, 1)
	v := randRounded(rng, dt, rowsK*c.hk*c.dim, 1)
	dout := randRounded(rng, dt, rowsQ*c.h*c.dim, 1)
	opts := &Options{Options: flashattn.Options{Causal: c.causal, Window: c.window, Softcap: c.softcap}, Deterministic: c.deterministic, NumSplits: c.splits, NoPackGQA: c.noPack}
	if c.cuQ != nil {
		opts.VarLen = &flashattn.VarLen{CuSeqlensQ: c.cuQ, CuSeqlensK: c.cuK, SeqUsedK: c.used}
	}
	Q := flashattn.Dense(q, batch, tq, c.h, c.dim)
	K := flashattn.Dense(k, batch, tk, c.hk, c.dim)
	V := flashattn.Dense(v, batch, tk, c.hk, c.dim)
	out, lse, err := d.ForwardHost(dt, Q, K, V, opts)
	if err != nil {
		return []error{err}
	}
	ref, plain := c.references(dt, q, k, v, dout, rowsQ, rowsK)
	errs := nonNil(sameType(dt, "O", out.Data, plain.o, ref[0]), sameType(dt, "LSE", lse, plain.lse, ref[1]))
	if c.noBwd {
		return errs
	}
	// The backward pass takes the GPU's own O (as flash-attn's does).
	dO := flashattn.Dense(dout, batch, tq, c.h, c.dim)
	dq, dk, dv, err := d.BackwardHost(dt, Q, K, V, out, dO, lse, opts)
	if err != nil {
		return append(errs, err)
	}
	errs = append(errs, nonNil(sameType(dt, "dQ", dq.Data, plain.dq, ref[2]),
		sameType(dt, "dK", dk.Data, plain.dk, ref[3]), sameType(dt, "dV", dv.Data, plain.dv, ref[4]))...)
	if !c.deterministic {
		return errs
	}
	dq2, dk2, dv2, err := d.BackwardHost(dt, Q, K, V, out, dO, lse, opts)
	if err != nil {
		return append(errs, err)
	}
	for i, pair := range [][2][]float32{{dq.Data, dq2.Data}, {dk.Data, dk2.Data}, {dv.Data, dv2.Data}} {
		for j := range pair[0] {
			if math.Float32bits(pair[0][j]) != math.Float32bits(pair[1][j]) {
				return append(errs, fmt.Errorf("deterministic backward: gradient %d element %d differs between runs", i, j))
			}
		}
	}
	return errs
}

func nonNil(errs ...error) []error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// A NaN in a query row gives NaN in that row's O and LSE, not a masked-looking 0.
func TestNaNRowGPU(t *testing.T) { nanRow(t, openOrSkip(t)) }
func TestNaNRowSim(t *testing.T) { nanRow(t, newSimDevice()) }

func nanRow(t *testing.T, d *Device) {
	q := make([]float32, 70*64)
	k := make([]float32, 70*64)
	for i := range k {
		k[i] = 0.5
	}
	q[5*64+3] = float32(math.NaN())
	out, lse, err := d.ForwardHost(BF16, flashattn.Dense(q, 1, 70, 1, 64), flashattn.Dense(k, 1, 70, 1, 64), flashattn.Dense(k, 1, 70, 1, 64), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(lse[5])) || !math.IsNaN(float64(out.Data[5*64])) || math.IsNaN(float64(lse[4])) {
		t.Errorf("LSE row 5 = %v, O[5][0] = %v, LSE row 4 = %v", lse[5], out.Data[5*64], lse[4])
	}
}

// benchShape runs b.N forward (and, with bwd, backward) calls at
// B=4, H=16, N=4096, D=128 and reports TFLOP/s (4·B·H·N·N·D FLOPs per forward, half under a causal mask).
func benchShape(b *testing.B, dt DType, causal, bwd, deterministic bool) {
	d := openOrSkip(b)
	const B, H, N, D = 4, 16, 4096, 128
	var ts []Tensor
	mk := func() Tensor {
		x, err := d.NewTensor(dt, B, N, H, D)
		if err != nil {
			b.Fatal(err)
		}
		ts = append(ts, x)
		return x
	}
	q, k, v, o, do, dq, dk, dv := mk(), mk(), mk(), mk(), mk(), mk(), mk(), mk()
	defer func() {
		for _, x := range ts {
			x.Free()
		}
	}()
	rng := rand.New(rand.NewPCG(1, 1))
	for _, x := range []Tensor{q, k, v, do} {
		if err := x.Upload(randRounded(rng, dt, x.Len(), 1)); err != nil {
			b.Fatal(err)
		}
	}
	lse, err := d.Alloc(4 * B * H * N)
	if err != nil {
		b.Fatal(err)
	}
	defer lse.Free()
	opts := &Options{Options: flashattn.Options{Causal: causal}, Deterministic: deterministic}
	flops := 4.0 * B * H * N * N * D
	if causal {
		flops /= 2
	}
	run := func() {
		if err := d.Forward(q, k, v, o, lse, opts); err != nil {
			b.Fatal(err)
		}
		if bwd {
			if err := d.Backward(q, k, v, o, do, lse, dq, dk, dv, opts); err != nil {
				b.Fatal(err)
			}
		}
	}
	if bwd {
		flops *= 3.5
	}
	run() // JIT and warm-up
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
}

func BenchmarkForwardGPU(b *testing.B) {
	for _, dt := range []DType{BF16, F16} {
		for _, causal := range []bool{false, true} {
			b.Run(fmt.Sprintf("%v/causal=%v", dt, causal), func(b *testing.B) { benchShape(b, dt, causal, false, false) })
		}
	}
}

func BenchmarkForwardBackwardGPU(b *testing.B) {
	for _, det := range []bool{false, true} {
		b.Run(fmt.Sprintf("bf16/deterministic=%v", det), func(b *testing.B) { benchShape(b, BF16, false, true, det) })
	}
}

// The same cases on the PTX interpreter: the embedded kernels, run on the
// host, against the same-type rule.
func TestAttentionSim(t *testing.T) {
	d := newSimDevice()
	defer d.Close()
	cases, types := gpuCases, []DType{BF16, F16}
	if raceEnabled || testing.Short() {
		// A small causal GQA case with odd lengths and both backward variants.
		cases = []gpuCase{{name: "race-small", batch: 1, sq: 77, sk: 131, h: 2, hk: 1, dim: 64, causal: true}}
		cases = append(cases, cases[0])
		cases[1].name, cases[1].deterministic = "race-small-deterministic", true
		types = types[:1]
	}
	runCases(t, d, cases, types...)
}
