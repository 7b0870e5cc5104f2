package flashattn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// precisionCase is a case the error rule once failed: few keys, steep
// ALiBi, large logits.
type precisionCase struct {
	name   string
	c      tcase
	mul    float32    // inputs q and k multiplied by it
	scale  float32    // 0: default
	slopes [2]float32 // ALiBi slopes drawn in [lo, hi) when hi > 0
	fa2    bool       // dQ, dK may exceed the rule by fa2Bound
	spike  float32    // > 0: key 0 of each KV head set so that q·k ≈ spike for query row 0 of its first query head
}

var precisionCases = []precisionCase{
	{name: "one key", c: tcase{b: 1, sq: 1, sk: 1, h: 4, hk: 2, d: 64}},
	{name: "two keys causal", c: tcase{b: 1, sq: 2, sk: 2, h: 4, hk: 2, d: 64, causal: true}},
	{name: "alibi steep", c: tcase{b: 2, sq: 64, sk: 64, h: 4, hk: 2, d: 32, causal: true, alibi: 2}, slopes: [2]float32{1, 8}},
	{name: "alibi mild", c: tcase{b: 2, sq: 64, sk: 64, h: 4, hk: 2, d: 32, causal: true, alibi: 2}, slopes: [2]float32{0, 0.5}},
	{name: "scale 100", c: tcase{b: 1, sq: 64, sk: 64, h: 2, hk: 2, d: 32, causal: true}, scale: 100, fa2: true},
	{name: "inputs x30", c: tcase{b: 1, sq: 64, sk: 64, h: 2, hk: 2, d: 32, causal: true}, mul: 30, fa2: true},
	{name: "inputs x100", c: tcase{b: 1, sq: 64, sk: 64, h: 2, hk: 2, d: 32, causal: true}, mul: 100, fa2: true},
	// Large logits on every kernel path: one 64-key tile at D = 64 (the
	// reliability report's case), not causal; many key tiles, causal and
	// not; GQA.
	{name: "x100 d64 one tile", c: tcase{b: 1, sq: 64, sk: 64, h: 2, hk: 2, d: 64}, mul: 100, fa2: true},
	{name: "x30 d64 one tile", c: tcase{b: 1, sq: 40, sk: 64, h: 2, hk: 1, d: 64}, mul: 30, fa2: true},
	{name: "x100 many tiles causal", c: tcase{b: 1, sq: 300, sk: 700, h: 2, hk: 1, d: 48, causal: true}, mul: 100, fa2: true},
	{name: "x30 many tiles", c: tcase{b: 2, sq: 100, sk: 530, h: 2, hk: 2, d: 32}, mul: 30, fa2: true},
}

// fa2Bound is the documented excess of FA2's dQ (dK with q for k) over the
// plain algorithm's error on near-one-hot rows: FA2 forms
// D = rowsum(dO∘O) from the output, where the plain algorithm forms
// D = Σ_j P_ij·dP_ij from the same rounded dP_ij it subtracts D from, so the
// rounding of the dot products dP_ij = dO_i·V_j (at most d·2⁻²⁴·|dO_i|·|V_j|)
// cancels there and not here:
//
//	|ΔdQ_i| ≤ scale · d·2⁻²³ · ‖dO_i‖₂ · max_j ‖V_j‖₂ · max_j ‖K_j‖∞
func fa2Bound(scale float64, d int, do, v, k []float32) float64 {
	norm2 := func(x []float32) (m float64) {
		for i := 0; i < len(x); i += d {
			var s float64
			for _, y := range x[i : i+d] {
				s += float64(y) * float64(y)
			}
			m = max(m, math.Sqrt(s))
		}
		return m
	}
	var kInf float64
	for _, y := range k {
		kInf = max(kInf, math.Abs(float64(y)))
	}
	return scale * float64(d) * 0x1p-23 * norm2(do) * norm2(v) * kInf
}

// TestPrecisionEdgeCases: the cases of the reliability report under the
// error rule (and, for dQ and dK with large logits, the rule plus the
// documented FA2 bound), on every kernel path, several seeds (under -race,
// each case and seed on one path: see gridRotation).
func TestPrecisionEdgeCases(t *testing.T) {
	type run struct {
		pc   precisionCase
		seed uint64
	}
	var runs []run
	for _, pc := range precisionCases {
		for seed := uint64(1); seed <= 4; seed++ {
			runs = append(runs, run{pc, seed})
		}
	}
	rot := newGridRotation(kernelPaths())
	forEachKernel(t, func(t *testing.T) {
		for _, it := range gridShare(rot, runs) {
			checkPrecisionCase(t, it.pc, it.seed)
		}
	})
}

// checkPrecisionCase runs pc with inputs of seed, forward and backward,
// under the error rule (dQ and dK with pc.fa2 under the rule plus fa2Bound).
func checkPrecisionCase(t *testing.T, pc precisionCase, seed uint64) {
	t.Helper()
	c := pc.c
	cd := makeCase(c, seed)
	if pc.mul != 0 {
		for i := range cd.q {
			cd.q[i] *= pc.mul
		}
		for i := range cd.k {
			cd.k[i] *= pc.mul
		}
	}
	if pc.spike > 0 {
		// k_0 = q_0·spike/‖q_0‖²: one key with a logit far above the rest.
		for hk := 0; hk < c.hk; hk++ {
			q0 := cd.q[hk*(c.h/c.hk)*c.d:][:c.d]
			var n2 float64
			for _, x := range q0 {
				n2 += float64(x) * float64(x)
			}
			for i, x := range q0 {
				cd.k[hk*c.d+i] = float32(float64(x) * float64(pc.spike) / n2)
			}
		}
	}
	if pc.scale != 0 {
		cd.opt.Scale, cd.par.Scale = pc.scale, float64(pc.scale)
	}
	if pc.slopes[1] > 0 {
		r := rand.New(rand.NewPCG(seed, 9))
		for i := range cd.slopes {
			cd.slopes[i] = pc.slopes[0] + float32(r.Float64())*(pc.slopes[1]-pc.slopes[0])
		}
		cd.par.ALiBi = to64(cd.slopes)
	}
	q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
	out, lse, err := Forward(q, k, v, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	checkForward(t, cd, out.Data, lse)
	dq, dk, dv, err := Backward(q, k, v, out, Dense(cd.do, c.b, c.sq, c.h, c.d), lse, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	dq64, dk64, dv64 := reference.Backward64(cd.par, to64(cd.q), to64(cd.k), to64(cd.v), to64(cd.do))
	dq32, dk32, dv32 := reference.Backward32(plainPar(cd.par), cd.q, cd.k, cd.v, cd.do)
	scale := 1 / math.Sqrt(float64(c.d))
	if pc.scale != 0 {
		scale = float64(pc.scale)
	}
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
		extra   float64
	}{
		{"dQ", dq.Data, dq32, dq64, fa2Bound(scale, c.d, cd.do, cd.v, cd.k)},
		{"dK", dk.Data, dk32, dk64, fa2Bound(scale, c.d, cd.do, cd.v, cd.q)},
		{"dV", dv.Data, dv32, dv64, 0},
	} {
		if !pc.fa2 || g.extra == 0 {
			if err := reference.Check(g.name, g.got, g.pl, g.ref); err != nil {
				t.Errorf("%s seed %d: %v", pc.name, seed, err)
			}
			continue
		}
		e, p := reference.MaxAbsDiff32vs64(g.got, g.ref), reference.MaxAbsDiff32vs64(g.pl, g.ref)
		if e > 2*p+1e-6+g.extra {
			t.Errorf("%s seed %d: %s error %.3g exceeds 2×%.3g + 1e-6 + FA2 bound %.3g", pc.name, seed, g.name, e, p, g.extra)
		}
	}
}
