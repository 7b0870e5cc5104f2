package flashattn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/reference"
)

func precisionOf(dt DType) reference.Precision {
	if dt == Float16 {
		return reference.F16
	}
	return reference.BF16
}

// toType returns a dense tensor of type dt holding x (rounded to it).
func toType(x []float32, dt DType, b, s, h, d int) Tensor {
	t := NewTensorOf(dt, b, s, h, d)
	switch dt {
	case BFloat16:
		half.EncodeBF16(t.BF16, x)
	case Float16:
		half.EncodeF16(t.F16, x)
	default:
		copy(t.Data, x)
	}
	return t
}

// checkHalfCase runs forward and backward on 16-bit tensors of type dt and
// applies the same-type rule to O, LSE, dQ, dK and dV: against the float64
// reference of the rounded inputs, at most twice the error of the
// same-type plain algorithm plus the type's slack (dQ and dK plus the
// documented excess of D from the rounded O: halfDropExcess).
func checkHalfCase(t *testing.T, c tcase, dt DType) {
	t.Helper()
	prec := precisionOf(dt)
	cd := makeCase(c, uint64(c.sq*1000+c.sk*10+c.d))
	qr, kr, vr, dor := prec.RoundSlice(cd.q), prec.RoundSlice(cd.k), prec.RoundSlice(cd.v), prec.RoundSlice(cd.do)
	q, k, v := toType(qr, dt, c.b, c.sq, c.h, c.d), toType(kr, dt, c.b, c.sk, c.hk, c.d), toType(vr, dt, c.b, c.sk, c.hk, c.d)
	do := toType(dor, dt, c.b, c.sq, c.h, c.d)
	out, lse, err := Forward(q, k, v, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	if out.DType() != dt {
		t.Fatalf("Forward returned %v, want %v", out.DType(), dt)
	}
	o64, l64 := reference.Forward64(cd.par, to64(qr), to64(kr), to64(vr))
	oh, lh := reference.ForwardHalf(cd.par, prec, qr, kr, vr)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
	}{{"O", gather(out), oh, o64}, {"LSE", lse, lh, l64}} {
		if err := reference.CheckHalf(g.name, prec, g.got, g.pl, g.ref); err != nil {
			t.Error(err)
		}
	}
	dq, dk, dv, ds := backwardCase(t, c, dt, cd, q, k, v, out, do, lse)
	// The reference backward uses the exact O; ours is given O rounded to
	// the type, as a user's forward output is (with dropout, the documented
	// excess of dQ and dK that this gives: halfDropExcess).
	dq64, dk64, dv64, ds64 := reference.BackwardGrads64(cd.par, to64(qr), to64(kr), to64(vr), to64(dor), dlse64(cd.dlse))
	dqh, dkh, dvh, dsh := reference.BackwardHalfGrads(cd.par, prec, qr, kr, vr, dor, cd.dlse)
	bq, bk := halfDropExcess(cd.par, qr, kr, dor, gather(out), o64, l64)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
		bound   float64
	}{{"dQ", gather(dq), dqh, dq64, bq}, {"dK", gather(dk), dkh, dk64, bk}, {"dV", gather(dv), dvh, dv64, 0}, {"dSinks", ds, dsh, ds64, 0}} {
		if err := checkHalfPlus(g.name, dt, g.got, g.pl, g.ref, g.bound); err != nil {
			t.Error(err)
		}
	}
}

// checkHalfPlus is SPEC §4's same-type rule for type dt (CheckHalf) with
// bound added to its limit: 2·plain + slack + bound.
// Float32 takes the float32 rule (Check), slack 1e-6.
func checkHalfPlus(name string, dt DType, got, plain []float32, ref []float64, bound float64) error {
	prec, slack := precisionOf(dt), 1e-6
	switch {
	case dt == Float32 && bound == 0:
		return reference.Check(name, got, plain, ref)
	case bound == 0:
		return reference.CheckHalf(name, prec, got, plain, ref)
	case dt != Float32:
		slack = reference.Slack(prec)
	}
	e, p := reference.MaxAbsDiff32vs64(got, ref), reference.MaxAbsDiff32vs64(plain, ref)
	if lim := 2*p + slack + bound; !(e <= lim) {
		return fmt.Errorf("%s: max abs error %.3g exceeds 2*%.3g (plain %v error) + %g + D excess %.3g", name, e, p, dt, reference.Slack(prec), bound)
	}
	return nil
}

// TestHalfGrid: bf16 and fp16 across head dims 1…256, odd lengths, GQA,
// masks, softcap, ALiBi, dropout and block masks, under the same-type rule,
// on every float32 kernel path (under -race, a share of the cases on each:
// see gridRotation).
func TestHalfGrid(t *testing.T) {
	var cases []tcase
	for _, d := range []int{1, 8, 40, 64, 72, 128, 256} {
		cases = append(cases, tcase{b: 1, sq: 37, sk: 53, h: 2, hk: 1, d: d}, tcase{b: 2, sq: 45, sk: 29, h: 2, hk: 2, d: d, causal: true})
	}
	cases = append(cases,
		tcase{b: 1, sq: 1, sk: 1, h: 4, hk: 2, d: 64},
		tcase{b: 1, sq: 130, sk: 130, h: 4, hk: 2, d: 24, causal: true},
		tcase{b: 2, sq: 50, sk: 70, h: 6, hk: 3, d: 32, window: &Window{Left: 9, Right: 3}, softcap: 3},
		tcase{b: 2, sq: 33, sk: 47, h: 4, hk: 2, d: 20, causal: true, alibi: 2, dropout: 0.2},
		tcase{b: 1, sq: 2, sk: 500, h: 8, hk: 2, d: 64},
		tcase{b: 1, sq: 61, sk: 45, h: 4, hk: 2, d: 20, causal: true, mods: modCases[0]},
		tcase{b: 1, sq: 70, sk: 70, h: 4, hk: 2, d: 20, mods: modCases[11]},
		// Query super-blocks (two-level tiling; see TestSuperBlocks).
		tcase{b: 1, sq: 333, sk: 300, h: 2, hk: 1, d: 64, cache: 256 << 10},
		tcase{b: 1, sq: 250, sk: 400, h: 4, hk: 2, d: 24, causal: true, cache: 128 << 10},
		tcase{b: 1, sq: 333, sk: 300, h: 2, hk: 1, d: 64, cache: 256 << 10, workers: 1}, // and the dQ pass's
	)
	for _, dt := range []DType{BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			rot := newGridRotation(halfPaths(dt) * kernelPaths()) // under -race each case on one path
			forEachHalf(t, dt, func(t *testing.T) {
				forEachKernel(t, func(t *testing.T) {
					for _, c := range gridShare(rot, cases) {
						t.Run(c.String(), func(t *testing.T) { checkHalfCase(t, c, dt) })
					}
				})
			})
		})
	}
}

// forEachHalf runs f once per 16-bit product path this CPU has for dt
// (native ones such as avx512bf16 and amx, "f32" which widens to the
// float32 kernels, and "generic").
func forEachHalf(t *testing.T, dt DType, f func(t *testing.T)) {
	e := dt.elem()
	for _, h := range kernel.HalfAvailable(e) {
		t.Run(h.Name, func(t *testing.T) {
			forceKernels(t, e.String()+"="+h.Name)
			f(t)
		})
	}
}

// TestHalfMixed: a float32 query against a bf16 KV cache (decoding), and
// ForwardInto a float32 output from bf16 inputs (not rounded).
func TestHalfMixed(t *testing.T) {
	const b, sk, h, hk, d = 2, 300, 8, 2, 64
	c := tcase{b: b, sq: 1, sk: sk, h: h, hk: hk, d: d}
	cd := makeCase(c, 5)
	prec := reference.BF16
	qr, kr, vr := prec.RoundSlice(cd.q), prec.RoundSlice(cd.k), prec.RoundSlice(cd.v)
	k, v := toType(kr, BFloat16, b, sk, hk, d), toType(vr, BFloat16, b, sk, hk, d)
	lens := []int32{300, 177}
	opt := &Options{KVCache: &KVCache{SeqLens: lens}}
	out, lse, err := Forward(Dense(cd.q, b, 1, h, d), k, v, opt)
	if err != nil {
		t.Fatal(err)
	}
	if out.DType() != Float32 {
		t.Fatalf("output type %v, want q's float32", out.DType())
	}
	for bi := 0; bi < b; bi++ {
		n := int(lens[bi])
		par := reference.Params{Batch: 1, SeqQ: 1, SeqK: n, Heads: h, KVHeads: hk, HeadDim: d}
		sq := qr[bi*h*d : (bi+1)*h*d]
		sk, sv := kr[bi*sk*hk*d:][:n*hk*d], vr[bi*sk*hk*d:][:n*hk*d]
		o64, l64 := reference.Forward64(par, to64(sq), to64(sk), to64(sv))
		oh, lh := reference.ForwardHalf(par, prec, sq, sk, sv)
		if err := reference.CheckHalf("O", prec, out.Data[bi*h*d:(bi+1)*h*d], oh, o64); err != nil {
			t.Errorf("sequence %d: %v", bi, err)
		}
		if err := reference.CheckHalf("LSE", prec, lse[bi*h:(bi+1)*h], lh, l64); err != nil {
			t.Errorf("sequence %d: %v", bi, err)
		}
	}
	// bf16 in, float32 out through ForwardInto.
	q16 := toType(qr, BFloat16, b, 1, h, d)
	o32 := NewTensor(b, 1, h, d)
	if err := ForwardInto(o32, nil, q16, k, v, opt); err != nil {
		t.Fatal(err)
	}
	for i, x := range o32.Data {
		if x != out.Data[i] {
			t.Fatalf("bf16 q with float32 out differs from float32 q at %d: %v vs %v", i, x, out.Data[i])
		}
	}
	// bf16 and fp16 together: refused.
	_, _, err = Forward(q16, toType(kr, Float16, b, sk, hk, d), v, opt)
	var ae *ArgError
	if !errors.As(err, &ae) {
		t.Errorf("mixing bf16 and fp16: %v, want an *ArgError", err)
	}
}

// TestTensorTypes: DType, At and the data-field checks.
func TestTensorTypes(t *testing.T) {
	x := []float32{1, -2.5, 3.25, 1e-3}
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		tt := toType(x, dt, 1, 1, 1, 4)
		if tt.DType() != dt {
			t.Errorf("%v: DType %v", dt, tt.DType())
		}
		for i, want := range x {
			got := tt.At(0, 0, 0, i)
			if want := precisionOrSelf(dt, want); got != want {
				t.Errorf("%v: At %d = %v, want %v", dt, i, got, want)
			}
		}
	}
	both := Tensor{Data: make([]float32, 4), BF16: make([]half.BF16, 4), Batch: 1, Seq: 1, Heads: 1, Dim: 4}
	if _, _, err := Forward(both, both, both, nil); err == nil {
		t.Error("a tensor with two data fields was accepted")
	}
	q, k, v := PackedQKV(make([]half.BF16, 2*5*3*2*8), 2, 5, 2, 8)
	if q.DType() != BFloat16 || k.BF16 == nil || v.BatchStride != 5*3*2*8 {
		t.Errorf("PackedQKV of bf16: %+v", k)
	}
}

func precisionOrSelf(dt DType, x float32) float32 {
	if dt == Float32 {
		return x
	}
	return precisionOf(dt).Round(x)
}

// TestQuantizedCache: q8_0 and q4_0 KV caches (llama.cpp's block formats)
// and fp8 e4m3fn and e5m2 caches with a per-tensor scale (vLLM's), appended
// to in place and read in place by the decode kernels, against the float64
// reference of the dequantised cache.
func TestQuantizedCache(t *testing.T) {
	for _, dt := range cacheDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			forEachKernel(t, func(t *testing.T) { checkQuantizedCache(t, dt) })
		})
	}
}

func checkQuantizedCache(t *testing.T, dt DType) {
	const b, hq, hk, d, capacity = 2, 8, 2, 64, 256
	r := rand.New(rand.NewPCG(6, 6))
	kf, vf := randSlice(r, b*capacity*hk*d), randSlice(r, b*capacity*hk*d)
	k, v := newCache(dt, b, capacity, hk, d), newCache(dt, b, capacity, hk, d)
	v.Scale *= 3 // k_scale and v_scale differ
	if err := Convert(k, Dense(kf, b, capacity, hk, d)); err != nil {
		t.Fatal(err)
	}
	if err := Convert(v, Dense(vf, b, capacity, hk, d)); err != nil {
		t.Fatal(err)
	}
	knew, vnew := randSlice(r, b*2*hk*d), randSlice(r, b*2*hk*d)
	q := randSlice(r, b*2*hq*d)
	lens := []int32{100, 254}
	for _, rows := range []int{2, 1} { // 2 query rows per sequence: in place; 1 with a sliding window
		opts := &Options{Causal: true, KVCache: &KVCache{SeqLens: lens, KNew: Dense(knew, b, 2, hk, d), VNew: Dense(vnew, b, 2, hk, d)}}
		if rows == 1 {
			// Read-only now (the keys were appended by the first call).
			opts = &Options{Window: &Window{Left: 50, Right: 0}, KVCache: &KVCache{SeqLens: []int32{lens[0] + 2, lens[1] + 2}}}
		}
		qt := Dense(q[:b*rows*hq*d], b, rows, hq, d)
		out, lse, err := Forward(qt, k, v, opts)
		if err != nil {
			t.Fatal(err)
		}
		// The reference reads the cache back (dequantised, new rows included).
		kd, vd := gather(k), gather(v)
		if rows == 2 {
			// The appended rows are the new keys, quantised exactly as
			// Convert quantises them.
			want := newCache(dt, b, 2, hk, d)
			if err := Convert(want, Dense(knew, b, 2, hk, d)); err != nil {
				t.Fatal(err)
			}
			wd := gather(want)
			for bi := 0; bi < b; bi++ {
				got := kd[(bi*capacity+int(lens[bi]))*hk*d:][:2*hk*d]
				if !slices.Equal(got, wd[bi*2*hk*d:(bi+1)*2*hk*d]) {
					t.Fatalf("sequence %d: the appended keys read back differently from Convert's %v", bi, dt)
				}
			}
		}
		for bi := 0; bi < b; bi++ {
			n := int(lens[bi]) + 2
			par := reference.Params{Batch: 1, SeqQ: rows, SeqK: n, Heads: hq, KVHeads: hk, HeadDim: d, Causal: rows == 2}
			if rows == 1 {
				par.Window, par.WindowLeft, par.WindowRight = true, 50, 0
			}
			sq, sk, sv := q[bi*rows*hq*d:(bi+1)*rows*hq*d], kd[bi*capacity*hk*d:][:n*hk*d], vd[bi*capacity*hk*d:][:n*hk*d]
			o64, l64 := reference.Forward64(par, to64(sq), to64(sk), to64(sv))
			o32, l32 := reference.Forward32(plainPar(par), sq, sk, sv)
			if err := reference.Check("O", out.Data[bi*rows*hq*d:(bi+1)*rows*hq*d], o32, o64); err != nil {
				t.Errorf("rows %d sequence %d: %v", rows, bi, err)
			}
			if err := reference.Check("LSE", lse[bi*hq*rows:(bi+1)*hq*rows], l32, l64); err != nil {
				t.Errorf("rows %d sequence %d: %v", rows, bi, err)
			}
		}
	}
	// A quantised tensor is refused where it is not a cache.
	if _, _, err := Forward(Dense(q[:hq*d], 1, 1, hq, d), k, v, nil); err == nil {
		t.Errorf("%v k and v without a KVCache were accepted", dt)
	}
	inf := Dense(append([]float32{float32(math.Inf(1)), -1e9}, make([]float32, 30)...), 1, 1, 1, 32)
	c := newCache(dt, 1, 1, 1, 32)
	err := Convert(c, inf)
	if dt.quantized() {
		if err == nil {
			t.Errorf("Convert quantised an Inf into %v", dt)
		}
		return
	}
	// fp8 saturates: ±Inf and values beyond the largest finite value
	// store ±max (448 or 57344, times the scale).
	max := map[DType]float32{FP8E4M3: 448, FP8E5M2: 57344}[dt] * c.Scale
	if err != nil || c.At(0, 0, 0, 0) != max || c.At(0, 0, 0, 1) != -max {
		t.Errorf("%v: Convert of Inf, -1e9 read back %v, %v (%v), want ±%v", dt, c.At(0, 0, 0, 0), c.At(0, 0, 0, 1), err, max)
	}
}

// cacheDTypes are the KV-cache-only types.
var cacheDTypes = []DType{Q8_0, Q4_0, FP8E4M3, FP8E5M2}

// newCache is NewTensorOf with, for fp8, a per-tensor scale that is not 1
// (nor a power of two), so that the tests exercise it.
func newCache(dt DType, b, s, h, d int) Tensor {
	t := NewTensorOf(dt, b, s, h, d)
	if dt == FP8E4M3 || dt == FP8E5M2 {
		t.Scale = 0.0123
	}
	return t
}

// The 16-bit type has one numbering: DType, half.Format (reference's
// Precision, gpu's DType) and the kernels' Elem agree.
func TestFormatNumbering(t *testing.T) {
	for _, c := range []struct {
		dt DType
		f  half.Format
		e  kernel.Elem
	}{{BFloat16, half.BFloat16, kernel.BF16}, {Float16, half.Float16, kernel.F16}} {
		if f, ok := c.dt.Format(); !ok || f != c.f || DType(c.f) != c.dt || c.dt.elem() != c.e || uint8(c.e) != uint8(c.f) {
			t.Errorf("%v: Format %v %v, elem %v; want %v, %v", c.dt, f, ok, c.dt.elem(), c.f, c.e)
		}
	}
	for _, dt := range []DType{Float32, Q8_0} {
		if _, ok := dt.Format(); ok {
			t.Errorf("%v has a 16-bit format", dt)
		}
	}
}
