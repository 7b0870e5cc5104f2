package flashattn

import (
	"math"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// halfDBound is the documented excess of the 16-bit backward's dQ and dK
// over the same-type rule on rows with large logits. The backward forms
// D_i = rowsum(dO_i∘O_i) from the output in its 16-bit type, as flash-attn
// does, while the same-type plain algorithm forms D_i = Σ_j P_ij·dP_ij from
// float32 P and dP; rounding O to the type changes D_i by at most
// u·‖dO_i‖₂·‖O_i‖₂ (u = 2⁻⁸ for bfloat16, 2⁻¹¹ for float16), and that
// error reaches dS_ij = P_ij·(dP_ij − D_i) unattenuated where P_ij ≈ 1
// (large logits, steep ALiBi; with dropout, a one-hot row's O = V_j/(1−p)
// is no longer a value of the type):
//
//	|ΔdQ_i| ≤ scale·u·‖dO_i‖₂·‖O_i‖₂·max_j ‖K_j‖∞
//	|ΔdK_j| ≤ scale·u·max_i(‖dO_i‖₂·‖O_i‖₂)·max_i ‖Q_i‖∞·Σ_i P_ij
//
// halfDBound returns the two bounds (the column sum of P taken at its
// largest, over the group of query heads sharing a KV head) for one batch-1
// case of group query heads per KV head; p holds P [h][i][j].
func halfDBound(dt DType, scale float64, d, group int, do, o, q, k []float32, p [][]float64, sk int) (dq, dk float64) {
	u := 0x1p-8
	if dt == Float16 {
		u = 0x1p-11
	}
	dD := make([]float64, len(do)/d)
	for r := range dD {
		var a, b float64
		for c := 0; c < d; c++ {
			a += float64(do[r*d+c]) * float64(do[r*d+c])
			b += float64(o[r*d+c]) * float64(o[r*d+c])
		}
		dD[r] = u * math.Sqrt(a*b)
	}
	return dExcess(scale, d, group, dD, q, k, p, sk)
}

// dExcess is the bound on dQ's and dK's excess that an error of at most
// dD[r] in D of each query row r (rows [i][h]) gives:
// scale·max_r dD[r]·max‖K‖∞ and scale·max_r dD[r]·max‖Q‖∞·Σ_i P_ij.
func dExcess(scale float64, d, group int, dD []float64, q, k []float32, p [][]float64, sk int) (dq, dk float64) {
	var dd, qInf, kInf, col float64
	for _, x := range dD {
		dd = max(dd, x)
	}
	for _, x := range q {
		qInf = max(qInf, math.Abs(float64(x)))
	}
	for _, x := range k {
		kInf = max(kInf, math.Abs(float64(x)))
	}
	for g := 0; g < len(p); g += group {
		for j := 0; j < sk; j++ {
			var s float64
			for _, ph := range p[g : g+group] {
				for i := j; i < len(ph); i += sk {
					s += ph[i]
				}
			}
			col = max(col, s)
		}
	}
	return scale * dd * kInf, scale * dd * qInf * col
}

// halfDropExcess is dExcess for a call (float32, or 16-bit; dense
// [batch, seq, heads, dim] inputs q, k, do rounded to the type, its output
// o, the reference's o64 and lse64 for par): each row's D error measured,
// |dO_i·(O_i − O64_i)|. Dropout takes a one-hot row's O = V_j/(1−p) off
// the type's grid, and that row's dS = P·(dP − D) then carries D's
// rounding (halfDBound; without dropout such a row's O is V_j, exact).
// Without dropout, O's own rounding (float32 or 16-bit) enters D the same
// way: FA2's documented D = rowsum(dO∘O) excess (README, "What is
// guaranteed"), measured rather than bounded.
func halfDropExcess(par reference.Params, q, k, do, o []float32, o64, lse64 []float64) (dq, dk float64) {
	B, h, d, sq, sk := par.Batch, par.Heads, par.HeadDim, par.SeqQ, par.SeqK
	nq, nk := sq*h*d, sk*par.KVHeads*d
	for b := 0; b < B; b++ {
		one := par
		one.Batch, one.DropoutBatch = 1, par.DropoutBatch+b
		if len(par.ALiBi) == B*h {
			one.ALiBi = par.ALiBi[b*h : (b+1)*h]
		}
		dD := make([]float64, sq*h)
		for r := range dD {
			for c := 0; c < d; c++ {
				at := b*nq + r*d + c
				dD[r] += float64(do[at]) * (float64(o[at]) - o64[at])
			}
			dD[r] = math.Abs(dD[r])
		}
		qb, kb := q[b*nq:][:nq], k[b*nk:][:nk]
		bq, bk := dExcess(1/math.Sqrt(float64(d)), d, h/par.KVHeads, dD, qb, kb, probs64(one, to64(qb), to64(kb), lse64[b*h*sq:][:h*sq]), sk)
		dq, dk = max(dq, bq), max(dk, bk)
	}
	return dq, dk
}

// probs64 returns P [h][i·sk+j] of a batch-1 case in float64 from its
// LSE [h][i] (par's causal mask, window, TopLeft, softcap, ALiBi, ScoreMod,
// Mask and KV heads; Mask and ScoreMod see batch index par.DropoutBatch, the
// batch element a halfDropExcess slice is of). A row of LSE −Inf sees no key.
func probs64(par reference.Params, q, k, lse []float64) [][]float64 {
	d, sq, sk, h, hk := par.HeadDim, par.SeqQ, par.SeqK, par.Heads, par.KVHeads
	scale := 1 / math.Sqrt(float64(d))
	p := make([][]float64, h)
	for hh := range p {
		p[hh] = make([]float64, sq*sk)
		kh := hh / (h / hk)
		for i := 0; i < sq; i++ {
			for j := 0; j < sk; j++ {
				if !reference.Visible(par, i, j) || math.IsInf(lse[hh*sq+i], -1) || par.Mask != nil && !par.Mask(par.DropoutBatch, hh, i, j) {
					continue
				}
				var s float64
				for c := 0; c < d; c++ {
					s += q[(i*h+hh)*d+c] * k[(j*hk+kh)*d+c]
				}
				x := scale * s
				if par.Softcap > 0 { // x = softcap·tanh(x/softcap)
					x = par.Softcap * math.Tanh(x/par.Softcap)
				}
				if par.ALiBi != nil { // x −= slope·|i + sk − sq − j| (|i − j| with TopLeft)
					diag := sk - sq
					if par.TopLeft {
						diag = 0
					}
					x -= par.ALiBi[hh] * math.Abs(float64(i+diag-j))
				}
				if par.ScoreMod != nil {
					x, _ = par.ScoreMod(par.DropoutBatch, hh, i, j, x)
				}
				p[hh][i*sk+j] = math.Exp(x - lse[hh*sq+i])
			}
		}
	}
	return p
}

// TestHalfLargeLogits sweeps Q and K scaled ×1…×100, causal or not, one
// key tile and many, on every 16-bit path (under -race, each case and
// factor on one path: see gridRotation): O, LSE and dV meet the same-type
// rule; dQ and dK meet it plus halfDBound.
func TestHalfLargeLogits(t *testing.T) {
	if testing.Short() {
		t.Skip("large-logit sweep: not in -short")
	}
	for _, dt := range []DType{BFloat16, Float16} {
		prec := precisionOf(dt)
		t.Run(dt.String(), func(t *testing.T) {
			type run struct {
				c   tcase
				mul float32
			}
			var runs []run
			for _, c := range []tcase{
				{b: 1, sq: 40, sk: 64, h: 2, hk: 2, d: 64, causal: true},
				{b: 1, sq: 40, sk: 64, h: 2, hk: 2, d: 64},
				{b: 1, sq: 70, sk: 300, h: 2, hk: 2, d: 32, causal: true},
			} {
				for _, mul := range []float32{1, 3, 10, 30, 100} {
					runs = append(runs, run{c, mul})
				}
			}
			rot := newGridRotation(halfPaths(dt)) // under -race each run on one path
			forEachHalf(t, dt, func(t *testing.T) {
				for _, r := range gridShare(rot, runs) {
					checkHalfLargeLogits(t, r.c, dt, prec, r.mul)
				}
			})
		})
	}
}

func checkHalfLargeLogits(t *testing.T, c tcase, dt DType, prec reference.Precision, mul float32) {
	t.Helper()
	cd := makeCase(c, uint64(mul*10)+uint64(c.sk))
	for i := range cd.q {
		cd.q[i] *= mul
	}
	for i := range cd.k {
		cd.k[i] *= mul
	}
	qr, kr, vr, dor := prec.RoundSlice(cd.q), prec.RoundSlice(cd.k), prec.RoundSlice(cd.v), prec.RoundSlice(cd.do)
	q, k, v := toType(qr, dt, c.b, c.sq, c.h, c.d), toType(kr, dt, c.b, c.sk, c.hk, c.d), toType(vr, dt, c.b, c.sk, c.hk, c.d)
	out, lse, err := Forward(q, k, v, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	o64, l64 := reference.Forward64(cd.par, to64(qr), to64(kr), to64(vr))
	oh, lh := reference.ForwardHalf(cd.par, prec, qr, kr, vr)
	og := gather(out)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
	}{{"O", og, oh, o64}, {"LSE", lse, lh, l64}} {
		if err := reference.CheckHalf(g.name, prec, g.got, g.pl, g.ref); err != nil {
			t.Errorf("%v ×%v: %v", c, mul, err)
		}
	}
	dq, dk, dv, err := Backward(q, k, v, out, toType(dor, dt, c.b, c.sq, c.h, c.d), lse, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	dq64, dk64, dv64 := reference.Backward64(cd.par, to64(qr), to64(kr), to64(vr), to64(dor))
	dqh, dkh, dvh := reference.BackwardHalf(cd.par, prec, qr, kr, vr, dor)
	if err := reference.CheckHalf("dV", prec, gather(dv), dvh, dv64); err != nil {
		t.Errorf("%v ×%v: %v", c, mul, err)
	}
	bq, bk := halfDBound(dt, 1/math.Sqrt(float64(c.d)), c.d, c.h/c.hk, dor, og, qr, kr, probs64(cd.par, to64(qr), to64(kr), l64), c.sk)
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
		bound   float64
	}{{"dQ", gather(dq), dqh, dq64, bq}, {"dK", gather(dk), dkh, dk64, bk}} {
		e, p := reference.MaxAbsDiff32vs64(g.got, g.ref), reference.MaxAbsDiff32vs64(g.pl, g.ref)
		if lim := 2*p + reference.Slack(prec) + g.bound; e > lim {
			t.Errorf("%v ×%v: %s error %.3g exceeds 2×%.3g + %g + bound %.3g", c, mul, g.name, e, p, reference.Slack(prec), g.bound)
		}
	}
}
