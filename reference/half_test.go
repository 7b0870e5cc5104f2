package reference

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestHalfRoundsPBeforePV: with uniform scores over three keys P = 1/3,
// and V = 1, 2, 4 gives O = 7·round(1/3) rounded, which differs from 7/3
// rounded in both types. Worked out: bf16(1/3) = 0.333984375, 7× that is
// 2.337890625 (exact in float32), which rounds to 2.34375 (bf16 spacing at
// 2 is 2^-6); 7/3 would give 2.328125. fp16(1/3) = 0.333251953125, 7× is
// 2.332763671875 → 2.33203125 (spacing 2^-9); 7/3 would give 2.333984375.
func TestHalfRoundsPBeforePV(t *testing.T) {
	p := Params{Batch: 1, SeqQ: 1, SeqK: 3, Heads: 1, KVHeads: 1, HeadDim: 1}
	for _, c := range []struct {
		t           Precision
		want, plain float32
	}{{BF16, 2.34375, 2.328125}, {F16, 2.33203125, 2.333984375}} {
		o, lse := ForwardHalf(p, c.t, []float32{0}, []float32{0.5, -1, 2}, []float32{1, 2, 4})
		if o[0] != c.want {
			t.Errorf("%s: O = %v, want %v", c.t, o[0], c.want)
		}
		if w := c.t.Round(7.0 / 3); w != c.plain || w == c.want {
			t.Fatalf("%s: test premise: round(7/3) = %v", c.t, w)
		}
		if want := float32(math.Log(3)); lse[0] != want {
			t.Errorf("%s: LSE = %v, want log 3 = %v (not rounded)", c.t, lse[0], want)
		}
	}
}

// direct is an independent, plain transcription of the same-type algorithm
// for one batch element and one head without options, in the operation
// order of Forward32/Backward32, to check where the rounding happens.
func direct(t Precision, sq, sk, d int, q, k, v, do []float32) (o, lse, dq, dk, dv []float32) {
	r := t.Round
	q, k, v, do = t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.RoundSlice(do)
	s := float32(1 / math.Sqrt(float64(d)))
	P := make([]float32, sq*sk)
	o, lse = make([]float32, sq*d), make([]float32, sq)
	for i := 0; i < sq; i++ {
		m := float32(math.Inf(-1))
		for j := 0; j < sk; j++ {
			var dot float32
			for x := 0; x < d; x++ {
				dot += q[i*d+x] * k[j*d+x]
			}
			P[i*sk+j] = s * dot
			m = max(m, P[i*sk+j])
		}
		var sum float32
		for j := 0; j < sk; j++ {
			P[i*sk+j] = float32(math.Exp(float64(P[i*sk+j] - m)))
			sum += P[i*sk+j]
		}
		for j := 0; j < sk; j++ {
			P[i*sk+j] /= sum
		}
		lse[i] = m + float32(math.Log(float64(sum)))
		for j := 0; j < sk; j++ {
			pr := r(P[i*sk+j]) // P rounded before P·V
			for x := 0; x < d; x++ {
				o[i*d+x] += pr * v[j*d+x]
			}
		}
	}
	dq, dk, dv = make([]float32, sq*d), make([]float32, sk*d), make([]float32, sk*d)
	dS := make([]float32, sq*sk)
	for i := 0; i < sq; i++ {
		var rowDot float32
		dp := make([]float32, sk)
		for j := 0; j < sk; j++ {
			for x := 0; x < d; x++ {
				dp[j] += do[i*d+x] * v[j*d+x]
			}
			rowDot += dp[j] * P[i*sk+j]
		}
		for j := 0; j < sk; j++ {
			dS[i*sk+j] = r(P[i*sk+j] * (dp[j] - rowDot)) // dS rounded before dS·K, dSᵀ·Q
		}
	}
	for j := 0; j < sk; j++ {
		for i := 0; i < sq; i++ {
			pr := r(P[i*sk+j]) // P rounded before Pᵀ·dO
			for x := 0; x < d; x++ {
				dv[j*d+x] += pr * do[i*d+x]
			}
		}
	}
	acc := make([]float32, d)
	for i := 0; i < sq; i++ {
		clear(acc)
		for j := 0; j < sk; j++ {
			for x := 0; x < d; x++ {
				acc[x] += dS[i*sk+j] * k[j*d+x]
			}
		}
		for x := 0; x < d; x++ {
			dq[i*d+x] = s * acc[x]
		}
	}
	for j := 0; j < sk; j++ {
		clear(acc)
		for i := 0; i < sq; i++ {
			for x := 0; x < d; x++ {
				acc[x] += dS[i*sk+j] * q[i*d+x]
			}
		}
		for x := 0; x < d; x++ {
			dk[j*d+x] = s * acc[x]
		}
	}
	for _, out := range [][]float32{o, dq, dk, dv} {
		for x := range out {
			out[x] = r(out[x])
		}
	}
	return o, lse, dq, dk, dv
}

func TestHalfMatchesDirect(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, tp := range []Precision{BF16, F16} {
		for _, sh := range [][3]int{{1, 1, 1}, {3, 5, 4}, {7, 4, 8}, {5, 9, 3}} {
			sq, sk, d := sh[0], sh[1], sh[2]
			p := Params{Batch: 1, SeqQ: sq, SeqK: sk, Heads: 1, KVHeads: 1, HeadDim: d}
			q, k := to32(randSlice(r, sq*d, 2)), to32(randSlice(r, sk*d, 2))
			v, do := to32(randSlice(r, sk*d, 1)), to32(randSlice(r, sq*d, 1))
			o, lse := ForwardHalf(p, tp, q, k, v)
			dq, dk, dv := BackwardHalf(p, tp, q, k, v, do)
			wo, wl, wdq, wdk, wdv := direct(tp, sq, sk, d, q, k, v, do)
			for _, c := range []struct {
				name      string
				got, want []float32
			}{{"O", o, wo}, {"LSE", lse, wl}, {"dQ", dq, wdq}, {"dK", dk, wdk}, {"dV", dv, wdv}} {
				for i := range c.got {
					if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
						t.Fatalf("%s %v %s[%d] = %v, direct transcription %v", tp, sh, c.name, i, c.got[i], c.want[i])
					}
				}
			}
		}
	}
}

// TestHalfOptions runs every option combination of the float32 tests in
// both types and checks: outputs hold values of the type; LSE equals
// Forward32's on the rounded inputs bit for bit (scores and softmax are
// float32); the error against float64 is that of a 16-bit computation —
// well above float32's (the rounding happened), below a few units in the
// last place of the type (nothing else went wrong) — and CheckHalf accepts
// the baseline itself.
func TestHalfOptions(t *testing.T) {
	for ci, c := range cases {
		for _, tp := range []Precision{BF16, F16} {
			t.Run(c.name+"/"+tp.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(ci), 31))
				p := c.p
				nq, nk := sizes(p)
				q := tp.RoundSlice(to32(randSlice(r, nq, 2)))
				k := tp.RoundSlice(to32(randSlice(r, nk, 2)))
				v := tp.RoundSlice(to32(randSlice(r, nk, 1)))
				g := tp.RoundSlice(to32(randSlice(r, nq, 1)))
				o, lse := ForwardHalf(p, tp, q, k, v)
				dq, dk, dv := BackwardHalf(p, tp, q, k, v, g)
				_, lse32 := Forward32(p, q, k, v)
				o32, _ := Forward32(p, q, k, v)
				dq32, dk32, dv32 := Backward32(p, q, k, v, g)
				o64, lse64 := Forward64(p, to64(q), to64(k), to64(v))
				dq64, dk64, dv64 := Backward64(p, to64(q), to64(k), to64(v), to64(g))
				for i := range lse {
					if math.Float32bits(lse[i]) != math.Float32bits(lse32[i]) {
						t.Fatalf("LSE[%d] = %v, Forward32 %v", i, lse[i], lse32[i])
					}
				}
				ulp := 0x1p-8 // relative spacing of bf16 (8 bits)
				if tp == F16 {
					ulp = 0x1p-11
				}
				var eHalf, e32 float64
				for _, x := range []struct {
					name  string
					h, f  []float32
					ref   []float64
					bound float64 // in units of ulp·(1 + max|ref|)
				}{
					{"O", o, o32, o64, 4},
					{"dQ", dq, dq32, dq64, 16},
					{"dK", dk, dk32, dk64, 16},
					{"dV", dv, dv32, dv64, 8},
				} {
					var mref float64
					for i, y := range x.h {
						if tp.Round(y) != y {
							t.Fatalf("%s[%d] = %v is not a %s value", x.name, i, y, tp)
						}
						mref = max(mref, math.Abs(x.ref[i]))
					}
					eh, ef := MaxAbsDiff32vs64(x.h, x.ref), MaxAbsDiff32vs64(x.f, x.ref)
					if eh > x.bound*ulp*(1+mref) {
						t.Errorf("%s: error %g against float64, more than %g ulp", x.name, eh, x.bound)
					}
					if err := CheckHalf(x.name, tp, x.h, x.h, x.ref); err != nil {
						t.Error(err)
					}
					eHalf, e32 = max(eHalf, eh), max(e32, ef)
				}
				if !(eHalf > 10*e32) {
					t.Errorf("same-type error %g is not well above the float32 error %g: no rounding?", eHalf, e32)
				}
				if err := CheckHalf("LSE", tp, lse, lse, lse64); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

func TestCheckHalf(t *testing.T) {
	ref := []float64{1, 2, 3}
	for _, c := range []struct {
		t          Precision
		plain      float32 // error 0.01 (bf16) or 0.001 (f16) at index 1
		pass, fail float32
	}{{BF16, 2.01, 2.0205, 2.022}, {F16, 2.001, 2.00205, 2.0022}} {
		plain := []float32{1, c.plain, 3}
		if err := CheckHalf("o", c.t, []float32{1, c.pass, 3}, plain, ref); err != nil {
			t.Errorf("%s: %v", c.t, err)
		}
		err := CheckHalf("o", c.t, []float32{1, c.fail, 3}, plain, ref)
		if err == nil || !strings.Contains(err.Error(), "plain "+c.t.String()) || !strings.Contains(err.Error(), "index 1") {
			t.Errorf("%s: error %v", c.t, err)
		}
		if CheckHalf("o", c.t, []float32{1, float32(math.NaN()), 3}, plain, ref) == nil {
			t.Errorf("%s: NaN accepted", c.t)
		}
		if CheckHalf("o", c.t, []float32{1, 2}, plain, ref) == nil {
			t.Errorf("%s: short slice accepted", c.t)
		}
	}
	if Slack(BF16) != 1e-3 || Slack(F16) != 1e-4 {
		t.Error("slack")
	}
}

func TestPrecision(t *testing.T) {
	if BF16.Round(1+0x1p-8) != 1 || F16.Round(1+0x1p-11) != 1 || F16.Round(70000) != float32(math.Inf(1)) {
		t.Error("Round")
	}
	if BF16.String() != "bfloat16" || F16.String() != "float16" || Precision(9).String() != "Format(9)" {
		t.Error("String")
	}
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "reference:") {
			t.Errorf("unknown precision: panic %v", r)
		}
	}()
	ForwardHalf(Params{Batch: 1, SeqQ: 1, SeqK: 1, Heads: 1, KVHeads: 1, HeadDim: 1}, 0, []float32{1}, []float32{1}, []float32{1})
}
