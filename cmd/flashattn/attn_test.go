package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/reference"
)

// atRun runs the command line and returns its exit status, stdout and stderr.
func atRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// atRunGuarded is atRun for the fuzz targets: a panic fails the test,
// naming args, and a run still going after 30 s stops it.
func atRunGuarded(t *testing.T, args []string) (code int, stderr string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("panic: %v (args %q)", r, args)
			}
		}()
		code, _, stderr = atRun(args...)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running after 30 s (args %q)", args)
	}
	return code, stderr
}

func atRand(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func atTo64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func atWriteF32(t testing.TB, path string, data []float32, shape ...int) string {
	t.Helper()
	if err := npy.WriteFloat32(path, data, shape); err != nil {
		t.Fatal(err)
	}
	return path
}

func atWriteI32(t testing.TB, path string, data []int32, shape ...int) string {
	t.Helper()
	if err := npy.WriteInt32(path, data, shape); err != nil {
		t.Fatal(err)
	}
	return path
}

// atRawNpy builds a version-1.0 .npy file by hand, for dtypes and orders that
// package npy does not write.
func atRawNpy(descr string, fortran bool, shape string, data []byte) []byte {
	fo := "False"
	if fortran {
		fo = "True"
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, fo, shape)
	total := (10 + len(dict) + 1 + 63) / 64 * 64
	var b []byte
	b = append(b, "\x93NUMPY"...)
	b = append(b, 1, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(total-10))
	b = append(b, dict...)
	for len(b) < total-1 {
		b = append(b, ' ')
	}
	b = append(b, '\n')
	return append(b, data...)
}

func atReadF32(t testing.TB, path string, wantShape ...int) []float32 {
	t.Helper()
	data, shape, err := npy.ReadFloat32(path)
	if err != nil {
		t.Fatalf("reading output: %v", err)
	}
	if !slices.Equal(shape, wantShape) {
		t.Fatalf("%s: shape %v, want %v", filepath.Base(path), shape, wantShape)
	}
	return data
}

// atDirNames lists the entries of dir (nil if it does not exist).
func atDirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func atF32(x float64) float64 { return float64(float32(x)) }

// atCase is one valid "flashattn attn" call checked against the reference.
type atCase struct {
	name                 string
	B, Sq, Sk, H, KVH, D int // B, Sq, Sk are ignored for varlen
	causal               bool
	scale, softcap       float64
	dropout              float64
	seed                 uint64
	window               []int  // nil or {left, right}
	alibi                string // "", "h" ([H]) or "bh" ([B, H])
	backward             bool
	cuQ, cuK             []int32 // varlen when not nil
	workers              int
	newOut               bool // -o names a directory that does not exist yet

	// -block-mask: maskHeads 0 (none), 1 or H mask heads, of dtype
	// maskDtype ("" = |u1), with blocks mbq × mbk (0: the default 128, the
	// flags not given).
	maskHeads, mbq, mbk int
	maskDtype           string
	segs                bool // -segment-ids-q/-k, with padding ids
}

func TestAttnGood(t *testing.T) {
	cases := []atCase{
		{name: "dense", B: 2, Sq: 7, Sk: 7, H: 2, KVH: 2, D: 8},
		{name: "dense-backward", B: 2, Sq: 6, Sk: 6, H: 2, KVH: 2, D: 8, backward: true},
		{name: "causal", B: 1, Sq: 9, Sk: 9, H: 2, KVH: 2, D: 8, causal: true, backward: true},
		{name: "causal-sq<sk", B: 1, Sq: 4, Sk: 11, H: 2, KVH: 1, D: 8, causal: true, backward: true},
		{name: "causal-sq>sk", B: 1, Sq: 10, Sk: 4, H: 1, KVH: 1, D: 8, causal: true, backward: true},
		{name: "gqa", B: 2, Sq: 5, Sk: 5, H: 4, KVH: 2, D: 8, backward: true},
		{name: "sq!=sk", B: 2, Sq: 3, Sk: 13, H: 2, KVH: 2, D: 16, backward: true},
		{name: "scale", B: 1, Sq: 6, Sk: 8, H: 2, KVH: 2, D: 8, scale: 0.7, backward: true},
		{name: "window", B: 1, Sq: 12, Sk: 12, H: 2, KVH: 2, D: 8, window: []int{3, 1}, backward: true},
		{name: "window-left-only", B: 1, Sq: 12, Sk: 12, H: 2, KVH: 1, D: 8, window: []int{2, -1}},
		{name: "window-right-only+causal", B: 1, Sq: 8, Sk: 10, H: 2, KVH: 2, D: 8, window: []int{-1, 2}, causal: true},
		{name: "window-huge", B: 1, Sq: 8, Sk: 10, H: 2, KVH: 2, D: 8, window: []int{math.MaxInt, math.MaxInt}},
		{name: "softcap", B: 1, Sq: 7, Sk: 9, H: 2, KVH: 2, D: 8, softcap: 1.5, scale: 2, backward: true},
		{name: "alibi-h", B: 2, Sq: 6, Sk: 8, H: 4, KVH: 2, D: 8, alibi: "h", causal: true, backward: true},
		{name: "alibi-bh", B: 2, Sq: 6, Sk: 8, H: 2, KVH: 2, D: 8, alibi: "bh", backward: true},
		{name: "dropout", B: 2, Sq: 6, Sk: 7, H: 2, KVH: 1, D: 8, dropout: 0.3, seed: 42, backward: true},
		{name: "everything", B: 2, Sq: 9, Sk: 11, H: 4, KVH: 2, D: 8, causal: true, window: []int{4, 0},
			softcap: 3, scale: 0.4, alibi: "bh", dropout: 0.2, seed: 7, backward: true},
		{name: "workers1", B: 1, Sq: 5, Sk: 5, H: 2, KVH: 2, D: 8, workers: 1, backward: true},
		{name: "new-out-dir", B: 1, Sq: 3, Sk: 3, H: 1, KVH: 1, D: 4, newOut: true},

		{name: "varlen", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 3, 8, 10}, cuK: []int32{0, 4, 9, 15}},
		{name: "varlen-backward-gqa", H: 4, KVH: 2, D: 8, cuQ: []int32{0, 5, 7}, cuK: []int32{0, 2, 9}, backward: true},
		{name: "varlen-causal", H: 2, KVH: 1, D: 8, cuQ: []int32{0, 4, 6, 11}, cuK: []int32{0, 6, 8, 12}, causal: true, backward: true},
		{name: "varlen-alibi-h", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 3, 7}, cuK: []int32{0, 5, 9}, alibi: "h"},
		{name: "varlen-alibi-bh", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 3, 7, 9}, cuK: []int32{0, 5, 9, 10}, alibi: "bh", backward: true},
		{name: "varlen-window-softcap", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 6, 10}, cuK: []int32{0, 6, 12},
			window: []int{2, 1}, softcap: 2, backward: true},
		{name: "varlen-dropout-1seq", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 7}, cuK: []int32{0, 9}, dropout: 0.4, seed: 99, backward: true},
		{name: "varlen-dropout", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 4, 7, 12}, cuK: []int32{0, 3, 9, 13}, dropout: 0.25, seed: 5, backward: true},
		{name: "varlen-empty-seq", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 3, 3, 6}, cuK: []int32{0, 4, 6, 6}, backward: true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			atCheckGood(t, c, uint64(i))
		})
	}
}

func atCheckGood(t *testing.T, c atCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	varlen := c.cuQ != nil
	B, Sq, Sk := c.B, c.Sq, c.Sk
	qShape := []int{B, Sq, c.H, c.D}
	kShape := []int{B, Sk, c.KVH, c.D}
	lseShape := []int{B, c.H, Sq}
	if varlen {
		B = len(c.cuQ) - 1
		Sq, Sk = int(c.cuQ[B]), int(c.cuK[B])
		qShape = []int{Sq, c.H, c.D}
		kShape = []int{Sk, c.KVH, c.D}
		lseShape = []int{c.H, Sq}
	}
	nq, nk := B*Sq*c.H*c.D, B*Sk*c.KVH*c.D
	if varlen {
		nq, nk = Sq*c.H*c.D, Sk*c.KVH*c.D
	}
	q, k, v := atRand(rng, nq), atRand(rng, nk), atRand(rng, nk)
	out := filepath.Join(dir, "out")
	if c.newOut {
		out = filepath.Join(dir, "a", "b", "out")
	}
	args := []string{"attn",
		"-q", atWriteF32(t, filepath.Join(dir, "q.npy"), q, qShape...),
		"-k", atWriteF32(t, filepath.Join(dir, "k.npy"), k, kShape...),
		"-v", atWriteF32(t, filepath.Join(dir, "v.npy"), v, kShape...),
		"-o", out}
	var dout []float32
	if c.backward {
		dout = atRand(rng, nq)
		args = append(args, "-dout", atWriteF32(t, filepath.Join(dir, "dout.npy"), dout, qShape...))
	}
	if c.causal {
		args = append(args, "-causal")
	}
	if c.scale != 0 {
		args = append(args, "-scale", fmt.Sprint(c.scale))
	}
	if c.softcap != 0 {
		args = append(args, "-softcap", fmt.Sprint(c.softcap))
	}
	if c.window != nil {
		args = append(args, "-window-left", fmt.Sprint(c.window[0]), "-window-right", fmt.Sprint(c.window[1]))
	}
	if c.dropout != 0 {
		args = append(args, "-dropout", fmt.Sprint(c.dropout), "-seed", fmt.Sprint(c.seed))
	}
	if c.workers != 0 {
		args = append(args, "-workers", fmt.Sprint(c.workers))
	}
	var slopes []float32
	switch c.alibi {
	case "h":
		slopes = make([]float32, c.H)
	case "bh":
		slopes = make([]float32, B*c.H)
	}
	for i := range slopes {
		slopes[i] = 0.05 + 0.4*rng.Float32()
	}
	switch c.alibi {
	case "h":
		args = append(args, "-alibi", atWriteF32(t, filepath.Join(dir, "slopes.npy"), slopes, c.H))
	case "bh":
		args = append(args, "-alibi", atWriteF32(t, filepath.Join(dir, "slopes.npy"), slopes, B, c.H))
	}
	if varlen {
		args = append(args,
			"-cu-seqlens-q", atWriteI32(t, filepath.Join(dir, "cu_q.npy"), c.cuQ, len(c.cuQ)),
			"-cu-seqlens-k", atWriteI32(t, filepath.Join(dir, "cu_k.npy"), c.cuK, len(c.cuK)))
	}
	margs, visible := atMasks(t, rng, c, dir, B, Sq, Sk)
	args = append(args, margs...)

	code, stdout, stderr := atRun(args...)
	if code != 0 {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	if stderr != "" {
		t.Errorf("unexpected stderr %q", stderr)
	}
	_ = stdout
	want := []string{"lse.npy", "out.npy"}
	if c.backward {
		want = []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}
	}
	if got := atDirNames(t, out); !slices.Equal(got, want) {
		t.Fatalf("output dir holds %v, want %v", got, want)
	}
	gotO := atReadF32(t, filepath.Join(out, "out.npy"), qShape...)
	gotL := atReadF32(t, filepath.Join(out, "lse.npy"), lseShape...)
	var gotDQ, gotDK, gotDV []float32
	if c.backward {
		gotDQ = atReadF32(t, filepath.Join(out, "dq.npy"), qShape...)
		gotDK = atReadF32(t, filepath.Join(out, "dk.npy"), kShape...)
		gotDV = atReadF32(t, filepath.Join(out, "dv.npy"), kShape...)
	}

	p := reference.Params{
		Heads: c.H, KVHeads: c.KVH, HeadDim: c.D,
		Scale: atF32(c.scale), Causal: c.causal, Softcap: atF32(c.softcap),
		Dropout: c.dropout, Seed: c.seed,
	}
	if visible != nil && !varlen {
		p.Mask = visible
	}
	if c.window != nil {
		// A window wider than both sequences is the same as this one;
		// reference.Visible would overflow on pos+math.MaxInt.
		p.Window, p.WindowLeft, p.WindowRight = true, min(c.window[0], Sq+Sk), min(c.window[1], Sq+Sk)
	}
	if !varlen {
		p.Batch, p.SeqQ, p.SeqK = B, Sq, Sk
		p.ALiBi = atTo64(slopes)
		if slopes == nil {
			p.ALiBi = nil
		}
		atCompare(t, "", p, q, k, v, dout, gotO, gotL, gotDQ, gotDK, gotDV)
		return
	}

	// Varlen: sequence b is checked against the reference run on that
	// sequence alone. The dropout mask and [B, H] ALiBi slopes depend on the
	// sequence index b, so the reference is run with Batch b+1, every batch
	// element holding sequence b, and batch element b is compared.
	H, KH, D := c.H, c.KVH, c.D
	for b := 0; b < B; b++ {
		q0, q1 := int(c.cuQ[b]), int(c.cuQ[b+1])
		k0, k1 := int(c.cuK[b]), int(c.cuK[b+1])
		pb := p
		pb.Batch, pb.SeqQ, pb.SeqK = b+1, q1-q0, k1-k0
		if visible != nil {
			pb.Mask = func(_, h, i, j int) bool { return visible(b, h, i, j) }
		}
		switch c.alibi {
		case "h":
			pb.ALiBi = atTo64(slopes)
		case "bh":
			pb.ALiBi = atTo64(slopes[:(b+1)*H])
		}
		rep := func(x []float32, r0, r1, w int) []float32 {
			var y []float32
			for range b + 1 {
				y = append(y, x[r0*w:r1*w]...)
			}
			return y
		}
		last := func(x []float32) []float32 { return x[len(x)/(b+1)*b:] }
		var bdq []float32
		if c.backward {
			bdq = rep(dout, q0, q1, H*D)
		}
		oRef, lRef, dqRef, dkRef, dvRef := atRefAll(pb, rep(q, q0, q1, H*D), rep(k, k0, k1, KH*D), rep(v, k0, k1, KH*D), bdq, c.backward)
		// Keep only batch element b of the reference results.
		for i := range oRef {
			oRef[i].r64 = oRef[i].r64[len(oRef[i].r64)/(b+1)*b:]
			oRef[i].r32 = last(oRef[i].r32)
		}
		gotLb := make([]float32, 0, H*(q1-q0))
		for h := 0; h < H; h++ {
			gotLb = append(gotLb, gotL[h*Sq+q0:h*Sq+q1]...)
		}
		lRef.r64 = lRef.r64[len(lRef.r64)/(b+1)*b:]
		lRef.r32 = last(lRef.r32)
		name := fmt.Sprintf("seq %d: ", b)
		atCheckOne(t, name+"O", gotO[q0*H*D:q1*H*D], oRef[0])
		atCheckOne(t, name+"LSE", gotLb, lRef)
		if c.backward {
			for _, r := range []*atRef{&dqRef, &dkRef, &dvRef} {
				r.r64 = r.r64[len(r.r64)/(b+1)*b:]
				r.r32 = last(r.r32)
			}
			atCheckOne(t, name+"dQ", gotDQ[q0*H*D:q1*H*D], dqRef)
			atCheckOne(t, name+"dK", gotDK[k0*KH*D:k1*KH*D], dkRef)
			atCheckOne(t, name+"dV", gotDV[k0*KH*D:k1*KH*D], dvRef)
		}
	}
}

// atRef is a reference result in float64 and its float32 plain baseline.
type atRef struct {
	r64 []float64
	r32 []float32
}

func atRefAll(p reference.Params, q, k, v, dout []float32, backward bool) (o []atRef, lse, dq, dk, dv atRef) {
	o64, l64 := reference.Forward64(p, atTo64(q), atTo64(k), atTo64(v))
	o32, l32 := reference.Forward32(p, q, k, v)
	o = []atRef{{o64, o32}}
	lse = atRef{l64, l32}
	if backward {
		dq64, dk64, dv64 := reference.Backward64(p, atTo64(q), atTo64(k), atTo64(v), atTo64(dout))
		dq32, dk32, dv32 := reference.Backward32(p, q, k, v, dout)
		dq, dk, dv = atRef{dq64, dq32}, atRef{dk64, dk32}, atRef{dv64, dv32}
	}
	return
}

func atCheckOne(t *testing.T, name string, got []float32, r atRef) {
	t.Helper()
	if err := reference.Check(name, got, r.r32, r.r64); err != nil {
		t.Error(err)
	}
}

func atCompare(t *testing.T, prefix string, p reference.Params, q, k, v, dout, gotO, gotL, gotDQ, gotDK, gotDV []float32) {
	t.Helper()
	o, l, dq, dk, dv := atRefAll(p, q, k, v, dout, dout != nil)
	atCheckOne(t, prefix+"O", gotO, o[0])
	atCheckOne(t, prefix+"LSE", gotL, l)
	if dout != nil {
		atCheckOne(t, prefix+"dQ", gotDQ, dq)
		atCheckOne(t, prefix+"dK", gotDK, dk)
		atCheckOne(t, prefix+"dV", gotDV, dv)
	}
}

// atInputs writes a small valid input set into dir and returns the base
// arguments (without -o).
func atInputs(t testing.TB, dir string) []string {
	rng := rand.New(rand.NewPCG(3, 4))
	return []string{"attn",
		"-q", atWriteF32(t, filepath.Join(dir, "q.npy"), atRand(rng, 1*4*2*8), 1, 4, 2, 8),
		"-k", atWriteF32(t, filepath.Join(dir, "k.npy"), atRand(rng, 1*5*2*8), 1, 5, 2, 8),
		"-v", atWriteF32(t, filepath.Join(dir, "v.npy"), atRand(rng, 1*5*2*8), 1, 5, 2, 8),
		"-dout", atWriteF32(t, filepath.Join(dir, "dout.npy"), atRand(rng, 1*4*2*8), 1, 4, 2, 8),
	}
}

func TestAttnDeterminism(t *testing.T) {
	dir := t.TempDir()
	base := atInputs(t, dir)
	runTo := func(name string, extra ...string) string {
		out := filepath.Join(dir, name)
		args := append(slices.Clone(base), "-o", out)
		args = append(args, extra...)
		if code, _, stderr := atRun(args...); code != 0 {
			t.Fatalf("%v: exit status %d, stderr %q", extra, code, stderr)
		}
		return out
	}
	files := []string{"out.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"}
	read := func(out, f string) []byte {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := runTo("a", "-dropout", "0.5", "-seed", "11")
	b := runTo("b", "-dropout", "0.5", "-seed", "11")
	w1 := runTo("w1", "-dropout", "0.5", "-seed", "11", "-workers", "1")
	w2 := runTo("w2", "-dropout", "0.5", "-seed", "11", "-workers", "2")
	c := runTo("c", "-dropout", "0.5", "-seed", "12")
	for _, f := range files {
		for _, other := range []string{b, w1, w2} {
			if !bytes.Equal(read(a, f), read(other, f)) {
				t.Errorf("%s: runs %s and %s with the same seed differ", f, filepath.Base(a), filepath.Base(other))
			}
		}
	}
	if bytes.Equal(read(a, "out.npy"), read(c, "out.npy")) {
		t.Errorf("out.npy: seeds 11 and 12 with -dropout 0.5 give identical outputs")
	}
	// LSE is computed before dropout: it does not depend on the seed.
	if !bytes.Equal(read(a, "lse.npy"), read(c, "lse.npy")) {
		t.Errorf("lse.npy: depends on the dropout seed")
	}
}

func TestAttnHelp(t *testing.T) {
	for _, args := range [][]string{{"attn", "-h"}, {"attn", "-help"}, {"-h"}, {"help"}} {
		code, stdout, stderr := atRun(args...)
		if code != 0 {
			t.Errorf("%v: exit status %d, want 0", args, code)
		}
		if !strings.Contains(stdout+stderr, "-q") {
			t.Errorf("%v: usage does not mention -q: %q", args, stdout+stderr)
		}
	}
	if code, _, stderr := atRun(); code == 0 || stderr == "" {
		t.Errorf("no arguments: exit status %d, stderr %q", code, stderr)
	}
}

func TestAttnBad(t *testing.T) {
	dir := t.TempDir()
	base := atInputs(t, dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	rng := rand.New(rand.NewPCG(9, 9))
	w32 := func(name string, shape ...int) string {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return atWriteF32(t, p(name), atRand(rng, n), shape...)
	}
	wraw := func(name string, b []byte) string {
		if err := os.WriteFile(p(name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p(name)
	}
	qBytes, err := os.ReadFile(p("q.npy"))
	if err != nil {
		t.Fatal(err)
	}
	w32("q3.npy", 4, 2, 8)
	w32("k_d4.npy", 1, 5, 2, 4)
	w32("q_h3.npy", 1, 4, 3, 8)
	w32("k_b2.npy", 2, 5, 2, 8)
	w32("v_s6.npy", 1, 6, 2, 8)
	w32("dout_s5.npy", 1, 5, 2, 8)
	w32("q_empty.npy", 1, 0, 2, 8)
	w32("slopes3.npy", 3)
	w32("slopes_bh.npy", 2, 2)
	atWriteF32(t, p("slopes_nan.npy"), []float32{0.5, float32(math.NaN())}, 2)
	atWriteF32(t, p("slopes_inf.npy"), []float32{float32(math.Inf(1)), 0.5}, 2)
	atWriteI32(t, p("slopes_i32.npy"), []int32{1, 2}, 2)
	wraw("text.npy", []byte("this is not a numpy file\n"))
	wraw("empty.npy", nil)
	wraw("f8.npy", atRawNpy("<f8", false, "(1, 4, 2, 8)", make([]byte, 8*64)))
	wraw("big.npy", atRawNpy(">f4", false, "(1, 4, 2, 8)", make([]byte, 4*64)))
	wraw("fortran.npy", atRawNpy("<f4", true, "(1, 4, 2, 8)", make([]byte, 4*64)))
	wraw("trunc.npy", qBytes[:len(qBytes)-5])
	wraw("trailing.npy", append(slices.Clone(qBytes), 0, 0, 0, 0))
	wraw("header_trunc.npy", qBytes[:20])
	if err := os.Mkdir(p("adir.npy"), 0o755); err != nil {
		t.Fatal(err)
	}
	wraw("notadir", []byte("x"))

	// Varlen atInputs: q [7, 2, 8], k/v [9, 2, 8], two sequences.
	vl := []string{"attn", "-q", w32("vq.npy", 7, 2, 8), "-k", w32("vk.npy", 9, 2, 8), "-v", w32("vv.npy", 9, 2, 8)}
	atWriteI32(t, p("cuq.npy"), []int32{0, 3, 7}, 3)
	atWriteI32(t, p("cuk.npy"), []int32{0, 4, 9}, 3)
	atWriteI32(t, p("cu_dec.npy"), []int32{0, 5, 3, 7}, 4)
	atWriteI32(t, p("cu_start.npy"), []int32{1, 3, 7}, 3)
	atWriteI32(t, p("cu_end.npy"), []int32{0, 3, 6}, 3)
	atWriteI32(t, p("cu_k3.npy"), []int32{0, 2, 5, 9}, 4)
	atWriteI32(t, p("cu_one.npy"), []int32{0}, 1)
	atWriteI32(t, p("cu_2d.npy"), []int32{0, 3, 7, 7}, 2, 2)
	atWriteF32(t, p("cu_f32.npy"), []float32{0, 3, 7}, 3)
	atWriteI32(t, p("used_bad.npy"), []int32{4, 6}, 2)
	atWriteI32(t, p("used_neg.npy"), []int32{-1, 2}, 2)
	atWriteI32(t, p("used_len.npy"), []int32{1, 1, 1}, 3)
	vlcu := append(slices.Clone(vl), "-cu-seqlens-q", p("cuq.npy"), "-cu-seqlens-k", p("cuk.npy"))
	with := func(b []string, extra ...string) []string { return append(slices.Clone(b), extra...) }

	// Masks for base (H = 2, Sq = 4, Sk = 5: one 128-block each way) and
	// for the varlen base (longest sequences 4 and 5).
	mask := func(name, descr, shape string, data ...byte) string {
		return wraw(name, atRawNpy(descr, false, shape, data))
	}
	mask("m_ok.npy", "|u1", "(2, 1, 1)", 1, 1)
	mask("m_f4.npy", "<f4", "(1, 1, 1)", 0, 0, 128, 63)
	mask("m_i4.npy", "<i4", "(1, 1, 1)", 1, 0, 0, 0)
	mask("m_2d.npy", "|u1", "(1, 1)", 1)
	mask("m_heads3.npy", "|u1", "(3, 1, 1)", 1, 1, 1)
	mask("m_nqb.npy", "|u1", "(1, 2, 1)", 1, 1)
	mask("m_nkb.npy", "|b1", "(1, 1, 1)", 1)
	mask("m_bool2.npy", "|b1", "(1, 1, 1)", 2)
	mask("m_trunc.npy", "|i1", "(1, 2, 2)", 1, 1, 1)
	mask("m_trail.npy", "|i1", "(1, 1, 1)", 1, 1)
	wraw("m_fortran.npy", atRawNpy("|u1", true, "(1, 1, 1)", []byte{1}))
	mask("m_vl_ok.npy", "|u1", "(1, 2, 3)", 1, 1, 1, 1, 1, 1)       // -mask-block-q 2 -mask-block-k 2
	mask("m_vl_total.npy", "|u1", "(1, 4, 5)", make([]byte, 20)...) // blocks of the packed total, not the longest sequence
	atWriteI32(t, p("ids_q.npy"), []int32{0, 0, 1, 1}, 1, 4)
	atWriteI32(t, p("ids_k.npy"), []int32{0, 1, 1, -1, 2}, 1, 5)
	atWriteI32(t, p("ids_q_long.npy"), []int32{0, 0, 1, 1, 1}, 1, 5)
	atWriteI32(t, p("ids_q_1d.npy"), []int32{0, 0, 1, 1}, 4)
	atWriteF32(t, p("ids_q_f4.npy"), []float32{0, 0, 1, 1}, 1, 4)
	atWriteI32(t, p("ids_vq.npy"), []int32{0, 0, 1, 1, 1, 2, 2}, 7)
	atWriteI32(t, p("ids_vk.npy"), []int32{0, 0, 1, 1, 1, 2, 2, 2, 2}, 9)
	atWriteI32(t, p("ids_vq_2d.npy"), []int32{0, 0, 1, 1, 1, 2, 2, 2}, 2, 4)
	withMask := with(base, "-block-mask", p("m_ok.npy"))
	if code, _, stderr := atRun(with(withMask, "-segment-ids-q", p("ids_q.npy"), "-segment-ids-k", p("ids_k.npy"), "-o", filepath.Join(t.TempDir(), "o"))...); code != 0 {
		t.Fatalf("mask base: exit status %d, stderr %q", code, stderr)
	}
	vlMask := with(vlcu, "-block-mask", p("m_vl_ok.npy"), "-mask-block-q", "2", "-mask-block-k", "2",
		"-segment-ids-q", p("ids_vq.npy"), "-segment-ids-k", p("ids_vk.npy"))
	if code, _, stderr := atRun(with(vlMask, "-o", filepath.Join(t.TempDir(), "o"))...); code != 0 {
		t.Fatalf("varlen mask base: exit status %d, stderr %q", code, stderr)
	}
	// Check that the varlen base is itself valid.
	if code, _, stderr := atRun(append(slices.Clone(vlcu), "-o", filepath.Join(t.TempDir(), "o"))...); code != 0 {
		t.Fatalf("varlen base: exit status %d, stderr %q", code, stderr)
	}

	// replace returns base with the value of flag name replaced (or the flag
	// removed if val is "").
	replace := func(b []string, name, val string) []string {
		out := slices.Clone(b)
		for i := 1; i < len(out); i++ {
			if out[i] == name {
				if val == "" {
					return append(out[:i], out[i+2:]...)
				}
				out[i+1] = val
				return out
			}
		}
		panic("no flag " + name)
	}

	cases := []struct {
		name string
		args []string
		key  string // must appear in the stderr line
		code int    // 0: any non-zero status
	}{
		{"missing -q", replace(base, "-q", ""), "-q", 1},
		{"missing -k", replace(base, "-k", ""), "-k", 1},
		{"missing -v", replace(base, "-v", ""), "-v", 1},
		{"no args", []string{"attn"}, "-q", 1},
		{"nonexistent", replace(base, "-q", p("nope.npy")), "nope.npy", 1},
		{"nonexistent dout", replace(base, "-dout", p("nope.npy")), "nope.npy", 1},
		{"directory", replace(base, "-k", p("adir.npy")), "adir.npy", 1},
		{"not npy", replace(base, "-q", p("text.npy")), "text.npy", 1},
		{"empty file", replace(base, "-v", p("empty.npy")), "empty.npy", 1},
		{"float64", replace(base, "-q", p("f8.npy")), "f8.npy", 1},
		{"big-endian", replace(base, "-q", p("big.npy")), "big.npy", 1},
		{"fortran", replace(base, "-q", p("fortran.npy")), "fortran.npy", 1},
		{"truncated", replace(base, "-q", p("trunc.npy")), "trunc.npy", 1},
		{"truncated header", replace(base, "-k", p("header_trunc.npy")), "header_trunc.npy", 1},
		{"trailing data", replace(base, "-q", p("trailing.npy")), "trailing.npy", 1},
		{"q 3-D without varlen", replace(base, "-q", p("q3.npy")), "q3.npy", 1},
		{"empty dimension", replace(base, "-q", p("q_empty.npy")), "q_empty.npy", 1},
		{"k headdim", replace(base, "-k", p("k_d4.npy")), "k_d4.npy", 1},
		{"k batch", replace(replace(base, "-k", p("k_b2.npy")), "-v", p("k_b2.npy")), "k_b2.npy", 1},
		{"heads not divisible", replace(base, "-q", p("q_h3.npy")), "heads", 1},
		{"v shape", replace(base, "-v", p("v_s6.npy")), "v_s6.npy", 1},
		{"dout shape", replace(base, "-dout", p("dout_s5.npy")), "dout_s5.npy", 1},
		{"dout float64", replace(base, "-dout", p("f8.npy")), "f8.npy", 1},
		{"scale NaN", with(base, "-scale", "NaN"), "-scale: Scale NaN", 1},
		{"scale Inf", with(base, "-scale", "Inf"), "-scale: Scale +Inf", 1},
		{"scale -1", with(base, "-scale", "-1"), "-scale: Scale -1", 1},
		{"scale underflow", with(base, "-scale", "1e-60"), "-scale 1e-60: out of float32 range", 1},
		{"scale overflow", with(base, "-scale", "1e60"), "-scale 1e+60: out of float32 range", 1},
		{"scale not a number", with(base, "-scale", "abc"), "-scale", 2},
		{"softcap -1", with(base, "-softcap", "-1"), "-softcap: Softcap -1", 1},
		{"softcap NaN", with(base, "-softcap", "NaN"), "-softcap: Softcap NaN", 1},
		{"softcap overflow", with(base, "-softcap", "1e60"), "-softcap", 1},
		{"softcap underflow", with(base, "-softcap", "1e-60"), "-softcap", 1},
		{"dropout 1", with(base, "-dropout", "1"), "-dropout: Dropout 1", 1},
		{"dropout -0.1", with(base, "-dropout", "-0.1"), "-dropout: Dropout -0.1", 1},
		{"dropout NaN", with(base, "-dropout", "NaN"), "-dropout: Dropout NaN", 1},
		{"dropout rounds to 1", with(base, "-dropout", "0.99999999"), "-dropout", 1},
		{"window-left -5", with(base, "-window-left", "-5"), "-window-left/-window-right: Window {-5, -1}", 1},
		{"window-right -2", with(base, "-window-right", "-2"), "-window-left/-window-right: Window {-1, -2}", 1},
		{"window-left not int", with(base, "-window-left", "1.5"), "-window-left", 2},
		{"seed negative", with(base, "-seed", "-1"), "-seed", 2},
		{"workers -1", with(base, "-workers", "-1"), "-workers: Workers -1", 1},
		{"alibi wrong length", with(base, "-alibi", p("slopes3.npy")), "slopes3.npy", 1},
		{"alibi NaN", with(base, "-alibi", p("slopes_nan.npy")), "slopes_nan.npy: ALiBi slope 1 is NaN", 1},
		{"alibi Inf", with(base, "-alibi", p("slopes_inf.npy")), "slopes_inf.npy: ALiBi slope 0 is +Inf", 1},
		{"alibi int32", with(base, "-alibi", p("slopes_i32.npy")), "slopes_i32.npy", 1},
		{"alibi [B,H] wrong batch", with(base, "-alibi", p("slopes_bh.npy")), "slopes_bh.npy", 1},
		{"alibi nonexistent", with(base, "-alibi", p("nope_slopes.npy")), "nope_slopes.npy", 1},
		{"cu decreasing", with(vl, "-cu-seqlens-q", p("cu_dec.npy"), "-cu-seqlens-k", p("cu_k3.npy")), "cu_dec.npy: VarLen.CuSeqlensQ decreases", 1},
		{"cu not from 0", with(vl, "-cu-seqlens-q", p("cu_start.npy"), "-cu-seqlens-k", p("cuk.npy")), "cu_start.npy: VarLen.CuSeqlensQ[0] is 1", 1},
		{"cu wrong end", with(vl, "-cu-seqlens-q", p("cu_end.npy"), "-cu-seqlens-k", p("cuk.npy")), "cu_end.npy: VarLen.CuSeqlensQ ends at 6", 1},
		{"cu k wrong end", with(vl, "-cu-seqlens-q", p("cuq.npy"), "-cu-seqlens-k", p("cuq.npy")), "cuq.npy: VarLen.CuSeqlensK ends at 7", 1},
		{"cu float32", with(vl, "-cu-seqlens-q", p("cu_f32.npy"), "-cu-seqlens-k", p("cuk.npy")), "cu_f32.npy", 1},
		{"cu one entry", with(vl, "-cu-seqlens-q", p("cu_one.npy"), "-cu-seqlens-k", p("cuk.npy")), "cu_one.npy and " + p("cuk.npy") + ": VarLen needs", 1},
		{"cu 2-D", with(vl, "-cu-seqlens-q", p("cu_2d.npy"), "-cu-seqlens-k", p("cuk.npy")), "cu_2d.npy", 1},
		{"cu lengths differ", with(vl, "-cu-seqlens-q", p("cuq.npy"), "-cu-seqlens-k", p("cu_k3.npy")), "cuq.npy and " + p("cu_k3.npy") + ": VarLen needs", 1},
		{"cu nonexistent", with(vl, "-cu-seqlens-q", p("nope_cu.npy"), "-cu-seqlens-k", p("cuk.npy")), "nope_cu.npy", 1},
		{"only cu q", with(vl, "-cu-seqlens-q", p("cuq.npy")), "-cu-seqlens-k", 1},
		{"only cu k", with(vl, "-cu-seqlens-k", p("cuk.npy")), "-cu-seqlens-q", 1},
		{"varlen with 4-D q", with(base, "-cu-seqlens-q", p("cuq.npy"), "-cu-seqlens-k", p("cuk.npy")), "q.npy", 1},
		{"varlen alibi wrong batch", with(vlcu, "-alibi", p("slopes3.npy")), "slopes3.npy", 1},
		{"seqused-k without varlen", with(base, "-seqused-k", p("used_bad.npy")), "-seqused-k", 1},
		{"seqused-k too large", with(vlcu, "-seqused-k", p("used_bad.npy")), "used_bad.npy: VarLen.SeqUsedK[1] is 6", 1},
		{"seqused-k negative", with(vlcu, "-seqused-k", p("used_neg.npy")), "used_neg.npy: VarLen.SeqUsedK[0] is -1", 1},
		{"seqused-k length", with(vlcu, "-seqused-k", p("used_len.npy")), "used_len.npy", 1},
		{"block-mask float32", with(base, "-block-mask", p("m_f4.npy")), "m_f4.npy", 1},
		{"block-mask int32", with(base, "-block-mask", p("m_i4.npy")), "m_i4.npy", 1},
		{"block-mask 2-D", with(base, "-block-mask", p("m_2d.npy")), "m_2d.npy", 1},
		{"block-mask 3 heads", with(base, "-block-mask", p("m_heads3.npy")), "m_heads3.npy", 1},
		{"block-mask query blocks", with(base, "-block-mask", p("m_nqb.npy")), "m_nqb.npy", 1},
		{"block-mask key blocks", with(base, "-block-mask", p("m_nkb.npy"), "-mask-block-k", "2"), "m_nkb.npy", 1},
		{"block-mask bool 2", with(base, "-block-mask", p("m_bool2.npy")), "m_bool2.npy", 1},
		{"block-mask truncated", with(base, "-block-mask", p("m_trunc.npy")), "m_trunc.npy", 1},
		{"block-mask trailing", with(base, "-block-mask", p("m_trail.npy")), "m_trail.npy", 1},
		{"block-mask fortran", with(base, "-block-mask", p("m_fortran.npy")), "m_fortran.npy", 1},
		{"block-mask directory", with(base, "-block-mask", p("adir.npy")), "adir.npy", 1},
		{"block-mask nonexistent", with(base, "-block-mask", p("nope_mask.npy")), "nope_mask.npy", 1},
		{"block-mask varlen packed blocks", with(vlcu, "-block-mask", p("m_vl_total.npy"), "-mask-block-q", "2", "-mask-block-k", "2"), "m_vl_total.npy", 1},
		{"mask-block-q 0", with(withMask, "-mask-block-q", "0"), "-mask-block-q", 1},
		{"mask-block-k -3", with(withMask, "-mask-block-k", "-3"), "-mask-block-k", 1},
		{"mask-block-q not int", with(withMask, "-mask-block-q", "x"), "-mask-block-q", 2},
		{"mask-block-q without mask", with(base, "-mask-block-q", "64"), "-mask-block-q", 1},
		{"mask-block-k without mask", with(base, "-mask-block-k", "64"), "-mask-block-k", 1},
		{"segment-ids-q alone", with(base, "-segment-ids-q", p("ids_q.npy")), "-segment-ids", 1},
		{"segment-ids-k alone", with(base, "-segment-ids-k", p("ids_k.npy")), "-segment-ids", 1},
		{"segment-ids-q shape", with(base, "-segment-ids-q", p("ids_q_long.npy"), "-segment-ids-k", p("ids_k.npy")), "ids_q_long.npy", 1},
		{"segment-ids-k shape", with(base, "-segment-ids-q", p("ids_q.npy"), "-segment-ids-k", p("ids_q.npy")), "ids_q.npy", 1},
		{"segment-ids 1-D dense", with(base, "-segment-ids-q", p("ids_q_1d.npy"), "-segment-ids-k", p("ids_k.npy")), "ids_q_1d.npy", 1},
		{"segment-ids float32", with(base, "-segment-ids-q", p("ids_q_f4.npy"), "-segment-ids-k", p("ids_k.npy")), "ids_q_f4.npy", 1},
		{"segment-ids uint8", with(base, "-segment-ids-q", p("m_ok.npy"), "-segment-ids-k", p("ids_k.npy")), "m_ok.npy", 1},
		{"segment-ids nonexistent", with(base, "-segment-ids-q", p("nope_ids.npy"), "-segment-ids-k", p("ids_k.npy")), "nope_ids.npy", 1},
		{"segment-ids varlen 2-D", with(vlcu, "-segment-ids-q", p("ids_vq_2d.npy"), "-segment-ids-k", p("ids_vk.npy")), "ids_vq_2d.npy", 1},
		{"segment-ids varlen total", with(vlcu, "-segment-ids-q", p("ids_vq.npy"), "-segment-ids-k", p("ids_vq.npy")), "ids_vq.npy", 1},
		{"unknown flag", with(base, "-bogus"), "-bogus", 2},
		{"flag missing value", with(base, "-scale"), "-scale", 2},
		{"positional argument", with(base, "extra.npy"), "extra.npy", 2},
		{"unknown subcommand", []string{"frobnicate", "-q", p("q.npy")}, "frobnicate", 2},
	}

	// A good run whose files a failing run must leave untouched.
	stale := filepath.Join(t.TempDir(), "stale")
	if code, _, stderr := atRun(with(base, "-o", stale)...); code != 0 {
		t.Fatalf("good run: exit status %d, stderr %q", code, stderr)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { atFails(t, c.args, c.key, c.code, stale) })
	}

	// -o naming a regular file (the check happens when writing).
	t.Run("out is a file", func(t *testing.T) {
		code, _, stderr := atRun(with(base, "-o", p("notadir"))...)
		if code == 0 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "notadir") {
			t.Errorf("exit status %d, stderr %q", code, stderr)
		}
		if b, err := os.ReadFile(p("notadir")); err != nil || string(b) != "x" {
			t.Errorf("-o file changed: %q, %v", b, err)
		}
	})
}

// FuzzAttnFlags runs a fixed small valid input set with fuzzed option
// values, a fuzzed -max-memory and a fuzzed state of the output directory
// and inputs (fault: 0 empty, 1 files of an earlier run, 2 lse.npy is a
// directory, 3 a stale temporary file of a dead process, 4 a FIFO as
// -alibi), and fuzzed masks: -mask-block-q/-k (given when not 0) and one of
// a few -block-mask and -segment-ids files (maskKind: 0 none, 1 a shared
// 1-block mask, 2 a 2-head [2, 2, 3] mask, 3 a bool mask holding a 2, 4
// segment ids, 5 segment ids of the wrong shape, 6 the shared mask and the
// segment ids), and a fuzzed element type (dtype: 0 not given, 1 bf16, 2
// f16, 3 f32, 4 an unknown one; f2: the inputs as '<f2' files), and the
// flags of today's models: -sinks and -dlse files (good or bad), -top-left,
// and a v and dout of another head dim (MLA). The
// command must not panic and must exit 0 (every output file new, in the
// file type of its dtype, no temporary file left) or 1/2 (exactly one
// stderr line, the output directory exactly as before).
func FuzzAttnFlags(f *testing.F) {
	dir := f.TempDir()
	base := atInputs(f, dir)
	// The same inputs as '<f2' files.
	base16 := slices.Clone(base)
	for i := 2; i < len(base16); i += 2 {
		x, shape, err := npy.ReadFloat32(base[i])
		if err != nil {
			f.Fatal(err)
		}
		base16[i] = strings.TrimSuffix(base[i], ".npy") + "_f2.npy"
		atWriteF16(f, base16[i], x, shape...)
	}
	fifo := filepath.Join(dir, "fifo.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		f.Fatal(err)
	}
	maskFile := func(name, descr, shape string, data ...byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, atRawNpy(descr, false, shape, data), 0o644); err != nil {
			f.Fatal(err)
		}
		return p
	}
	masks := [][]string{
		nil,
		{"-block-mask", maskFile("fm_shared.npy", "|u1", "(1, 1, 1)", 7)},
		{"-block-mask", maskFile("fm_small.npy", "|i1", "(2, 2, 3)", 1, 0, 0xff, 0, 1, 0, 1, 1, 0, 0, 0, 1)},
		{"-block-mask", maskFile("fm_bad.npy", "|b1", "(1, 1, 1)", 2)},
		{"-segment-ids-q", atWriteI32(f, filepath.Join(dir, "fm_idsq.npy"), []int32{0, 1, -1, 1}, 1, 4),
			"-segment-ids-k", atWriteI32(f, filepath.Join(dir, "fm_idsk.npy"), []int32{1, 1, 0, -1, 0}, 1, 5)},
		{"-segment-ids-q", filepath.Join(dir, "fm_idsq.npy"), "-segment-ids-k", filepath.Join(dir, "fm_idsq.npy")},
	}
	masks = append(masks, append(slices.Clone(masks[1]), masks[4]...))
	earlier := filepath.Join(dir, "earlier")
	if code, _, stderr := atRun(append(slices.Clone(base), "-o", earlier)...); code != 0 {
		f.Fatalf("earlier run: %d %q", code, stderr)
	}
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.5, 2.0, 0.3, 2, 1, true, uint64(7), "", uint8(1), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(math.NaN(), 0.0, 0.0, -1, -1, false, uint64(1), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(-1.0, -1.0, 1.0, -5, -7, true, uint64(2), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(1e-60, 1e60, 0.99999999, math.MaxInt, math.MinInt, false, uint64(math.MaxUint64), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(math.Inf(1), math.Inf(-1), math.Inf(1), 0, 0, true, uint64(3), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(3e38, 1e-45, 1e-50, 0, math.MaxInt, false, uint64(4), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(1e30, 0.0, 0.0, math.MaxInt/2, math.MaxInt/2, true, uint64(5), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(2), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.1, 3, -1, false, uint64(9), "", uint8(3), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(4), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "1K", uint8(1), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "1G", uint8(1), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "-5x", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(1), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, true, uint64(0), "", uint8(0), 2, 2, uint8(2), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.2, 2, -1, false, uint64(6), "", uint8(1), 3, 2, uint8(2), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(3), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 1.0, 0.0, -1, -1, true, uint64(0), "", uint8(0), 0, 0, uint8(4), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(5), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, 1, 1, false, uint64(0), "", uint8(0), 4, 5, uint8(6), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), math.MaxInt, math.MinInt, uint8(1), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 64, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, true, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(1), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.2, 2, -1, false, uint64(6), "", uint8(1), 0, 0, uint8(1), uint8(2), true, uint8(0), uint8(0), false, false)
	f.Add(0.0, 1.0, 0.0, -1, -1, true, uint64(0), "", uint8(0), 0, 0, uint8(4), uint8(3), true, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(2), 0, 0, uint8(0), uint8(4), false, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "1K", uint8(0), 0, 0, uint8(0), uint8(1), true, uint8(0), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, true, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(1), uint8(1), true, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(0), uint8(0), false, true)
	f.Add(0.5, 2.0, 0.2, 2, 1, true, uint64(3), "", uint8(1), 0, 0, uint8(4), uint8(1), true, uint8(1), uint8(1), true, true)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(2), 0, 0, uint8(0), uint8(0), false, uint8(1), uint8(0), false, true)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(2), uint8(0), false, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(0), false, uint8(3), uint8(2), true, false)
	f.Add(0.0, 0.0, 0.0, -1, -1, false, uint64(0), "", uint8(0), 0, 0, uint8(0), uint8(2), true, uint8(0), uint8(3), false, true)
	// The flags of today's models: sinksKind (0 none, 1 -sinks [2], 2 of
	// the wrong length, 3 holding NaN), dlseKind (0 none, 1 -dlse [1, 2, 4],
	// 2 of the wrong shape, 3 int32), -top-left, and mla: v and dout of
	// head dim 16 (q and k have 8).
	sinkFiles := []string{"",
		atWriteF32(f, filepath.Join(dir, "fs_sinks.npy"), []float32{0.5, -2}, 2),
		atWriteF32(f, filepath.Join(dir, "fs_sinks3.npy"), []float32{0.5, -2, 1}, 3),
		atWriteF32(f, filepath.Join(dir, "fs_sinks_nan.npy"), []float32{float32(math.NaN()), 1}, 2)}
	dlseFiles := []string{"",
		atWriteF32(f, filepath.Join(dir, "fs_dlse.npy"), []float32{1, -1, 0.5, 2, 0, 3, -0.25, 1}, 1, 2, 4),
		atWriteF32(f, filepath.Join(dir, "fs_dlse_t.npy"), make([]float32, 8), 1, 4, 2),
		atWriteI32(f, filepath.Join(dir, "fs_dlse_i32.npy"), make([]int32, 8), 1, 2, 4)}
	mlaRng := rand.New(rand.NewPCG(8, 9))
	mlaV, mlaDout := atRand(mlaRng, 5*2*16), atRand(mlaRng, 4*2*16)
	mla := map[bool][]string{ // by f2: -v and -dout of head dim 16
		false: {atWriteF32(f, filepath.Join(dir, "fs_v16.npy"), mlaV, 1, 5, 2, 16), atWriteF32(f, filepath.Join(dir, "fs_dout16.npy"), mlaDout, 1, 4, 2, 16)},
	}
	mla[true] = []string{strings.TrimSuffix(mla[false][0], ".npy") + "_f2.npy", strings.TrimSuffix(mla[false][1], ".npy") + "_f2.npy"}
	atWriteF16(f, mla[true][0], mlaV, 1, 5, 2, 16)
	atWriteF16(f, mla[true][1], mlaDout, 1, 4, 2, 16)
	f.Fuzz(func(t *testing.T, scale, softcap, dropout float64, wl, wr int, causal bool, seed uint64, maxMem string, fault uint8, mbq, mbk int, maskKind uint8, dtype uint8, f2 bool,
		sinksKind, dlseKind uint8, topLeft, withMLA bool) {
		out := filepath.Join(t.TempDir(), "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		ff := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
		in := base
		if f2 {
			in = base16
		}
		in = slices.Clone(in)
		dv := 8
		if withMLA {
			dv = 16
			for i := range in {
				switch in[i] {
				case "-v":
					in[i+1] = mla[f2][0]
				case "-dout":
					in[i+1] = mla[f2][1]
				}
			}
		}
		if s := sinkFiles[int(sinksKind)%len(sinkFiles)]; s != "" {
			in = append(in, "-sinks", s)
		}
		if d := dlseFiles[int(dlseKind)%len(dlseFiles)]; d != "" {
			in = append(in, "-dlse", d)
		}
		if topLeft {
			in = append(in, "-top-left")
		}
		args := append(in, "-o", out,
			"-scale", ff(scale), "-softcap", ff(softcap), "-dropout", ff(dropout),
			"-window-left", strconv.Itoa(wl), "-window-right", strconv.Itoa(wr),
			"-seed", strconv.FormatUint(seed, 10))
		if causal {
			args = append(args, "-causal")
		}
		if maxMem != "" {
			args = append(args, "-max-memory", maxMem)
		}
		dtypes := []string{"", "bf16", "f16", "f32", "fp8"}
		if dt := dtypes[int(dtype)%len(dtypes)]; dt != "" {
			args = append(args, "-dtype", dt)
		}
		args = append(args, masks[int(maskKind)%len(masks)]...)
		if mbq != 0 {
			args = append(args, "-mask-block-q", strconv.Itoa(mbq))
		}
		if mbk != 0 {
			args = append(args, "-mask-block-k", strconv.Itoa(mbk))
		}
		stale := ".out.npy.tmp-4194305-x" // above Linux's largest pid: never alive
		switch fault % 5 {
		case 1, 2:
			for _, n := range atDirNames(t, earlier) {
				b, err := os.ReadFile(filepath.Join(earlier, n))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(out, n), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if fault%5 == 2 {
				os.Remove(filepath.Join(out, "lse.npy"))
				if err := os.Mkdir(filepath.Join(out, "lse.npy"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		case 3:
			if err := os.WriteFile(filepath.Join(out, stale), []byte("junk"), 0o644); err != nil {
				t.Fatal(err)
			}
		case 4:
			args = append(args, "-alibi", fifo)
		}
		before := dirState(t, out)
		code, stderr := atRunGuarded(t, args)
		after := dirState(t, out)
		if _, ok := after[stale]; !ok {
			// A run removes the temporaries of dead processes first
			// (npy.Recover, before the flags are checked), also when it
			// then fails: a failed run may leave the directory without it.
			delete(before, stale)
		}
		switch code {
		case 0:
			want := []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}
			if sinksKind%4 != 0 {
				want = []string{"dk.npy", "dq.npy", "dsinks.npy", "dv.npy", "lse.npy", "out.npy"}
			}
			if names := atDirNames(t, out); !slices.Equal(names, want) {
				t.Fatalf("exit 0 but out dir holds %v (args %q)", names, args)
			}
			if sinksKind%4 >= 2 || dlseKind%4 >= 2 {
				t.Fatalf("exit 0 with bad -sinks or -dlse (args %q)", args)
			}
			if sinksKind%4 != 0 {
				if info, err := npy.Stat(filepath.Join(out, "dsinks.npy")); err != nil || !reflect.DeepEqual(info.Shape, []int{2}) || info.Descr != "<f4" {
					t.Fatalf("dsinks.npy: %+v, err %v (args %q)", info, err, args)
				}
			}
			descr := map[uint8]string{2: "<f2"}[dtype%5]
			if descr == "" {
				descr = "<f4"
			}
			for n, shape := range map[string][]int{"out.npy": {1, 4, 2, dv}, "dq.npy": {1, 4, 2, 8}, "dk.npy": {1, 5, 2, 8}, "dv.npy": {1, 5, 2, dv}} {
				if info, err := npy.Stat(filepath.Join(out, n)); err != nil || !reflect.DeepEqual(info.Shape, shape) || info.Descr != descr {
					t.Fatalf("%s: %+v, err %v, want dtype %s shape %v (args %q)", n, info, err, descr, shape, args)
				}
			}
			if dtype%5 == 4 {
				t.Fatalf("exit 0 with an unknown -dtype (args %q)", args)
			}
			if fault%5 == 2 || fault%5 == 4 {
				t.Fatalf("exit 0 with fault %d (args %q)", fault%5, args)
			}
		case 1, 2:
			if !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d with stderr not one line: %q (args %q)", code, stderr, args)
			}
			if !maps.Equal(after, before) {
				t.Fatalf("exit %d changed the out dir: %v -> %v (args %q)", code, slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)), args)
			}
			if fault%5 == 2 && code == 1 && strings.Contains(stderr, "exists") {
				t.Fatalf("misleading message %q", stderr)
			}
		default:
			t.Fatalf("exit status %d (args %q), stderr %q", code, args, stderr)
		}
	})
}
