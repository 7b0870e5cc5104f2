package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// ftCase is one "flashattn attn" call with the flags of today's models —
// -sinks, a v of another head dim (MLA), -dlse, -top-left and -seqused-q —
// checked against the reference package: O and LSE against
// reference.Forward64 (Params.Sinks, HeadDimV, TopLeft), dQ, dK, dV and
// dsinks.npy against reference.BackwardGrads64 with the dlse of the file,
// each by the error rule (twice the float32 plain algorithm's error plus
// 1e-6; for bf16 the same-type rule).
type ftCase struct {
	name                     string
	B, Sq, Sk, H, KVH, D, DV int // B, Sq, Sk are ignored for varlen; DV 0: D
	causal, topLeft          bool
	window                   []int // nil or {left, right}
	alibi                    bool  // [H] slopes
	sinks, dlse, backward    bool
	cuQ, cuK                 []int32 // varlen when not nil
	usedQ, usedK             []int32 // -seqused-q, -seqused-k (varlen)
	bf16                     bool    // -dtype bf16
}

func TestAttnSinksMLADLSETopLeft(t *testing.T) {
	cases := []ftCase{
		{name: "sinks-forward", B: 2, Sq: 7, Sk: 9, H: 4, KVH: 2, D: 16, sinks: true, causal: true},
		{name: "sinks-backward-gqa", B: 2, Sq: 6, Sk: 6, H: 4, KVH: 2, D: 8, sinks: true, backward: true},
		// Bottom-right causal with Sq > Sk: the first rows see no key and
		// get O = 0, LSE = the sink's logit.
		{name: "sinks-rows-without-keys", B: 1, Sq: 10, Sk: 4, H: 2, KVH: 1, D: 8, sinks: true, causal: true, backward: true},
		{name: "mla-forward", B: 2, Sq: 5, Sk: 7, H: 4, KVH: 1, D: 24, DV: 16},
		{name: "mla-backward", B: 2, Sq: 5, Sk: 7, H: 4, KVH: 1, D: 24, DV: 16, backward: true},
		{name: "mla-wider-v-causal", B: 1, Sq: 6, Sk: 8, H: 2, KVH: 2, D: 8, DV: 20, causal: true, backward: true},
		{name: "dlse", B: 2, Sq: 6, Sk: 8, H: 2, KVH: 2, D: 8, dlse: true, backward: true},
		{name: "dlse-rows-without-keys", B: 1, Sq: 9, Sk: 3, H: 2, KVH: 2, D: 8, dlse: true, causal: true, backward: true},
		{name: "dlse-mla-sinks-causal", B: 2, Sq: 7, Sk: 9, H: 4, KVH: 2, D: 16, DV: 8, sinks: true, dlse: true, causal: true, backward: true},
		{name: "top-left-sq<sk", B: 1, Sq: 4, Sk: 11, H: 2, KVH: 1, D: 8, causal: true, topLeft: true, backward: true},
		{name: "top-left-sq>sk", B: 2, Sq: 10, Sk: 4, H: 2, KVH: 2, D: 8, causal: true, topLeft: true, sinks: true, backward: true},
		{name: "top-left-window-alibi", B: 1, Sq: 6, Sk: 9, H: 2, KVH: 2, D: 8, window: []int{2, 1}, alibi: true, topLeft: true, backward: true},
		{name: "varlen-sinks-dlse-mla", H: 4, KVH: 2, D: 16, DV: 8, cuQ: []int32{0, 3, 8, 10}, cuK: []int32{0, 4, 9, 15},
			sinks: true, dlse: true, causal: true, backward: true},
		{name: "varlen-seqused-q", H: 2, KVH: 1, D: 8, cuQ: []int32{0, 5, 7, 12}, cuK: []int32{0, 6, 9, 13}, usedQ: []int32{3, 2, 4},
			causal: true, backward: true},
		{name: "varlen-seqused-q-k-top-left-dlse", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 4, 5, 10}, cuK: []int32{0, 6, 9, 13},
			usedQ: []int32{2, 1, 5}, usedK: []int32{4, 3, 2}, topLeft: true, causal: true, dlse: true, backward: true},
		{name: "bf16-sinks-mla-dlse", B: 2, Sq: 6, Sk: 7, H: 4, KVH: 2, D: 32, DV: 16, sinks: true, dlse: true, causal: true, backward: true, bf16: true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ftCheck(t, c, uint64(100+i))
		})
	}
}

// ftRef is a reference result in float64 and its baseline: the plain
// algorithm in float32, or in bf16 (the same-type rule).
type ftRef struct {
	r64 []float64
	r32 []float32
}

func ftCheckOne(t *testing.T, bf16 bool, name string, got []float32, r ftRef) {
	t.Helper()
	var err error
	if bf16 {
		err = reference.CheckHalf(name, reference.BF16, got, r.r32, r.r64)
	} else {
		err = reference.Check(name, got, r.r32, r.r64)
	}
	if err != nil {
		t.Error(err)
	}
}

// ftReference runs the reference on one dense problem: O, LSE and, with
// dout, dQ, dK, dV and dSinks.
func ftReference(p reference.Params, bf16 bool, q, k, v, dout, dlse []float32) (o, lse, dq, dk, dv, ds ftRef) {
	var dlse64 []float64
	if dlse != nil {
		dlse64 = atTo64(dlse)
	}
	r64 := func(x []float32) []float64 { return atTo64(x) }
	if bf16 {
		r64 = func(x []float32) []float64 { return atTo64(reference.BF16.RoundSlice(x)) }
	}
	o.r64, lse.r64 = reference.Forward64(p, r64(q), r64(k), r64(v))
	if bf16 {
		o.r32, lse.r32 = reference.ForwardHalf(p, reference.BF16, q, k, v)
	} else {
		o.r32, lse.r32 = reference.Forward32(p, q, k, v)
	}
	if dout == nil {
		return
	}
	dq.r64, dk.r64, dv.r64, ds.r64 = reference.BackwardGrads64(p, r64(q), r64(k), r64(v), r64(dout), dlse64)
	if bf16 {
		dq.r32, dk.r32, dv.r32, ds.r32 = reference.BackwardHalfGrads(p, reference.BF16, q, k, v, dout, dlse)
	} else {
		dq.r32, dk.r32, dv.r32, ds.r32 = reference.BackwardGrads32(p, q, k, v, dout, dlse)
	}
	return
}

func ftCheck(t *testing.T, c ftCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	varlen := c.cuQ != nil
	dv := c.DV
	if dv == 0 {
		dv = c.D
	}
	B, Sq, Sk := c.B, c.Sq, c.Sk
	if varlen {
		B, Sq, Sk = len(c.cuQ)-1, int(c.cuQ[len(c.cuQ)-1]), int(c.cuK[len(c.cuK)-1])
	}
	lead := func(s ...int) []int { // [B, s...] dense, [s...] varlen
		if varlen {
			return s
		}
		return append([]int{B}, s...)
	}
	nb := B
	if varlen {
		nb = 1
	}
	qShape, kShape, vShape, oShape := lead(Sq, c.H, c.D), lead(Sk, c.KVH, c.D), lead(Sk, c.KVH, dv), lead(Sq, c.H, dv)
	lseShape := []int{B, c.H, Sq}
	if varlen {
		lseShape = []int{c.H, Sq}
	}
	q, k, v := atRand(rng, nb*Sq*c.H*c.D), atRand(rng, nb*Sk*c.KVH*c.D), atRand(rng, nb*Sk*c.KVH*dv)
	out := p("out")
	args := []string{"attn", "-q", atWriteF32(t, p("q.npy"), q, qShape...), "-k", atWriteF32(t, p("k.npy"), k, kShape...),
		"-v", atWriteF32(t, p("v.npy"), v, vShape...), "-o", out}
	var dout, dlse, sinks, slopes []float32
	if c.backward {
		dout = atRand(rng, nb*Sq*c.H*dv)
		args = append(args, "-dout", atWriteF32(t, p("dout.npy"), dout, oShape...))
	}
	if c.dlse {
		dlse = atRand(rng, nb*c.H*Sq)
		args = append(args, "-dlse", atWriteF32(t, p("dlse.npy"), dlse, lseShape...))
	}
	if c.sinks {
		sinks = atRand(rng, c.H)
		args = append(args, "-sinks", atWriteF32(t, p("sinks.npy"), sinks, c.H))
	}
	if c.alibi {
		slopes = make([]float32, c.H)
		for i := range slopes {
			slopes[i] = 0.05 + 0.4*rng.Float32()
		}
		args = append(args, "-alibi", atWriteF32(t, p("slopes.npy"), slopes, c.H))
	}
	if c.causal {
		args = append(args, "-causal")
	}
	if c.topLeft {
		args = append(args, "-top-left")
	}
	if c.window != nil {
		args = append(args, "-window-left", fmt.Sprint(c.window[0]), "-window-right", fmt.Sprint(c.window[1]))
	}
	if c.bf16 {
		args = append(args, "-dtype", "bf16")
	}
	if varlen {
		args = append(args, "-cu-seqlens-q", atWriteI32(t, p("cu_q.npy"), c.cuQ, len(c.cuQ)),
			"-cu-seqlens-k", atWriteI32(t, p("cu_k.npy"), c.cuK, len(c.cuK)))
		if c.usedQ != nil {
			args = append(args, "-seqused-q", atWriteI32(t, p("used_q.npy"), c.usedQ, len(c.usedQ)))
		}
		if c.usedK != nil {
			args = append(args, "-seqused-k", atWriteI32(t, p("used_k.npy"), c.usedK, len(c.usedK)))
		}
	}
	code, _, stderr := atRun(args...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	want := []string{"lse.npy", "out.npy"}
	if c.backward {
		want = []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}
		if c.sinks {
			want = []string{"dk.npy", "dq.npy", "dsinks.npy", "dv.npy", "lse.npy", "out.npy"}
		}
	}
	if got := atDirNames(t, out); !slices.Equal(got, want) {
		t.Fatalf("output dir holds %v, want %v", got, want)
	}
	gotO := atReadF32(t, filepath.Join(out, "out.npy"), oShape...)
	gotL := atReadF32(t, filepath.Join(out, "lse.npy"), lseShape...)
	var gotDQ, gotDK, gotDV, gotDS []float32
	if c.backward {
		gotDQ = atReadF32(t, filepath.Join(out, "dq.npy"), qShape...)
		gotDK = atReadF32(t, filepath.Join(out, "dk.npy"), kShape...)
		gotDV = atReadF32(t, filepath.Join(out, "dv.npy"), vShape...)
		if c.sinks {
			gotDS = atReadF32(t, filepath.Join(out, "dsinks.npy"), c.H)
		}
	}

	par := reference.Params{Heads: c.H, KVHeads: c.KVH, HeadDim: c.D, HeadDimV: dv, Causal: c.causal, TopLeft: c.topLeft}
	if sinks != nil {
		par.Sinks = atTo64(sinks)
	}
	if slopes != nil {
		par.ALiBi = atTo64(slopes)
	}
	if c.window != nil {
		par.Window, par.WindowLeft, par.WindowRight = true, c.window[0], c.window[1]
	}
	if !varlen {
		par.Batch, par.SeqQ, par.SeqK = B, Sq, Sk
		o, l, dq, dk, dvr, ds := ftReference(par, c.bf16, q, k, v, dout, dlse)
		ftCheckOne(t, c.bf16, "O", gotO, o)
		ftCheckOne(t, c.bf16, "LSE", gotL, l)
		if c.backward {
			ftCheckOne(t, c.bf16, "dQ", gotDQ, dq)
			ftCheckOne(t, c.bf16, "dK", gotDK, dk)
			ftCheckOne(t, c.bf16, "dV", gotDV, dvr)
			if c.sinks && c.bf16 {
				ftCheckHalfDSinks(t, gotDS, ds, gotO, gotL, dout, sinks, B, Sq, c.H, dv)
			} else if c.sinks {
				ftCheckOne(t, c.bf16, "dsinks", gotDS, ds)
			}
		}
		return
	}

	// Varlen: each sequence against the reference on its used rows and
	// keys; unused rows have O = 0, LSE = −Inf and dQ = 0, unused keys
	// dK = dV = 0; dsinks sums over the sequences.
	H, KH, D := c.H, c.KVH, c.D
	dsSum := ftRef{make([]float64, H), make([]float32, H)}
	for b := 0; b < B; b++ {
		q0, q1, k0, k1 := int(c.cuQ[b]), int(c.cuQ[b+1]), int(c.cuK[b]), int(c.cuK[b+1])
		uq, uk := q1-q0, k1-k0
		if c.usedQ != nil {
			uq = int(c.usedQ[b])
		}
		if c.usedK != nil {
			uk = int(c.usedK[b])
		}
		pb := par
		pb.Batch, pb.SeqQ, pb.SeqK = 1, uq, uk
		rows := func(x []float32, r0, n, w int) []float32 { return x[r0*w : (r0+n)*w] }
		var bdout, bdlse []float32
		if c.backward {
			bdout = rows(dout, q0, uq, H*dv)
		}
		if c.dlse {
			for h := 0; h < H; h++ {
				bdlse = append(bdlse, dlse[h*Sq+q0:h*Sq+q0+uq]...)
			}
		}
		o, l, dq, dk, dvr, ds := ftReference(pb, c.bf16, rows(q, q0, uq, H*D), rows(k, k0, uk, KH*D), rows(v, k0, uk, KH*dv), bdout, bdlse)
		name := fmt.Sprintf("seq %d: ", b)
		var gl []float32
		for h := 0; h < H; h++ {
			gl = append(gl, gotL[h*Sq+q0:h*Sq+q0+uq]...)
			for i := q0 + uq; i < q1; i++ {
				if !math.IsInf(float64(gotL[h*Sq+i]), -1) {
					t.Errorf("%sunused row %d head %d: lse %v, want -Inf", name, i, h, gotL[h*Sq+i])
				}
			}
		}
		ftCheckOne(t, c.bf16, name+"O", rows(gotO, q0, uq, H*dv), o)
		ftCheckOne(t, c.bf16, name+"LSE", gl, l)
		zero := func(what string, x []float32) {
			for i, y := range x {
				if y != 0 {
					t.Errorf("%s%s[%d] = %v, want 0", name, what, i, y)
					return
				}
			}
		}
		zero("unused rows of out", rows(gotO, q0+uq, q1-q0-uq, H*dv))
		if !c.backward {
			continue
		}
		ftCheckOne(t, c.bf16, name+"dQ", rows(gotDQ, q0, uq, H*D), dq)
		ftCheckOne(t, c.bf16, name+"dK", rows(gotDK, k0, uk, KH*D), dk)
		ftCheckOne(t, c.bf16, name+"dV", rows(gotDV, k0, uk, KH*dv), dvr)
		zero("unused rows of dq", rows(gotDQ, q0+uq, q1-q0-uq, H*D))
		zero("unused keys of dk", rows(gotDK, k0+uk, k1-k0-uk, KH*D))
		zero("unused keys of dv", rows(gotDV, k0+uk, k1-k0-uk, KH*dv))
		for h := range ds.r64 {
			dsSum.r64[h] += ds.r64[h]
			dsSum.r32[h] += ds.r32[h]
		}
	}
	if c.backward && c.sinks {
		ftCheckOne(t, c.bf16, "dsinks", gotDS, dsSum)
	}
}

// ftCheckHalfDSinks checks a 16-bit run's dsinks: the 16-bit backward
// forms D = rowsum(dO∘O) from the output rounded to its type, as
// flash-attn does, so dsink_h may exceed the same-type rule by
// Σ_{b,i} P_sink·2⁻⁸·‖dO_i‖‖O_i‖ (the library's own bound in its tests,
// here per head, with O and LSE as the run wrote them).
func ftCheckHalfDSinks(t *testing.T, got []float32, r ftRef, o, lse, dout, sinks []float32, B, Sq, H, dv int) {
	t.Helper()
	pl := reference.MaxAbsDiff32vs64(r.r32, r.r64)
	for h := 0; h < H; h++ {
		bound := 0.0
		for b := 0; b < B; b++ {
			for i := 0; i < Sq; i++ {
				var a, c float64
				row := ((b*Sq+i)*H + h) * dv
				for x := 0; x < dv; x++ {
					a += float64(dout[row+x]) * float64(dout[row+x])
					c += float64(o[row+x]) * float64(o[row+x])
				}
				ps := math.Exp(float64(sinks[h]) - float64(lse[(b*H+h)*Sq+i]))
				bound += ps * 0x1p-8 * math.Sqrt(a*c)
			}
		}
		e := math.Abs(float64(got[h]) - r.r64[h])
		if !(e <= 2*pl+reference.Slack(reference.BF16)+bound) {
			t.Errorf("dsinks[%d]: error %.3g exceeds 2×%.3g + slack + bound %.3g", h, e, pl, bound)
		}
	}
}
