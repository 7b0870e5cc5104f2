package flashattn

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// TestOverlapEveryOperand: an output inside any slice a call reads (the
// sinks, ALiBi's slopes, dLSE, a bias) or a slice output (DSinks) inside
// another operand is refused, as tensors always were; inputs may share
// memory with each other.
func TestOverlapEveryOperand(t *testing.T) {
	const b, s, h, d = 1, 20, 2, 8
	r := rand.New(rand.NewPCG(4, 2))
	q, k, v := Dense(randSlice(r, b*s*h*d), b, s, h, d), Dense(randSlice(r, b*s*h*d), b, s, h, d), Dense(randSlice(r, b*s*h*d), b, s, h, d)
	sinks := []float32{0.5, -0.25}
	out, lse, err := Forward(q, k, v, &Options{Sinks: sinks})
	if err != nil {
		t.Fatal(err)
	}
	wantO, wantLSE := append([]float32(nil), out.Data...), append([]float32(nil), lse...)
	do := Dense(randSlice(r, b*s*h*d), b, s, h, d)
	grad := func() Tensor { return NewTensor(b, s, h, d) }
	bwd := func(g Grads, dlse []float32, o *Options) error {
		return BackwardGrads(t.Context(), g, q, k, v, out, do, lse, dlse, o)
	}
	bias := func(data []float32) *Options {
		bs, err := NewBias(data, 1, 1, s, s)
		if err != nil {
			t.Fatal(err)
		}
		return &Options{ScoreMod: bs}
	}
	bad := []struct {
		name string
		err  func() error
	}{
		{"DSinks in DQ", func() error {
			dq := grad()
			return bwd(Grads{DQ: dq, DK: grad(), DV: grad(), DSinks: dq.Data[3 : 3+h]}, nil, &Options{Sinks: sinks})
		}},
		{"dlse in DK", func() error {
			dk := grad()
			dlse := dk.Data[len(dk.Data)-len(lse):]
			copy(dlse, randSlice(r, len(lse)))
			return bwd(Grads{DQ: grad(), DK: dk, DV: grad()}, dlse, &Options{Sinks: sinks})
		}},
		{"ALiBi in DK", func() error {
			dk := grad()
			copy(dk.Data, []float32{0.5, 0.25})
			return bwd(Grads{DQ: grad(), DK: dk, DV: grad()}, nil, &Options{ALiBi: dk.Data[:h]})
		}},
		{"Sinks in out", func() error {
			o := grad()
			copy(o.Data[7:], sinks)
			return ForwardInto(o, nil, q, k, v, &Options{Sinks: o.Data[7 : 7+h]})
		}},
		{"Sinks in lse", func() error {
			l := make([]float32, len(lse))
			return ForwardInto(grad(), l, q, k, v, &Options{Sinks: l[:h]})
		}},
		{"bias in out", func() error {
			o := NewTensor(b, s, h, d*s) // room for the bias
			o.Dim = d
			return ForwardInto(o, nil, q, k, v, bias(o.Data[:s*s]))
		}},
		{"Sinks in a cache being appended to", func() error {
			kc, vc := NewTensor(1, 32, 1, d), NewTensor(1, 32, 1, d)
			copy(kc.Data[len(kc.Data)-1:], sinks)
			cache := &KVCache{SeqLens: []int32{4}, KNew: NewTensor(1, 1, 1, d), VNew: NewTensor(1, 1, 1, d)}
			_, _, err := Forward(NewTensor(1, 1, 1, d), kc, vc, &Options{KVCache: cache, Sinks: kc.Data[len(kc.Data)-1:]})
			return err
		}},
		{"DSinks in out", func() error {
			return bwd(Grads{DQ: grad(), DK: grad(), DV: grad(), DSinks: out.Data[:h]}, nil, &Options{Sinks: sinks})
		}},
	}
	for _, tc := range bad {
		err := tc.err()
		var ae *ArgError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "memory") {
			t.Errorf("%s: error %v, want a shared-memory *ArgError", tc.name, err)
		}
	}
	// Inputs sharing memory are read twice, which is safe: sinks inside q.
	qs := Dense(append(append([]float32(nil), q.Data...), sinks...), b, s, h, d)
	got, gotLSE, err := Forward(qs, k, v, &Options{Sinks: qs.Data[len(q.Data):]})
	if err != nil {
		t.Fatalf("sinks inside q: %v", err)
	}
	if !equalBits(got.Data, wantO) || !equalBits(gotLSE, wantLSE) {
		t.Error("sinks inside q: results differ")
	}
}

// TestOperandsListEveryField walks Options and Grads by reflection, sets
// every field of slice or Tensor type (in nested option structs too) to a
// buffer of its own, and checks that callOperands lists each of them, once:
// a new option cannot escape the overlap rule.
func TestOperandsListEveryField(t *testing.T) {
	want := map[string]uintptr{} // field path -> its buffer
	tensor := func() Tensor { return NewTensor(1, 1, 1, 4) }
	var fill func(v reflect.Value, path string)
	fill = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			f, sf := v.Field(i), v.Type().Field(i)
			p := path + "." + sf.Name
			switch {
			case !sf.IsExported():
			case f.Type() == reflect.TypeOf(Tensor{}):
				x := tensor()
				f.Set(reflect.ValueOf(x))
				want[p] = uintptr(unsafe.Pointer(&x.Data[0]))
			case f.Kind() == reflect.Slice:
				f.Set(reflect.MakeSlice(f.Type(), 3, 3))
				want[p] = f.Pointer()
			case f.Kind() == reflect.Struct:
				fill(f, p)
			case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct:
				f.Set(reflect.New(f.Type().Elem()))
				fill(f.Elem(), p)
			}
		}
	}
	var o Options
	var g Grads
	fill(reflect.ValueOf(&o).Elem(), "Options")
	fill(reflect.ValueOf(&g).Elem(), "Grads")
	if _, ok := want["Options.KVCache.KNew"]; !ok || len(want) < 10 {
		t.Fatalf("the walk found only %v", want)
	}
	// The score modifier's data: a Bias.
	bias, err := NewBias(make([]float32, 4), 1, 1, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	o.ScoreMod = bias
	want["Options.ScoreMod"] = uintptr(unsafe.Pointer(&bias.values[0]))

	view := func(x Tensor) view {
		v, err := x.check("x", false, -1, -1, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ops := operands{q: view(tensor()), k: view(tensor()), v: view(tensor()),
		knew: view(o.KVCache.KNew), vnew: view(o.KVCache.VNew)}
	gv := gradViews{o: view(tensor()), do: view(tensor()), dq: view(g.DQ), dk: view(g.DK), dv: view(g.DV),
		lse: make([]float32, 2), dlse: make([]float32, 2)}
	list := callOperands(nil, &ops, &o, false, nil, &gv, &g)
	names := map[string]bool{}
	bases := map[uintptr]bool{}
	for _, n := range list {
		if names[n.name] {
			t.Errorf("operand %s is listed twice", n.name)
		}
		names[n.name] = true
		bases[n.r.base] = n.r.rowLen > 0
	}
	for p, base := range want {
		if !bases[base] {
			t.Errorf("%s is not in callOperands' list: the overlap rule does not see it", p)
		}
	}
}
