package flashattn

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestOffsetsBelowSentinel: offsets whose positions reach the window
// sentinel (unbounded, MaxInt>>2) are refused with an *ArgError, also by
// ValidateShape; below that, plain attention with offsets is exactly plain
// attention (no key hidden), up to the largest offset accepted.
func TestOffsetsBelowSentinel(t *testing.T) {
	const b, s, h, d = 1, 16, 2, 8
	r := rand.New(rand.NewPCG(7, 3))
	q, k, v := Dense(randSlice(r, b*s*h*d), b, s, h, d), Dense(randSlice(r, b*s*h*d), b, s, h, d), Dense(randSlice(r, b*s*h*d), b, s, h, d)
	want, wantLSE, err := Forward(q, k, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	shape := Shape{Batch: b, SeqQ: s, SeqK: s, Heads: h, Dim: d}
	for _, f := range []Offsets{
		{Query: math.MaxInt >> 2, Key: 0},
		{Query: math.MaxInt>>2 - 3, Key: 0},
		{Query: 0, Key: math.MaxInt>>2 - 5},
		{Query: MaxPosition - s + 1, Key: 0},
		{Query: 0, Key: MaxPosition - s + 1},
	} {
		o := &Options{Offsets: &f}
		_, lse, err := Forward(q, k, v, o)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != "Options.Offsets" {
			t.Errorf("Offsets %+v: error %v (LSE[0] %v, plain %v), want an *ArgError for Options.Offsets", f, err, lse[0], wantLSE[0])
		}
		if err := ValidateShape(shape, o); !errors.As(err, &ae) || !strings.Contains(err.Error(), "Offsets") {
			t.Errorf("ValidateShape, Offsets %+v: error %v, want an *ArgError for Options.Offsets", f, err)
		}
	}
	for _, f := range []Offsets{{MaxPosition - s, MaxPosition - s}, {MaxPosition - s, 0}, {0, MaxPosition - s}} {
		got, lse, err := Forward(q, k, v, &Options{Offsets: &f})
		if err != nil {
			t.Fatalf("Offsets %+v: %v", f, err)
		}
		if !equalBits(got.Data, want.Data) || !equalBits(lse, wantLSE) {
			t.Errorf("Offsets %+v: LSE[0] %v, want %v (plain attention: offsets hide nothing)", f, lse[0], wantLSE[0])
		}
	}
}

// TestEmptySinksAndNilBias: Sinks of length 0 (not nil) and a nil *Bias as
// the score modifier are *ArgErrors from Forward, Backward and
// ValidateShape (they were an index out of range, an internal error, or
// accepted).
func TestEmptySinksAndNilBias(t *testing.T) {
	const b, s, h, d = 1, 8, 2, 8
	q, k, v := NewTensor(b, s, h, d), NewTensor(b, s, h, d), NewTensor(b, s, h, d)
	for _, tc := range []struct {
		name, arg string
		opts      Options
	}{
		{"empty sinks", "Options.Sinks", Options{Sinks: []float32{}}},
		{"nil bias", "Options.ScoreMod", Options{ScoreMod: (*Bias)(nil)}},
	} {
		check := func(what string, err error) {
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Arg != tc.arg || errors.Is(err, ErrInternal) {
				t.Errorf("%s, %s: error %v, want an *ArgError for %s", tc.name, what, err, tc.arg)
			}
		}
		_, _, err := Forward(q, k, v, &tc.opts)
		check("Forward", err)
		_, _, _, err = Backward(q, k, v, NewTensor(b, s, h, d), NewTensor(b, s, h, d), make([]float32, b*h*s), &tc.opts)
		check("Backward", err)
		check("ValidateShape", ValidateShape(Shape{Batch: b, SeqQ: s, SeqK: s, Heads: h, Dim: d}, &tc.opts))
	}
}
