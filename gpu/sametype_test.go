package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// plainSameType is the baseline of the same-type rule: the plain algorithm
// on inputs already rounded to dt, with float32 accumulation, P rounded to
// dt before P·V, dS (scaled) rounded to dt before the gradient products,
// outputs rounded to dt and LSE in float32. dout may be nil (forward only).
// Dense layout, no dropout or ALiBi.
func plainSameType(dt DType, p reference.Params, q, k, v, dout []float32) (o, lse, dq, dk, dv []float32) {
	D, Sq, Sk, H := p.HeadDim, p.SeqQ, p.SeqK, p.Heads
	group := p.Heads / p.KVHeads
	scale := float32(p.Scale)
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(D)))
	}
	cap := float32(p.Softcap)
	qi := func(b, i, h int) int { return ((b*Sq+i)*H + h) * D }
	ki := func(b, j, kh int) int { return ((b*Sk+j)*p.KVHeads + kh) * D }
	o = make([]float32, len(q))
	lse = make([]float32, p.Batch*H*Sq)
	if dout != nil {
		dq, dk, dv = make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
	}
	dk32, dv32 := make([]float32, len(k)), make([]float32, len(v))
	x := make([]float32, Sk)
	th := make([]float32, Sk)
	P := make([]float32, Sk)
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < H; h++ {
			kh := h / group
			for i := 0; i < Sq; i++ {
				m := float32(math.Inf(-1))
				for j := 0; j < Sk; j++ {
					if !reference.Visible(p, i, j) {
						x[j] = float32(math.Inf(-1))
						continue
					}
					var s float32
					for d := 0; d < D; d++ {
						s += q[qi(b, i, h)+d] * k[ki(b, j, kh)+d]
					}
					s *= scale
					if cap > 0 {
						th[j] = float32(math.Tanh(float64(s / cap)))
						s = cap * th[j]
					}
					x[j] = s
					m = max(m, s)
				}
				li := (b*H+h)*Sq + i
				if math.IsInf(float64(m), -1) {
					lse[li] = m
					continue // O row 0, no gradient
				}
				var l float32
				for j := 0; j < Sk; j++ {
					P[j] = float32(math.Exp(float64(x[j] - m)))
					l += P[j]
				}
				lse[li] = m + float32(math.Log(float64(l)))
				orow := o[qi(b, i, h):][:D]
				for j := 0; j < Sk; j++ {
					P[j] /= l
					pr := dt.Round(P[j])
					for d := 0; d < D; d++ {
						orow[d] += pr * v[ki(b, j, kh)+d]
					}
				}
				for d := range orow {
					orow[d] = dt.Round(orow[d])
				}
				if dout == nil {
					continue
				}
				dorow := dout[qi(b, i, h):][:D]
				var dsum float32
				for d := 0; d < D; d++ {
					dsum += dorow[d] * orow[d]
				}
				dqrow := dq[qi(b, i, h):][:D]
				for j := 0; j < Sk; j++ {
					if P[j] == 0 {
						continue
					}
					var dp float32
					for d := 0; d < D; d++ {
						dp += dorow[d] * v[ki(b, j, kh)+d]
					}
					ds := P[j] * (dp - dsum)
					if cap > 0 {
						ds *= 1 - th[j]*th[j]
					}
					dsr := dt.Round(scale * ds)
					pr := dt.Round(P[j])
					for d := 0; d < D; d++ {
						dqrow[d] += dsr * k[ki(b, j, kh)+d]
						dk32[ki(b, j, kh)+d] += dsr * q[qi(b, i, h)+d]
						dv32[ki(b, j, kh)+d] += pr * dorow[d]
					}
				}
				for d := range dqrow {
					dqrow[d] = dt.Round(dqrow[d])
				}
			}
		}
	}
	if dout != nil {
		for i := range dk {
			dk[i], dv[i] = dt.Round(dk32[i]), dt.Round(dv32[i])
		}
	}
	return o, lse, dq, dk, dv
}

// The same-type baseline is close to the float64 reference (so the rule's
// bound, twice its error, is not loose), and its error shrinks from bf16 to
// fp16 as the types' precision grows.
func TestPlainSameTypeBaseline(t *testing.T) {
	c := gpuCase{batch: 1, sq: 37, sk: 45, h: 2, hk: 1, dim: 64, causal: true, softcap: 4}
	errs := map[DType][5]float64{}
	for _, dt := range []DType{BF16, F16} {
		rng := rand.New(rand.NewPCG(9, 9))
		q := randRounded(rng, dt, c.sq*c.h*c.dim, 1)
		k := randRounded(rng, dt, c.sk*c.hk*c.dim, 1)
		v := randRounded(rng, dt, c.sk*c.hk*c.dim, 1)
		do := randRounded(rng, dt, c.sq*c.h*c.dim, 1)
		ref, plain := c.references(dt, q, k, v, do, c.sq, c.sk)
		var e [5]float64
		for i, x := range [][]float32{plain.o, plain.lse, plain.dq, plain.dk, plain.dv} {
			e[i] = reference.MaxAbsDiff32vs64(x, ref[i])
			if e[i] > 0.05 || e[i] == 0 {
				t.Errorf("%v quantity %d: same-type error %g, want small and nonzero", dt, i, e[i])
			}
		}
		errs[dt] = e
	}
	for i := range 5 {
		if i != 1 && errs[F16][i] >= errs[BF16][i] { // LSE is float32 in both
			t.Errorf("quantity %d: fp16 error %g not below bf16's %g", i, errs[F16][i], errs[BF16][i])
		}
	}
}
