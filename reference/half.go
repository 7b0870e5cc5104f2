package reference

import (
	"fmt"

	"github.com/flashattn/flashattn/half"
)

// Precision is a 16-bit floating-point type for the same-type plain
// algorithm: the error baseline of attention computed in that type. It is
// half.Format (Round and RoundSlice round to it).
type Precision = half.Format

const (
	// BF16 is bfloat16 (8 significant bits, float32's range).
	BF16 = half.BFloat16
	// F16 is IEEE binary16 (11 significant bits, largest finite 65504).
	F16 = half.Float16
)

func validate(t Precision) {
	if !t.Valid() {
		panic(fmt.Sprintf("reference: unknown precision %d", uint8(t)))
	}
}

// Slack is the additive term of the error rule for t: 1e-3 for BF16,
// 1e-4 for F16.
func Slack(t Precision) float64 {
	validate(t)
	if t == F16 {
		return 1e-4
	}
	return 1e-3
}

// ForwardHalf is the same-type plain algorithm of t, the baseline of the
// half-precision error rule (CheckHalf), as flash-attn's tests define it:
// Q, K and V are rounded to t; scores, softmax and sums are float32 (as in
// Forward32); each probability is rounded to t before it multiplies V; O is
// rounded to t at the end; LSE is float32, not rounded. Every option of
// Params works as in Forward32 (dropout scales the rounded probability).
// The results are float32 slices holding values of type t.
func ForwardHalf(p Params, t Precision, q, k, v []float32) (o, lse []float32) {
	validate(t)
	return forward(p, t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.Round)
}

// BackwardHalf is the same-type plain backward pass of t: Q, K, V and dO
// are rounded to t; everything is computed in float32 as in Backward32,
// except that each probability is rounded to t before dV = Pᵀ·dO, each
// score gradient dS before dQ = dS·K and dK = dSᵀ·Q, and dQ, dK, dV are
// rounded to t at the end.
func BackwardHalf(p Params, t Precision, q, k, v, dout []float32) (dq, dk, dv []float32) {
	validate(t)
	return backward(p, t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.RoundSlice(dout), t.Round)
}

// CheckHalf applies the half-precision error rule: with err(x) the maximum
// absolute difference between x and the float64 reference ref (computed by
// Forward64 or Backward64 from the inputs and dO rounded to t, see
// RoundSlice), it requires err(got) <= 2*err(plain) + Slack(t), where plain
// is the same-type plain algorithm (ForwardHalf or BackwardHalf). It
// returns nil if the rule holds and otherwise an error naming the quantity
// and both errors. It applies to O, LSE and every gradient.
func CheckHalf(name string, t Precision, got, plain []float32, ref []float64) error {
	validate(t)
	return checkRule(name, got, plain, ref, rule{Slack(t), fmt.Sprint(Slack(t)), "plain " + t.String(), "plain " + t.String()})
}

// BackwardHalfGrads is BackwardGrads64's same-type algorithm of t (see
// BackwardHalf): dlse and the sink gradient as in BackwardGrads64.
func BackwardHalfGrads(p Params, t Precision, q, k, v, dout, dlse []float32) (dq, dk, dv, dsinks []float32) {
	validate(t)
	return backwardGrads(p, t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.RoundSlice(dout), dlse, t.Round)
}

// ScoreGradsHalf is ScoreGrads64's same-type algorithm of t (see
// BackwardHalf): the score gradients from the rounded inputs and dO,
// computed in float32, before they are rounded for the gradient products.
func ScoreGradsHalf(p Params, t Precision, q, k, v, dout, dlse []float32) []float32 {
	validate(t)
	return runBackward(p, t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.RoundSlice(dout), dlse, t.Round, true).dy
}
