package reference

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/internal/dropout"
	"github.com/flashattn/flashattn/internal/kernel"
)

func randSlice(r *rand.Rand, n int, amp float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = amp * (2*r.Float64() - 1)
	}
	return s
}

func to32(a []float64) []float32 {
	s := make([]float32, len(a))
	for i, v := range a {
		s[i] = float32(v)
	}
	return s
}

func to64(a []float32) []float64 {
	s := make([]float64, len(a))
	for i, v := range a {
		s[i] = float64(v)
	}
	return s
}

func sizes(p Params) (nq, nk int) {
	return p.Batch * p.SeqQ * p.Heads * p.HeadDim, p.Batch * p.SeqK * p.KVHeads * p.HeadDim
}

func TestSingleKey(t *testing.T) {
	p := Params{Batch: 1, SeqQ: 1, SeqK: 1, Heads: 1, KVHeads: 1, HeadDim: 4}
	q := []float64{1, 2, 3, 4}
	k := []float64{0.5, -1, 0.25, 2}
	v := []float64{7, -3, 0.5, 11}
	o, lse := Forward64(p, q, k, v)
	for d := range v {
		if math.Abs(o[d]-v[d]) > 1e-15 {
			t.Fatalf("O = %v, want V = %v", o, v)
		}
	}
	x := (0.5 - 2 + 0.75 + 8) / 2.0
	if math.Abs(lse[0]-x) > 1e-15 {
		t.Fatalf("LSE = %v, want %v", lse[0], x)
	}
}

func TestUniformScoresGiveMean(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := Params{Batch: 1, SeqQ: 3, SeqK: 5, Heads: 2, KVHeads: 1, HeadDim: 3}
	nq, nk := sizes(p)
	q := make([]float64, nq) // zero queries: all scores 0
	k := randSlice(r, nk, 1)
	v := randSlice(r, nk, 1)
	o, lse := Forward64(p, q, k, v)
	for h := 0; h < 2; h++ {
		for i := 0; i < 3; i++ {
			for d := 0; d < 3; d++ {
				var mean float64
				for j := 0; j < 5; j++ {
					mean += v[j*3+d] / 5
				}
				if got := o[(i*2+h)*3+d]; math.Abs(got-mean) > 1e-14 {
					t.Fatalf("O[%d,%d,%d] = %v, want mean %v", i, h, d, got, mean)
				}
			}
			if got := lse[h*3+i]; math.Abs(got-math.Log(5)) > 1e-14 {
				t.Fatalf("LSE = %v, want log 5", got)
			}
		}
	}
}

func TestVisible(t *testing.T) {
	for _, sq := range []int{1, 3, 5, 8} {
		for _, sk := range []int{1, 4, 5, 9} {
			c := Params{SeqQ: sq, SeqK: sk, Causal: true}
			w := Params{SeqQ: sq, SeqK: sk, Window: true, WindowLeft: -1, WindowRight: 0}
			both := Params{SeqQ: sq, SeqK: sk, Causal: true, Window: true, WindowLeft: 2, WindowRight: 3}
			for i := 0; i < sq; i++ {
				for j := 0; j < sk; j++ {
					pos := i + sk - sq
					if Visible(c, i, j) != (j <= pos) {
						t.Fatalf("causal Visible(%d,%d) sq=%d sk=%d wrong", i, j, sq, sk)
					}
					if Visible(c, i, j) != Visible(w, i, j) {
						t.Fatalf("causal != window(-1,0) at (%d,%d)", i, j)
					}
					if Visible(both, i, j) != (j <= pos && j >= pos-2) {
						t.Fatalf("causal+window(2,3) Visible(%d,%d) wrong", i, j)
					}
					if !Visible(Params{SeqQ: sq, SeqK: sk}, i, j) {
						t.Fatal("no mask hides a key")
					}
				}
			}
		}
	}
}

// cases used by the gradient and float32 tests. Sizes stay tiny: finite
// differences call Forward64 twice per input element.
var cases = []struct {
	name string
	p    Params
}{
	{"plain", Params{Batch: 2, SeqQ: 3, SeqK: 4, Heads: 2, KVHeads: 2, HeadDim: 3}},
	{"scale", Params{Batch: 1, SeqQ: 3, SeqK: 3, Heads: 1, KVHeads: 1, HeadDim: 4, Scale: 0.9}},
	{"causal", Params{Batch: 1, SeqQ: 4, SeqK: 4, Heads: 2, KVHeads: 2, HeadDim: 3, Causal: true}},
	{"causal-sq>sk", Params{Batch: 1, SeqQ: 5, SeqK: 3, Heads: 1, KVHeads: 1, HeadDim: 3, Causal: true}},
	{"causal-sq<sk", Params{Batch: 1, SeqQ: 2, SeqK: 5, Heads: 2, KVHeads: 1, HeadDim: 3, Causal: true}},
	{"window", Params{Batch: 1, SeqQ: 5, SeqK: 6, Heads: 1, KVHeads: 1, HeadDim: 3, Window: true, WindowLeft: 1, WindowRight: 1}},
	{"window-left-unbounded", Params{Batch: 1, SeqQ: 4, SeqK: 3, Heads: 1, KVHeads: 1, HeadDim: 2, Window: true, WindowLeft: -1, WindowRight: 1}},
	{"causal+window", Params{Batch: 1, SeqQ: 5, SeqK: 5, Heads: 1, KVHeads: 1, HeadDim: 3, Causal: true, Window: true, WindowLeft: 2, WindowRight: 2}},
	{"softcap", Params{Batch: 1, SeqQ: 3, SeqK: 4, Heads: 2, KVHeads: 2, HeadDim: 3, Softcap: 0.7}},
	{"alibi-heads", Params{Batch: 2, SeqQ: 3, SeqK: 4, Heads: 2, KVHeads: 2, HeadDim: 2, ALiBi: []float64{0.5, 0.25}}},
	{"alibi-batch-heads", Params{Batch: 2, SeqQ: 4, SeqK: 3, Heads: 2, KVHeads: 1, HeadDim: 2, ALiBi: []float64{0.5, 0.25, 0.125, 1}, Causal: true}},
	{"gqa", Params{Batch: 1, SeqQ: 3, SeqK: 4, Heads: 4, KVHeads: 2, HeadDim: 2}},
	{"mqa", Params{Batch: 1, SeqQ: 2, SeqK: 3, Heads: 3, KVHeads: 1, HeadDim: 2}},
	{"dropout", Params{Batch: 2, SeqQ: 3, SeqK: 5, Heads: 2, KVHeads: 1, HeadDim: 2, Dropout: 0.4, Seed: 12345}},
	{"everything", Params{Batch: 1, SeqQ: 3, SeqK: 5, Heads: 2, KVHeads: 1, HeadDim: 3, Causal: true, Window: true, WindowLeft: 3, WindowRight: -1,
		Softcap: 1.5, ALiBi: []float64{0.3, 0.1}, Dropout: 0.25, Seed: 7}},
}

func TestGradientsFiniteDifferences(t *testing.T) {
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 99))
			p := c.p
			nq, nk := sizes(p)
			q := randSlice(r, nq, 1.5)
			k := randSlice(r, nk, 1.5)
			v := randSlice(r, nk, 1)
			g := randSlice(r, nq, 1)
			loss := func() float64 {
				o, _ := Forward64(p, q, k, v)
				var l float64
				for i := range o {
					l += o[i] * g[i]
				}
				return l
			}
			dq, dk, dv := Backward64(p, q, k, v, g)
			const eps = 1e-6
			for _, in := range []struct {
				name string
				x    []float64
				grad []float64
			}{{"dq", q, dq}, {"dk", k, dk}, {"dv", v, dv}} {
				for i := range in.x {
					x0 := in.x[i]
					in.x[i] = x0 + eps
					lp := loss()
					in.x[i] = x0 - eps
					lm := loss()
					in.x[i] = x0
					fd := (lp - lm) / (2 * eps)
					if math.Abs(fd-in.grad[i]) > 1e-7+1e-6*math.Abs(fd) {
						t.Errorf("%s[%d] = %.10g, finite difference %.10g", in.name, i, in.grad[i], fd)
					}
				}
			}
		})
	}
}

func TestFloat32CloseToFloat64(t *testing.T) {
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 7))
			p := c.p
			nq, nk := sizes(p)
			q32 := to32(randSlice(r, nq, 2))
			k32 := to32(randSlice(r, nk, 2))
			v32 := to32(randSlice(r, nk, 1))
			g32 := to32(randSlice(r, nq, 1))
			q, k, v, g := to64(q32), to64(k32), to64(v32), to64(g32)
			o, lse := Forward64(p, q, k, v)
			o32, lse32 := Forward32(p, q32, k32, v32)
			dq, dk, dv := Backward64(p, q, k, v, g)
			dq32, dk32, dv32 := Backward32(p, q32, k32, v32, g32)
			for _, x := range []struct {
				name string
				a    []float32
				b    []float64
			}{{"o", o32, o}, {"lse", lse32, lse}, {"dq", dq32, dq}, {"dk", dk32, dk}, {"dv", dv32, dv}} {
				if d := MaxAbsDiff32vs64(x.a, x.b); d > 1e-5 {
					t.Errorf("%s: float32 differs from float64 by %g", x.name, d)
				}
				if err := Check(x.name, x.a, x.a, x.b); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestHiddenRows(t *testing.T) {
	// SeqQ > SeqK with causal: the first SeqQ-SeqK rows see nothing.
	for _, p := range []Params{
		{Batch: 1, SeqQ: 5, SeqK: 2, Heads: 2, KVHeads: 1, HeadDim: 3, Causal: true, Softcap: 1, ALiBi: []float64{1, 2}, Dropout: 0.3},
		{Batch: 1, SeqQ: 3, SeqK: 0, Heads: 1, KVHeads: 1, HeadDim: 3},
	} {
		r := rand.New(rand.NewPCG(3, 4))
		nq, nk := sizes(p)
		q, k, v, g := randSlice(r, nq, 1), randSlice(r, nk, 1), randSlice(r, nk, 1), randSlice(r, nq, 1)
		o, lse := Forward64(p, q, k, v)
		dq, _, _ := Backward64(p, q, k, v, g)
		o32, lse32 := Forward32(p, to32(q), to32(k), to32(v))
		dq32, dk32, dv32 := Backward32(p, to32(q), to32(k), to32(v), to32(g))
		for _, s := range [][]float64{o, lse, dq, to64(o32), to64(lse32), to64(dq32), to64(dk32), to64(dv32)} {
			for _, x := range s {
				if math.IsNaN(x) {
					t.Fatal("NaN in output")
				}
			}
		}
		for h := 0; h < p.Heads; h++ {
			for i := 0; i < p.SeqQ; i++ {
				hidden := i+p.SeqK-p.SeqQ < 0
				if !hidden {
					continue
				}
				if !math.IsInf(lse[h*p.SeqQ+i], -1) || !math.IsInf(float64(lse32[h*p.SeqQ+i]), -1) {
					t.Fatalf("hidden row %d: LSE = %v, want -Inf", i, lse[h*p.SeqQ+i])
				}
				for d := 0; d < p.HeadDim; d++ {
					at := (i*p.Heads+h)*p.HeadDim + d
					if o[at] != 0 || dq[at] != 0 || o32[at] != 0 || dq32[at] != 0 {
						t.Fatalf("hidden row %d: O or dQ not zero", i)
					}
				}
			}
		}
	}
}

// GQA must equal MHA with the KV heads repeated, and dK/dV must be the sums
// over the sharing query heads.
func TestGQAEqualsRepeatedKV(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	p := Params{Batch: 2, SeqQ: 3, SeqK: 4, Heads: 4, KVHeads: 2, HeadDim: 3, Causal: true, Dropout: 0.2, Seed: 3}
	nq, nk := sizes(p)
	q, k, v, g := randSlice(r, nq, 1), randSlice(r, nk, 1), randSlice(r, nk, 1), randSlice(r, nq, 1)
	pm := p
	pm.KVHeads = p.Heads
	rep := func(x []float64) []float64 {
		out := make([]float64, len(x)*2)
		for b := 0; b < p.Batch; b++ {
			for j := 0; j < p.SeqK; j++ {
				for h := 0; h < p.Heads; h++ {
					for d := 0; d < p.HeadDim; d++ {
						out[((b*p.SeqK+j)*p.Heads+h)*p.HeadDim+d] = x[((b*p.SeqK+j)*p.KVHeads+h/2)*p.HeadDim+d]
					}
				}
			}
		}
		return out
	}
	o1, l1 := Forward64(p, q, k, v)
	o2, l2 := Forward64(pm, q, rep(k), rep(v))
	dq1, dk1, dv1 := Backward64(p, q, k, v, g)
	dq2, dk2, dv2 := Backward64(pm, q, rep(k), rep(v), g)
	same := func(name string, a, b []float64) {
		for i := range a {
			if math.Abs(a[i]-b[i]) > 1e-14 {
				t.Fatalf("%s[%d]: %v vs %v", name, i, a[i], b[i])
			}
		}
	}
	same("o", o1, o2)
	same("lse", l1, l2)
	same("dq", dq1, dq2)
	sum := func(x []float64) []float64 {
		out := make([]float64, len(k))
		for b := 0; b < p.Batch; b++ {
			for j := 0; j < p.SeqK; j++ {
				for h := 0; h < p.Heads; h++ {
					for d := 0; d < p.HeadDim; d++ {
						out[((b*p.SeqK+j)*p.KVHeads+h/2)*p.HeadDim+d] += x[((b*p.SeqK+j)*p.Heads+h)*p.HeadDim+d]
					}
				}
			}
		}
		return out
	}
	same("dk", dk1, sum(dk2))
	same("dv", dv1, sum(dv2))
}

// With V_j = e_j, O_i[j] is the (dropped and scaled) probability P_ij.
func TestDropoutAppliesMask(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const sk = 6
	p := Params{Batch: 2, SeqQ: 3, SeqK: sk, Heads: 2, KVHeads: 2, HeadDim: sk, Dropout: 0.5, Seed: 0xdeadbeefcafe}
	nq, nk := sizes(p)
	q, k := randSlice(r, nq, 1), randSlice(r, nk, 1)
	v := make([]float64, nk)
	for b := 0; b < p.Batch; b++ {
		for j := 0; j < sk; j++ {
			for h := 0; h < p.KVHeads; h++ {
				v[((b*sk+j)*p.KVHeads+h)*sk+j] = 1
			}
		}
	}
	nodrop := p
	nodrop.Dropout = 0
	o, lse := Forward64(p, q, k, v)
	o0, lse0 := Forward64(nodrop, q, k, v)
	m := dropout.NewMask(p.Seed, float32(p.Dropout))
	kept, total := 0, 0
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			for i := 0; i < p.SeqQ; i++ {
				at := (b*p.Heads+h)*p.SeqQ + i
				if lse[at] != lse0[at] {
					t.Fatal("dropout changed LSE")
				}
				for j := 0; j < sk; j++ {
					idx := ((b*p.SeqQ+i)*p.Heads+h)*sk + j
					want := 0.0
					if m.Keep(b, h, i, j) {
						want = o0[idx] * 2
						kept++
					}
					total++
					if math.Abs(o[idx]-want) > 1e-15 {
						t.Fatalf("O[%d,%d,%d,%d] = %v, want %v", b, i, h, j, o[idx], want)
					}
				}
			}
		}
	}
	if kept == 0 || kept == total {
		t.Fatalf("kept %d of %d: mask not exercised", kept, total)
	}
	// Deterministic: a repeated call agrees bit for bit.
	o2, _ := Forward64(p, q, k, v)
	for i := range o {
		if o[i] != o2[i] {
			t.Fatal("repeated call differs")
		}
	}
}

// TestDropoutBatch: batch element 1 of a call, run alone with DropoutBatch
// 1, draws the same mask: O, LSE and the gradients agree bit for bit (and
// differ with DropoutBatch 0).
func TestDropoutBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 10))
	p := Params{Batch: 2, SeqQ: 5, SeqK: 7, Heads: 2, KVHeads: 1, HeadDim: 4, Causal: true, Dropout: 0.4, Seed: 99}
	nq, nk := sizes(p)
	q, k, v, do := randSlice(r, nq, 1), randSlice(r, nk, 1), randSlice(r, nk, 1), randSlice(r, nq, 1)
	o, lse := Forward64(p, q, k, v)
	dq, dk, dv := Backward64(p, q, k, v, do)
	one := p
	one.Batch, one.DropoutBatch = 1, 1
	second := func(x []float64) []float64 { return x[len(x)/2:] }
	o1, lse1 := Forward64(one, second(q), second(k), second(v))
	dq1, dk1, dv1 := Backward64(one, second(q), second(k), second(v), second(do))
	for _, g := range []struct {
		name      string
		got, want []float64
	}{{"O", o1, second(o)}, {"LSE", lse1, second(lse)}, {"dQ", dq1, second(dq)}, {"dK", dk1, second(dk)}, {"dV", dv1, second(dv)}} {
		for i := range g.want {
			if g.got[i] != g.want[i] {
				t.Fatalf("%s[%d] alone with DropoutBatch 1 = %v, want batch element 1's %v", g.name, i, g.got[i], g.want[i])
			}
		}
	}
	one.DropoutBatch = 0
	if o0, _ := Forward64(one, second(q), second(k), second(v)); slices.Equal(o0, o1) {
		t.Fatal("DropoutBatch 0 gives batch element 1's mask: the check cannot tell them apart")
	}
}

func TestMaxAbsDiff(t *testing.T) {
	inf := math.Inf(1)
	nan := math.NaN()
	tests := []struct {
		a    []float32
		b    []float64
		want float64
	}{
		{nil, nil, 0},
		{[]float32{1, 2}, []float64{1.5, 2}, 0.5},
		{[]float32{float32(math.Inf(-1)), 1}, []float64{-inf, 1}, 0},
		{[]float32{float32(math.Inf(-1))}, []float64{inf}, inf},
		{[]float32{float32(math.Inf(-1))}, []float64{0}, inf},
		{[]float32{0}, []float64{-inf}, inf},
		{[]float32{float32(nan)}, []float64{0}, inf},
		{[]float32{0}, []float64{nan}, inf},
		{[]float32{0}, []float64{0, 1}, inf},
	}
	for _, tc := range tests {
		if got := MaxAbsDiff32vs64(tc.a, tc.b); got != tc.want {
			t.Errorf("MaxAbsDiff32vs64(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	ref := []float64{1, 2, 3}
	plain := []float32{1, 2, 3.001}
	if err := Check("o", []float32{1, 2.0019, 3}, plain, ref); err != nil {
		t.Errorf("within 2x: %v", err)
	}
	err := Check("o", []float32{1, 2.003, 3}, plain, ref)
	if err == nil || !strings.Contains(err.Error(), "o:") || !strings.Contains(err.Error(), "index 1") {
		t.Errorf("beyond 2x: got %v", err)
	}
	// Exact baseline: only the 1e-6 slack is allowed.
	if err := Check("lse", []float32{1, 2, 3}, []float32{1, 2, 3}, ref); err != nil {
		t.Error(err)
	}
	if err := Check("lse", []float32{1, 2, 3.00001}, []float32{1, 2, 3}, ref); err == nil {
		t.Error("1e-5 error against exact baseline accepted")
	}
	if err := Check("x", []float32{float32(math.NaN()), 2, 3}, plain, ref); err == nil {
		t.Error("NaN accepted")
	}
	if err := Check("x", []float32{1, 2}, plain, ref); err == nil {
		t.Error("short slice accepted")
	}
}

func TestValidatePanics(t *testing.T) {
	good := Params{Batch: 1, SeqQ: 2, SeqK: 2, Heads: 2, KVHeads: 1, HeadDim: 2}
	q, k := make([]float64, 8), make([]float64, 4)
	bad := []struct {
		name string
		p    Params
		q, k []float64
		want string
	}{
		{"heads", Params{Batch: 1, SeqQ: 2, SeqK: 2, Heads: 3, KVHeads: 2, HeadDim: 2}, make([]float64, 12), make([]float64, 8), "multiple"},
		{"len q", good, q[:7], k, "len(q)"},
		{"len k", good, q, k[:3], "len(k)"},
		{"dropout", func() Params { p := good; p.Dropout = 1; return p }(), q, k, "Dropout"},
		{"alibi", func() Params { p := good; p.ALiBi = []float64{1, 2, 3}; return p }(), q, k, "ALiBi"},
		{"softcap", func() Params { p := good; p.Softcap = -1; return p }(), q, k, "Softcap"},
	}
	for _, tc := range bad {
		func() {
			defer func() {
				r := recover()
				s, _ := r.(string)
				if !strings.HasPrefix(s, "reference: ") || !strings.Contains(s, tc.want) {
					t.Errorf("%s: panic %v, want message containing %q", tc.name, r, tc.want)
				}
			}()
			Forward64(tc.p, tc.q, tc.k, tc.k)
		}()
	}
}

// TestFusedScores: with Params.FusedScores the score q·k of Forward32 is
// the chain of fused multiply-adds s = fma(q[d], k[d], s) from zero (the
// baseline of kernels that fuse, SPEC §4), and without it the chain of
// rounded products; with one key LSE is that score. Forward64 fuses with
// math.FMA. Large operands make the two arithmetics differ.
func TestFusedScores(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const d = 64
	differ := 0
	for range 50 {
		q, k := to32(randSlice(r, d, 100)), to32(randSlice(r, d, 100))
		v := to32(randSlice(r, d, 1))
		var fused, plain float32
		var fused64 float64
		for i := range q {
			fused = kernel.FMA32(q[i], k[i], fused)
			plain += float32(q[i] * k[i])
			fused64 = math.FMA(float64(q[i]), float64(k[i]), fused64)
		}
		for _, c := range []struct {
			fused bool
			want  float32
		}{{true, fused}, {false, plain}} {
			p := Params{Batch: 1, SeqQ: 1, SeqK: 1, Heads: 1, KVHeads: 1, HeadDim: d, Scale: 1, FusedScores: c.fused}
			if _, lse := Forward32(p, q, k, v); math.Float32bits(lse[0]) != math.Float32bits(c.want) {
				t.Fatalf("FusedScores %v: LSE %v, want the score %v", c.fused, lse[0], c.want)
			}
		}
		p := Params{Batch: 1, SeqQ: 1, SeqK: 1, Heads: 1, KVHeads: 1, HeadDim: d, Scale: 1, FusedScores: true}
		if _, lse := Forward64(p, to64(q), to64(k), to64(v)); lse[0] != fused64 {
			t.Fatalf("Forward64 FusedScores: LSE %v, want %v", lse[0], fused64)
		}
		if fused != plain {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("the fused and rounded scores never differ: the test tells nothing")
	}
}
