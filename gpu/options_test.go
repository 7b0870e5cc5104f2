package gpu_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu"
)

// gpuSupports lists the flashattn.Options fields package gpu documents as
// supported (gpu.Options); every other field must be refused by name.
var gpuSupports = map[string]bool{
	"Scale": true, "Causal": true, "Window": true, "Softcap": true, "VarLen": true,
	"Seed": true, "Workers": true, "BlockQ": true, "BlockK": true, "CacheBytes": true,
}

// nonZero returns a non-zero value of type t that flashattn.ValidateShape
// accepts for the field where it can, for a call of shape s (dense, or
// Batch 1 for VarLen).
func nonZero(tb testing.TB, t reflect.Type, s flashattn.Shape) reflect.Value {
	switch t {
	case reflect.TypeOf((*flashattn.VarLen)(nil)):
		return reflect.ValueOf(&flashattn.VarLen{CuSeqlensQ: []int32{0, int32(s.SeqQ)}, CuSeqlensK: []int32{0, int32(s.SeqK)}})
	case reflect.TypeOf((*flashattn.KVCache)(nil)):
		return reflect.ValueOf(&flashattn.KVCache{SeqLens: []int32{int32(s.SeqK)}})
	case reflect.TypeOf((*flashattn.BlockMask)(nil)):
		m, err := flashattn.NewBlockMask(flashattn.BlockShape{Batch: 1, Heads: 1, SeqQ: s.SeqQ, SeqK: s.SeqK}, flashattn.PrefixLM(1))
		if err != nil {
			tb.Fatal(err)
		}
		return reflect.ValueOf(m)
	case reflect.TypeOf((*flashattn.Mask)(nil)).Elem():
		return reflect.ValueOf(flashattn.PrefixLM(1))
	case reflect.TypeOf((*flashattn.ScoreMod)(nil)).Elem():
		return reflect.ValueOf(flashattn.ScoreFunc(func(b, h, q, kv int, x float32) (float32, float32) { return x, 1 }))
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.25)
	case reflect.Slice:
		v = reflect.MakeSlice(t, s.Heads, s.Heads)
		for i := range s.Heads {
			v.Index(i).Set(nonZero(tb, t.Elem(), s))
		}
	case reflect.Pointer:
		v = reflect.New(t.Elem())
	default:
		tb.Fatalf("nonZero: no value for %v", t)
	}
	return v
}

// TestOptionsAllowList sets each flashattn.Options field in turn and checks
// that package gpu either supports it (ValidateShape accepts the call) or
// refuses it with an *ArgError naming the field: no option is accepted and
// ignored, including fields added to flashattn.Options later.
func TestOptionsAllowList(t *testing.T) {
	s := flashattn.Shape{Batch: 1, SeqQ: 16, SeqK: 16, Heads: 1, Dim: 64}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(flashattn.Options{})) {
		var opts gpu.Options
		reflect.ValueOf(&opts.Options).Elem().FieldByIndex(f.Index).Set(nonZero(t, f.Type, s))
		if reflect.ValueOf(opts.Options).FieldByIndex(f.Index).IsZero() {
			t.Fatalf("%s: test value is zero", f.Name)
		}
		if err := flashattn.ValidateShape(s, &opts.Options); err != nil {
			t.Fatalf("%s: the test's value is invalid on the CPU too: %v", f.Name, err)
		}
		err := gpu.ValidateShape(s, &opts)
		if gpuSupports[f.Name] {
			if err != nil {
				t.Errorf("Options.%s (supported): %v", f.Name, err)
			}
			continue
		}
		var ae *flashattn.ArgError
		want := "Options." + f.Name
		if !errors.As(err, &ae) || ae.Arg != want || !strings.Contains(ae.Msg, want) {
			t.Errorf("Options.%s (not supported by the GPU kernels) gave %v, want an *ArgError naming %s", f.Name, err, want)
		}
	}
}

// TestOptionsAllowListNested checks that a supported struct option accepts
// only the sub-fields package gpu implements: VarLen.SeqUsedQ is refused by
// name, VarLen.SeqUsedK and the Window sides are accepted.
func TestOptionsAllowListNested(t *testing.T) {
	s := flashattn.Shape{Batch: 1, SeqQ: 16, SeqK: 16, Heads: 1, Dim: 64}
	cu := []int32{0, 16}
	for _, c := range []struct {
		name string
		o    flashattn.Options
		want string // "" accepted
	}{
		{"SeqUsedK", flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: cu, CuSeqlensK: cu, SeqUsedK: []int32{3}}}, ""},
		{"SeqUsedQ", flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: cu, CuSeqlensK: cu, SeqUsedQ: []int32{3}}}, "Options.VarLen.SeqUsedQ"},
		{"Window", flashattn.Options{Window: &flashattn.Window{Left: 3, Right: -1}}, ""},
	} {
		err := gpu.ValidateShape(s, &gpu.Options{Options: c.o})
		var ae *flashattn.ArgError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.want != "" && (!errors.As(err, &ae) || ae.Arg != c.want):
			t.Errorf("%s: %v, want an *ArgError naming %s", c.name, err, c.want)
		}
	}
}
