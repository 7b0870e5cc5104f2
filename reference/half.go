package reference

import (
	"fmt"

	"github.com/flashattn/flashattn/half"
)

// Precision is a 16-bit floating-point type for the same-type plain
// algorithm: the error baseline of attention computed in that type.
type Precision int

const (
	// BF16 is bfloat16 (8 significant bits, float32's range).
	BF16 Precision = 1 + iota
	// F16 is IEEE binary16 (11 significant bits, largest finite 65504).
	F16
)

// String returns "bf16" or "f16".
func (t Precision) String() string {
	switch t {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("Precision(%d)", int(t))
}

func (t Precision) validate() {
	if t != BF16 && t != F16 {
		panic(fmt.Sprintf("reference: unknown precision %d", int(t)))
	}
}

// Round returns x rounded to t (to nearest, ties to even), as a float32.
func (t Precision) Round(x float32) float32 {
	t.validate()
	if t == F16 {
		return half.NewF16(x).Float32()
	}
	return half.NewBF16(x).Float32()
}

// RoundSlice returns a new slice holding the elements of x rounded to t.
// Rounding inputs first is how the float64 reference is made comparable:
// the rule compares against Forward64/Backward64 of the rounded inputs.
func (t Precision) RoundSlice(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = t.Round(v)
	}
	return out
}

// Slack is the additive term of the error rule for t: 1e-3 for BF16,
// 1e-4 for F16.
func (t Precision) Slack() float64 {
	t.validate()
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
	t.validate()
	return forward(p, t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.Round)
}

// BackwardHalf is the same-type plain backward pass of t: Q, K, V and dO
// are rounded to t; everything is computed in float32 as in Backward32,
// except that each probability is rounded to t before dV = Pᵀ·dO, each
// score gradient dS before dQ = dS·K and dK = dSᵀ·Q, and dQ, dK, dV are
// rounded to t at the end.
func BackwardHalf(p Params, t Precision, q, k, v, dout []float32) (dq, dk, dv []float32) {
	t.validate()
	return backward(p, t.RoundSlice(q), t.RoundSlice(k), t.RoundSlice(v), t.RoundSlice(dout), t.Round)
}

// CheckHalf applies the half-precision error rule: with err(x) the maximum
// absolute difference between x and the float64 reference ref (computed by
// Forward64 or Backward64 from the inputs and dO rounded to t, see
// RoundSlice), it requires err(got) <= 2*err(plain) + t.Slack(), where plain
// is the same-type plain algorithm (ForwardHalf or BackwardHalf). It
// returns nil if the rule holds and otherwise an error naming the quantity
// and both errors. It applies to O, LSE and every gradient.
func CheckHalf(name string, t Precision, got, plain []float32, ref []float64) error {
	t.validate()
	return checkRule(name, got, plain, ref, rule{t.Slack(), fmt.Sprint(t.Slack()), "plain " + t.String(), "plain " + t.String()})
}
