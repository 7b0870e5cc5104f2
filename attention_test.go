package flashattn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/reference"
)

// tcase is one point of the property grid.
type tcase struct {
	b, sq, sk, h, hk, d int
	causal              bool
	window              *Window
	softcap             float32
	alibi               int     // 0 none, 1 [H], 2 [B,H]
	slopeMax            float32 // ALiBi slopes drawn in [0, slopeMax); 0: [0, 0.5)
	dropout             float32
	strided             bool
	bq, bk              int
	cache               int     // Options.CacheBytes
	workers             int     // Options.Workers
	mods                modCase // block mask, element mask, score mod
	topLeft             bool    // Options.TopLeft
	sinks               bool    // Options.Sinks: one per head, N(0, 2²)
	dlse                bool    // a random dLSE given to BackwardGrads
}

func (c tcase) String() string {
	s := fmt.Sprintf("b%d_sq%d_sk%d_h%d_hk%d_d%d", c.b, c.sq, c.sk, c.h, c.hk, c.d)
	if c.causal {
		s += "_causal"
	}
	if c.window != nil {
		s += fmt.Sprintf("_win%d,%d", c.window.Left, c.window.Right)
	}
	if c.softcap > 0 {
		s += fmt.Sprintf("_cap%g", c.softcap)
	}
	if c.alibi > 0 {
		s += fmt.Sprintf("_alibi%d", c.alibi)
	}
	if c.dropout > 0 {
		s += fmt.Sprintf("_drop%g", c.dropout)
	}
	if c.strided {
		s += "_strided"
	}
	if c.bq > 0 {
		s += fmt.Sprintf("_blk%dx%d", c.bq, c.bk)
	}
	if c.cache > 0 {
		s += fmt.Sprintf("_cache%d", c.cache)
	}
	if c.workers > 0 {
		s += fmt.Sprintf("_w%d", c.workers)
	}
	if c.mods.name != "" {
		s += "_" + c.mods.name
	}
	if c.topLeft {
		s += "_topleft"
	}
	if c.sinks {
		s += "_sinks"
	}
	if c.dlse {
		s += "_dlse"
	}
	return s
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// checkVarLenSeq checks sequence b of a VarLen call of type dt (packed
// inputs q, k, v, do as the call saw them, rounded to dt, of tq query rows
// in all; outputs out, lse, dq, dk, dv) against the reference with
// parameters par: its queries are rows q0..q0+par.SeqQ-1, its keys rows
// k0..k0+par.SeqK-1. float32 takes SPEC §4's float32 rule; bf16 and fp16
// its same-type rule (the baseline checkHalfCase uses: ForwardHalf,
// BackwardHalf, CheckHalf); with dropout, dQ and dK plus the documented
// excess of the 16-bit backward's D = rowsum(dO∘O), measured
// (halfDropExcess).
func checkVarLenSeq(t *testing.T, dt DType, b int, par reference.Params, q, k, v, do []float32, tq, q0, k0 int, out Tensor, lse []float32, dq, dk, dv Tensor) {
	t.Helper()
	h, hk, d, nq, nk := par.Heads, par.KVHeads, par.HeadDim, par.SeqQ, par.SeqK
	qr, kr := func(x []float32) []float32 { return x[q0*h*d : (q0+nq)*h*d] }, func(x []float32) []float32 { return x[k0*hk*d : (k0+nk)*hk*d] }
	sq, sk, sv, sdo := qr(q), kr(k), kr(v), qr(do)
	o64, lse64 := reference.Forward64(par, to64(sq), to64(sk), to64(sv))
	dq64, dk64, dv64 := reference.Backward64(par, to64(sq), to64(sk), to64(sv), to64(sdo))
	gotLSE := make([]float32, h*nq)
	for hh := 0; hh < h; hh++ {
		copy(gotLSE[hh*nq:], lse[hh*tq+q0:][:nq])
	}
	gotO := qr(denseFloats(out))
	var o32, lse32, dq32, dk32, dv32 []float32
	var boundQ, boundK float64 // halfDBound's, 16-bit only
	if dt == Float32 {
		o32, lse32 = reference.Forward32(plainPar(par), sq, sk, sv)
		dq32, dk32, dv32 = reference.Backward32(plainPar(par), sq, sk, sv, sdo)
		boundQ, boundK = halfDropExcess(par, sq, sk, sdo, gotO, o64, lse64)
	} else {
		prec := precisionOf(dt)
		o32, lse32 = reference.ForwardHalf(par, prec, sq, sk, sv)
		dq32, dk32, dv32 = reference.BackwardHalf(par, prec, sq, sk, sv, sdo)
		boundQ, boundK = halfDropExcess(par, sq, sk, sdo, gotO, o64, lse64)
	}
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
		bound   float64
	}{
		{"O", gotO, o32, o64, 0}, {"LSE", gotLSE, lse32, lse64, 0},
		{"dQ", qr(denseFloats(dq)), dq32, dq64, boundQ}, {"dK", kr(denseFloats(dk)), dk32, dk64, boundK}, {"dV", kr(denseFloats(dv)), dv32, dv64, 0},
	} {
		if err := checkHalfPlus(g.name, dt, g.got, g.pl, g.ref, g.bound); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
	}
}

// denseFloats is a dense tensor's values as float32: its Data, or a 16-bit
// tensor's values widened (gather).
func denseFloats(t Tensor) []float32 {
	if t.DType() == Float32 {
		return t.Data
	}
	return gather(t)
}

// layout places dense data into a tensor; strided layouts put garbage
// between rows and heads so that reading it would show.
func layout(r *rand.Rand, dense []float32, b, s, h, d int, strided bool) Tensor {
	if !strided {
		return Dense(append([]float32(nil), dense...), b, s, h, d)
	}
	hs, ss := d+3, h*(d+3)+5
	bs := s*ss + 7
	data := make([]float32, b*bs)
	for i := range data {
		data[i] = float32(math.NaN())
	}
	t := Tensor{Data: data, Batch: b, Seq: s, Heads: h, Dim: d, BatchStride: bs, SeqStride: ss, HeadStride: hs}
	for bi := 0; bi < b; bi++ {
		for si := 0; si < s; si++ {
			for hi := 0; hi < h; hi++ {
				copy(data[bi*bs+si*ss+hi*hs:][:d], dense[((bi*s+si)*h+hi)*d:][:d])
			}
		}
	}
	return t
}

// gather reads a tensor back into dense order.
func gather(t Tensor) []float32 {
	out := make([]float32, 0, t.Len())
	for b := 0; b < t.Batch; b++ {
		for s := 0; s < t.Seq; s++ {
			for h := 0; h < t.Heads; h++ {
				for d := 0; d < t.Dim; d++ {
					out = append(out, t.At(b, s, h, d))
				}
			}
		}
	}
	return out
}

type caseData struct {
	q, k, v, do []float32
	slopes      []float32
	sinks, dlse []float32 // nil unless tcase.sinks, tcase.dlse
	opt         Options
	par         reference.Params
}

func makeCase(c tcase, seed uint64) caseData {
	r := rand.New(rand.NewPCG(seed, 7))
	cd := caseData{
		q:  randSlice(r, c.b*c.sq*c.h*c.d),
		k:  randSlice(r, c.b*c.sk*c.hk*c.d),
		v:  randSlice(r, c.b*c.sk*c.hk*c.d),
		do: randSlice(r, c.b*c.sq*c.h*c.d),
	}
	cd.opt = Options{Causal: c.causal, Window: c.window, Softcap: c.softcap, Dropout: c.dropout, Seed: seed, BlockQ: c.bq, BlockK: c.bk, CacheBytes: c.cache, Workers: c.workers}
	cd.par = reference.Params{Batch: c.b, SeqQ: c.sq, SeqK: c.sk, Heads: c.h, KVHeads: c.hk, HeadDim: c.d,
		Causal: c.causal, Softcap: float64(c.softcap), Dropout: float64(c.dropout), Seed: seed}
	if c.window != nil {
		cd.par.Window, cd.par.WindowLeft, cd.par.WindowRight = true, c.window.Left, c.window.Right
	}
	switch c.alibi {
	case 1:
		cd.slopes = make([]float32, c.h)
	case 2:
		cd.slopes = make([]float32, c.b*c.h)
	}
	slopeMax := float32(0.5)
	if c.slopeMax > 0 {
		slopeMax = c.slopeMax
	}
	for i := range cd.slopes {
		cd.slopes[i] = float32(r.Float64()) * slopeMax
	}
	if cd.slopes != nil {
		cd.opt.ALiBi = cd.slopes
		cd.par.ALiBi = to64(cd.slopes)
	}
	cd.opt.TopLeft, cd.par.TopLeft = c.topLeft, c.topLeft
	if c.sinks {
		cd.sinks = randSlice(r, c.h)
		for i := range cd.sinks {
			cd.sinks[i] *= 2
		}
		cd.opt.Sinks, cd.par.Sinks = cd.sinks, to64(cd.sinks)
	}
	if c.dlse {
		cd.dlse = randSlice(r, c.b*c.h*c.sq)
	}
	if c.mods.build != nil {
		m := c.mods.build(c, seed)
		cd.opt.BlockMask, cd.opt.Mask, cd.opt.ScoreMod = m.block, m.mask, m.score
		cd.par.Mask, cd.par.ScoreMod = m.ref, m.scoreRef
	}
	return cd
}

// checkCase runs forward and backward and applies the error rule (twice the plain float32 error plus 1e-6) to O,
// LSE, dQ, dK and dV.
func checkCase(t *testing.T, c tcase) {
	t.Helper()
	cd := makeCase(c, uint64(c.sq*1000+c.sk*10+c.d))
	r := rand.New(rand.NewPCG(1, 2))
	q := layout(r, cd.q, c.b, c.sq, c.h, c.d, c.strided)
	k := layout(r, cd.k, c.b, c.sk, c.hk, c.d, c.strided)
	v := layout(r, cd.v, c.b, c.sk, c.hk, c.d, c.strided)
	do := layout(r, cd.do, c.b, c.sq, c.h, c.d, c.strided)

	out, lse, err := Forward(q, k, v, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	checkForward(t, cd, gather(out), lse)

	dq, dk, dv, ds := backwardCase(t, c, Float32, cd, q, k, v, out, do, lse)
	dq64, dk64, dv64, ds64 := reference.BackwardGrads64(cd.par, to64(cd.q), to64(cd.k), to64(cd.v), to64(cd.do), dlse64(cd.dlse))
	dq32, dk32, dv32, ds32 := reference.BackwardGrads32(plainPar(cd.par), cd.q, cd.k, cd.v, cd.do, cd.dlse)
	// FA2 forms D = rowsum(dO∘O) from the output (README, "What is
	// guaranteed"): dQ and dK may exceed the rule by what O's error in D
	// gives (measured: halfDropExcess).
	o64, l64 := reference.Forward64(cd.par, to64(cd.q), to64(cd.k), to64(cd.v))
	bq, bk := halfDropExcess(cd.par, cd.q, cd.k, cd.do, gather(out), o64, l64)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
		bound   float64
	}{{"dQ", gather(dq), dq32, dq64, bq}, {"dK", gather(dk), dk32, dk64, bk}, {"dV", gather(dv), dv32, dv64, 0}, {"dSinks", ds, ds32, ds64, 0}} {
		if err := checkHalfPlus(g.name, Float32, g.got, g.pl, g.ref, g.bound); err != nil {
			t.Error(err)
		}
	}
}

// backwardCase runs case c's backward (BackwardGrads: with tcase.sinks
// the dSinks too, nil without; with tcase.dlse the case's dLSE) on
// gradients of type dt.
func backwardCase(t *testing.T, c tcase, dt DType, cd caseData, q, k, v, out, do Tensor, lse []float32) (dq, dk, dv Tensor, dsinks []float32) {
	t.Helper()
	dq, dk, dv = NewTensorOf(dt, c.b, c.sq, c.h, c.d), NewTensorOf(dt, c.b, c.sk, c.hk, c.d), NewTensorOf(dt, c.b, c.sk, c.hk, c.d)
	if c.sinks {
		dsinks = make([]float32, c.h)
	}
	if err := BackwardGrads(context.Background(), Grads{DQ: dq, DK: dk, DV: dv, DSinks: dsinks}, q, k, v, out, do, lse, cd.dlse, &cd.opt); err != nil {
		t.Fatal(err)
	}
	return dq, dk, dv, dsinks
}

// dlse64 widens a dLSE, nil staying nil (no dLSE).
func dlse64(x []float32) []float64 {
	if x == nil {
		return nil
	}
	return to64(x)
}

// checkForward applies the error rule to a dense O and LSE.
func checkForward(t *testing.T, cd caseData, out, lse []float32) {
	t.Helper()
	o64, lse64 := reference.Forward64(cd.par, to64(cd.q), to64(cd.k), to64(cd.v))
	o32, lse32 := reference.Forward32(plainPar(cd.par), cd.q, cd.k, cd.v)
	if err := reference.Check("O", out, o32, o64); err != nil {
		t.Error(err)
	}
	if err := reference.Check("LSE", lse, lse32, lse64); err != nil {
		t.Error(err)
	}
}

// forEachKernel runs f once per float32 kernel implementation this CPU
// has, with the decode kernels of the same name where there are some.
func forEachKernel(t *testing.T, f func(t *testing.T)) {
	for _, im := range kernel.Available() {
		t.Run(im.Name, func(t *testing.T) {
			forceKernels(t, kernelSpec(im.Name))
			f(t)
		})
	}
}

// kernelSpec is the kernel.Force spec of the float32 kernels name: those
// and the decode kernels of the same name, if this CPU has them.
func kernelSpec(name string) string {
	if _, err := kernel.LookupDecode(name); err == nil {
		return "f32=" + name + ",decode=" + name
	}
	return "f32=" + name
}

// forceKernels makes the kernels spec names active until t ends.
func forceKernels(t *testing.T, spec string) {
	t.Helper()
	restore, err := kernel.Force(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restore)
}

func TestAgainstReferenceGrid(t *testing.T) {
	var cases []tcase
	for _, d := range []int{1, 8, 40, 64, 72, 128, 256} {
		cases = append(cases,
			tcase{b: 1, sq: 37, sk: 53, h: 2, hk: 1, d: d},
			tcase{b: 2, sq: 45, sk: 29, h: 2, hk: 2, d: d, causal: true},
		)
	}
	for _, sz := range [][2]int{{1, 1}, {1, 77}, {77, 1}, {130, 130}, {200, 61}, {61, 200}, {3, 300}} {
		for _, causal := range []bool{false, true} {
			cases = append(cases, tcase{b: 1, sq: sz[0], sk: sz[1], h: 4, hk: 2, d: 24, causal: causal})
		}
	}
	cases = append(cases,
		tcase{b: 2, sq: 50, sk: 70, h: 6, hk: 3, d: 32, causal: true, strided: true},
		tcase{b: 1, sq: 66, sk: 66, h: 4, hk: 1, d: 16, strided: true},
		tcase{b: 1, sq: 100, sk: 100, h: 2, hk: 2, d: 64, causal: true, bq: 16, bk: 16},
		tcase{b: 1, sq: 90, sk: 50, h: 2, hk: 2, d: 33, causal: true, bq: 7, bk: 20},
		tcase{b: 1, sq: 2, sk: 500, h: 8, hk: 2, d: 64},                // decode-like: stacked GQA rows, key splits
		tcase{b: 1, sq: 1, sk: 1000, h: 2, hk: 2, d: 64, causal: true}, // flash-decoding split
		tcase{b: 2, sq: 1, sk: 400, h: 4, hk: 2, d: 20},                // stacked, head dim not a multiple of 8
		tcase{b: 1, sq: 3, sk: 333, h: 12, hk: 3, d: 1, causal: true},  // stacked, D = 1
		tcase{b: 1, sq: 1, sk: 777, h: 40, hk: 8, d: 48},               // 40 stacked rows, group 5 (Dot4T in two quads)
	)
	rot := newGridRotation(kernelPaths()) // under -race each case on one path: see gridRotation
	forEachKernel(t, func(t *testing.T) {
		for _, c := range gridShare(rot, cases) {
			t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
		}
	})
}

// TestWorkersBitIdentical checks that the worker count does not change a
// single bit of any output.
func TestWorkersBitIdentical(t *testing.T) {
	for _, c := range []tcase{
		{b: 1, sq: 300, sk: 257, h: 2, hk: 1, d: 40, causal: true},
		{b: 1, sq: 1, sk: 3000, h: 4, hk: 2, d: 64},
		{b: 3, sq: 65, sk: 65, h: 2, hk: 2, d: 8},
		// 4 (sequence, KV head) pairs: one backward pass for 1 worker, two
		// passes (KV, then dQ) for more; the bits must not change.
		{b: 2, sq: 150, sk: 170, h: 4, hk: 2, d: 24, causal: true, softcap: 2, dropout: 0.1, alibi: 2},
		{b: 2, sq: 90, sk: 90, h: 2, hk: 2, d: 16, mods: modCases[12]},
		// Packed K and V of 1.1 MB per KV head, beyond half of any L2 up
		// to 2 MiB: the forward walks query super-blocks, split across
		// workers differently for every count.
		{b: 1, sq: 700, sk: 1100, h: 2, hk: 1, d: 128, causal: true},
		{b: 1, sq: 333, sk: 1100, h: 2, hk: 1, d: 128},
	} {
		cd := makeCase(c, 3)
		q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
		do := Dense(cd.do, c.b, c.sq, c.h, c.d)
		var first [][]float32
		for w := 1; w <= 4; w++ {
			cd.opt.Workers = w
			out, lse, err := Forward(q, k, v, &cd.opt)
			if err != nil {
				t.Fatal(err)
			}
			dq, dk, dv, err := Backward(q, k, v, out, do, lse, &cd.opt)
			if err != nil {
				t.Fatal(err)
			}
			res := [][]float32{out.Data, lse, dq.Data, dk.Data, dv.Data}
			if w == 1 {
				first = res
				continue
			}
			for i := range res {
				for j := range res[i] {
					if math.Float32bits(res[i][j]) != math.Float32bits(first[i][j]) {
						t.Fatalf("%v: workers=%d output %d differs at %d: %v vs %v", c, w, i, j, res[i][j], first[i][j])
					}
				}
			}
		}
	}
}

// TestConcurrentCalls runs many calls at once from different goroutines
// (run it with -race): each result equals the same call made alone.
func TestConcurrentCalls(t *testing.T) {
	cases := []tcase{
		{b: 1, sq: 70, sk: 90, h: 2, hk: 1, d: 32, causal: true},
		{b: 2, sq: 1, sk: 300, h: 4, hk: 2, d: 16},
		{b: 1, sq: 50, sk: 50, h: 2, hk: 2, d: 8, dropout: 0.3, softcap: 2},
	}
	type result struct{ o, lse, dq, dk, dv []float32 }
	runCase := func(c tcase) result {
		cd := makeCase(c, 4)
		q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
		do := Dense(cd.do, c.b, c.sq, c.h, c.d)
		out, lse, err := Forward(q, k, v, &cd.opt)
		if err != nil {
			t.Error(err)
			return result{}
		}
		dq, dk, dv, err := Backward(q, k, v, out, do, lse, &cd.opt)
		if err != nil {
			t.Error(err)
		}
		return result{out.Data, lse, dq.Data, dk.Data, dv.Data}
	}
	want := make([]result, len(cases))
	for i, c := range cases {
		want[i] = runCase(c)
	}
	const callers = 8
	got := make([]result, callers)
	done := make(chan int)
	for g := 0; g < callers; g++ {
		go func() {
			got[g] = runCase(cases[g%len(cases)])
			done <- g
		}()
	}
	for range callers {
		<-done
	}
	for g, r := range got {
		w := want[g%len(cases)]
		for i, pair := range [][2][]float32{{r.o, w.o}, {r.lse, w.lse}, {r.dq, w.dq}, {r.dk, w.dk}, {r.dv, w.dv}} {
			for j := range pair[1] {
				if math.Float32bits(pair[0][j]) != math.Float32bits(pair[1][j]) {
					t.Fatalf("caller %d output %d differs at %d", g, i, j)
				}
			}
		}
	}
}

// TestSteadyStateAllocs: with caller-owned outputs, a repeated call
// allocates nothing (pools warm, GC off so that they are not emptied).
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race escape analysis changes and calls allocate; counted by the plain test run")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, c := range []tcase{
		{b: 1, sq: 300, sk: 300, h: 4, hk: 2, d: 64, causal: true},
		{b: 1, sq: 1, sk: 2000, h: 8, hk: 2, d: 64}, // decoding: stacked heads, key splits
		{b: 2, sq: 100, sk: 130, h: 4, hk: 2, d: 64, causal: true},
		{b: 32, sq: 20, sk: 40, h: 4, hk: 1, d: 32},
		{b: 2, sq: 1, sk: 700, h: 8, hk: 2, d: 64},
	} {
		cd := makeCase(c, 1)
		q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
		do := Dense(cd.do, c.b, c.sq, c.h, c.d)
		out, lse := NewTensor(c.b, c.sq, c.h, c.d), make([]float32, c.b*c.h*c.sq)
		dq, dk, dv := NewTensor(c.b, c.sq, c.h, c.d), NewTensor(c.b, c.sk, c.hk, c.d), NewTensor(c.b, c.sk, c.hk, c.d)
		opts := &Options{Causal: c.causal, Workers: 2}
		testAllocs(t, func() error { return ForwardInto(out, lse, q, k, v, opts) }, c.String()+": ForwardInto")
		testAllocs(t, func() error { return BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts) }, c.String()+": BackwardInto")
	}
	// Varlen: three packed sequences, GQA.
	{
		const total, h, hk, d = 150, 4, 2, 32
		r := rand.New(rand.NewPCG(10, 1))
		q, k, v := Dense(randSlice(r, total*h*d), 1, total, h, d), Dense(randSlice(r, total*hk*d), 1, total, hk, d), Dense(randSlice(r, total*hk*d), 1, total, hk, d)
		do := Dense(randSlice(r, total*h*d), 1, total, h, d)
		out, lse := NewTensor(1, total, h, d), make([]float32, h*total)
		dq, dk, dv := NewTensor(1, total, h, d), NewTensor(1, total, hk, d), NewTensor(1, total, hk, d)
		cu := []int32{0, 40, 41, 150}
		opts := &Options{Causal: true, Workers: 2, VarLen: &VarLen{CuSeqlensQ: cu, CuSeqlensK: cu}}
		testAllocs(t, func() error { return ForwardInto(out, lse, q, k, v, opts) }, "varlen: ForwardInto")
		testAllocs(t, func() error { return BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts) }, "varlen: BackwardInto")
	}
	// A decode step (new keys appended, rotated) from every cache type,
	// contiguous and paged, batch 2, GQA.
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0} {
		for _, block := range []int{0, 32} {
			const b, h, hk, d, capacity = 2, 8, 2, 64, 256
			r := rand.New(rand.NewPCG(11, uint64(dt)))
			rows, seq := b, capacity
			c := &KVCache{SeqLens: []int32{200, 77}, LeftPad: []int32{3, 0}, Rotary: ropeTables(capacity+1, d)}
			if block > 0 {
				rows, seq = b*capacity/block, block
				c.BlocksPerSeq = capacity / block
				c.BlockTable = make([]int32, b*c.BlocksPerSeq)
				for i, p := range r.Perm(rows) {
					c.BlockTable[i] = int32(p)
				}
			}
			kc, vc := NewTensorOf(dt, rows, seq, hk, d), NewTensorOf(dt, rows, seq, hk, d)
			if err := Convert(kc, Dense(randSlice(r, rows*seq*hk*d), rows, seq, hk, d)); err != nil {
				t.Fatal(err)
			}
			if err := Convert(vc, Dense(randSlice(r, rows*seq*hk*d), rows, seq, hk, d)); err != nil {
				t.Fatal(err)
			}
			c.KNew, c.VNew = Dense(randSlice(r, b*hk*d), b, 1, hk, d), Dense(randSlice(r, b*hk*d), b, 1, hk, d)
			q := Dense(randSlice(r, b*h*d), b, 1, h, d)
			out, lse := NewTensor(b, 1, h, d), make([]float32, b*h)
			opts := &Options{Workers: 2, KVCache: c}
			testAllocs(t, func() error { return ForwardInto(out, lse, q, kc, vc, opts) }, fmt.Sprintf("decode %v cache, block %d: ForwardInto", dt, block))
		}
	}
	// A continuous-batching step (VarLen over a paged cache): batch 1, 2
	// and 32 sequences of decode rows, prompt chunks and spec-decode rows.
	for _, nb := range []int{1, 2, 32} {
		seqs := make([]serveSeq, nb)
		for b := range seqs {
			seqs[b] = mixedStep[b%len(mixedStep)]
		}
		for _, dt := range []DType{Float32, BFloat16, Q8_0} {
			s := newServeCall(t, serveCase{dt: dt, block: 32, hq: 8, hk: 2, d: 64, seqs: seqs, rotary: true, causal: true}, 2)
			out, lse := NewTensor(1, s.q.Seq, 8, 64), make([]float32, 8*s.q.Seq)
			s.opts.Workers = 2
			testAllocs(t, func() error { return ForwardInto(out, lse, s.q, s.k, s.v, s.opts) }, fmt.Sprintf("continuous batching, %d sequences, %v cache: ForwardInto", nb, dt))
		}
	}
}

// testAllocs checks that f allocates nothing in steady state: after a few
// calls, so that every pooled workspace any worker may pick has grown to the
// call's size.
func testAllocs(t *testing.T, f func() error, name string) {
	t.Helper()
	for range 8 {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	a := testing.AllocsPerRun(20, func() {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	})
	if a != 0 {
		t.Errorf("%s allocates %v times per call", name, a)
	}
}

// TestSteadyStateAllocsHalfPaths: zero allocations per steady-state call
// on every 16-bit product path (TestSteadyStateAllocs runs the default one),
// forward and backward, prefill and decoding. The generic path's MulAdd
// once allocated its partial sums per call.
func TestSteadyStateAllocsHalfPaths(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race escape analysis changes and calls allocate; counted by the plain test run")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, dt := range []DType{BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			forEachHalf(t, dt, func(t *testing.T) {
				for _, c := range []tcase{
					{b: 2, sq: 100, sk: 130, h: 4, hk: 2, d: 64, causal: true},
					{b: 2, sq: 1, sk: 700, h: 8, hk: 2, d: 64},
				} {
					cd := makeCase(c, 1)
					q, k, v := toType(cd.q, dt, c.b, c.sq, c.h, c.d), toType(cd.k, dt, c.b, c.sk, c.hk, c.d), toType(cd.v, dt, c.b, c.sk, c.hk, c.d)
					do := toType(cd.do, dt, c.b, c.sq, c.h, c.d)
					out, lse := NewTensorOf(dt, c.b, c.sq, c.h, c.d), make([]float32, c.b*c.h*c.sq)
					dq, dk, dv := NewTensorOf(dt, c.b, c.sq, c.h, c.d), NewTensorOf(dt, c.b, c.sk, c.hk, c.d), NewTensorOf(dt, c.b, c.sk, c.hk, c.d)
					opts := &Options{Causal: c.causal, Workers: 2}
					testAllocs(t, func() error { return ForwardInto(out, lse, q, k, v, opts) }, c.String()+": ForwardInto")
					testAllocs(t, func() error { return BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts) }, c.String()+": BackwardInto")
				}
			})
		})
	}
}
