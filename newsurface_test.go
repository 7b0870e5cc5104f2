package flashattn_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	fa "github.com/flashattn/flashattn"
)

// newsurface_test.go checks, through the public API only (as a user would
// call it), the promises about masks, caches and merging: errors, not
// panics; a refused call changes nothing.

func randTensor(r *rand.Rand, b, s, h, d int) fa.Tensor {
	t := fa.NewTensor(b, s, h, d)
	for i := range t.Data {
		t.Data[i] = float32(r.NormFloat64())
	}
	return t
}

// wantArgErr fails unless err is an *ArgError naming arg.
func wantArgErr(t *testing.T, what string, err error, arg string) {
	t.Helper()
	var ae *fa.ArgError
	switch {
	case err == nil:
		t.Errorf("%s: no error, want an *ArgError for %s", what, arg)
	case !errors.As(err, &ae):
		t.Errorf("%s: %v (%T), want an *ArgError for %s", what, err, err, arg)
	case ae.Arg != arg:
		t.Errorf("%s: *ArgError for %q (%v), want %q", what, ae.Arg, err, arg)
	}
}

// noPanic runs f and turns a panic into a test failure.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if v := recover(); v != nil {
			t.Errorf("%s panicked: %v", what, v)
		}
	}()
	f()
}

// A coverage error names a broadcast dimension (a bias's dimension of 1, a
// KeyPadding's queries and keys) as broadcast, not as math.MaxInt.
func TestCoverageMessageBroadcast(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	bias, err := fa.NewBias(make([]float32, 4*5), 1, 1, 4, 5) // 5 keys, broadcast over batch and heads
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		b, sk    int
		opts     fa.Options
		arg, msg string
	}{
		{"bias, more keys", 2, 6, fa.Options{ScoreMod: bias}, "Options.ScoreMod",
			"Options.ScoreMod covers any number of batch elements (broadcast) × 4 queries × 5 keys, but the call has 2 × 4 × 6"},
		{"key padding, more batch rows", 3, 5, fa.Options{Mask: fa.KeyPadding(2, 3)}, "Options.Mask",
			"Options.Mask covers 2 batch elements × any number of queries (broadcast) × any number of keys (broadcast), but the call has 3 × 4 × 5"},
	} {
		q, k := randTensor(r, c.b, 4, 1, 8), randTensor(r, c.b, c.sk, 1, 8)
		_, _, err := fa.Forward(q, k, k, &c.opts)
		wantArgErr(t, c.name, err, c.arg)
		var ae *fa.ArgError
		if errors.As(err, &ae) && ae.Msg != c.msg {
			t.Errorf("%s: message %q, want %q", c.name, ae.Msg, c.msg)
		}
	}
}

// A Documents mask says what it covers; a call beyond it is refused.
func TestMaskCoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ids := []int32{0, 0, 1, 1} // one batch row of 4 positions
	docs, err := fa.Documents(ids, ids, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		b, sq, sk  int
		opts       fa.Options
		wantRefuse bool
	}{
		{"covered", 1, 4, 4, fa.Options{Mask: docs}, false},
		{"more batch rows", 2, 4, 4, fa.Options{Mask: docs}, true},
		{"longer queries", 1, 6, 4, fa.Options{Mask: docs}, true},
		{"longer keys", 1, 4, 9, fa.Options{Mask: docs}, true},
		{"inside And", 2, 4, 4, fa.Options{Mask: fa.And(fa.PrefixLM(1), docs)}, true},
	} {
		q, k := randTensor(r, c.b, c.sq, 1, 8), randTensor(r, c.b, c.sk, 1, 8)
		var ferr error
		noPanic(t, c.name, func() { _, _, ferr = fa.Forward(q, k, k, &c.opts) })
		if c.wantRefuse {
			wantArgErr(t, c.name, ferr, "Options.Mask")
		} else if ferr != nil {
			t.Errorf("%s: %v", c.name, ferr)
		}
	}
	_, err = fa.NewBlockMask(fa.BlockShape{Batch: 1, Heads: 1, SeqQ: 8, SeqK: 4, BlockQ: 4, BlockK: 4}, docs)
	wantArgErr(t, "NewBlockMask beyond the ids", err, "mask")
}

// A panicking user mask, classifier or block function is an error
// wrapping ErrInternal.
func TestUserPanics(t *testing.T) {
	boom := fa.MaskFunc(func(b, h, q, kv int) bool { panic("user mask") })
	noPanic(t, "NewBlockMask", func() {
		_, err := fa.NewBlockMask(fa.BlockShape{Batch: 1, Heads: 1, SeqQ: 256, SeqK: 256, BlockQ: 64, BlockK: 64}, boom)
		if !errors.Is(err, fa.ErrInternal) {
			t.Errorf("NewBlockMask with a panicking mask: %v, want ErrInternal", err)
		}
	})
	noPanic(t, "BlockMaskFromFunc", func() {
		m, err := fa.BlockMaskFromFunc(fa.BlockShape{Batch: 1, Heads: 2, SeqQ: 256, SeqK: 256, BlockQ: 64, BlockK: 64},
			func(b, h, qb, kb int) bool {
				if h == 1 && kb == 2 {
					panic("user block function")
				}
				return true
			})
		if !errors.Is(err, fa.ErrInternal) || m != nil {
			t.Errorf("BlockMaskFromFunc with a panicking function: %v, %v, want ErrInternal and no mask", m, err)
		}
	})
	r := rand.New(rand.NewPCG(3, 4))
	q := randTensor(r, 1, 40, 2, 8)
	noPanic(t, "Forward", func() {
		_, _, err := fa.Forward(q, q, q, &fa.Options{Mask: panickyClassifier{}})
		if !errors.Is(err, fa.ErrInternal) {
			t.Errorf("Forward with a panicking classifier: %v, want ErrInternal", err)
		}
	})
	noPanic(t, "CountTraffic", func() {
		_, err := fa.CountTraffic(fa.TrafficShape{Batch: 1, Heads: 1, SeqQ: 100, SeqK: 100, Dim: 8}, &fa.Options{Mask: panickyClassifier{}}, 1<<20, fa.PassForward)
		if !errors.Is(err, fa.ErrInternal) {
			t.Errorf("CountTraffic with a panicking classifier: %v, want ErrInternal", err)
		}
	})
}

type panickyClassifier struct{}

func (panickyClassifier) Hide(b, h, q, kv0 int, keep []bool)               {}
func (panickyClassifier) Classify(b, h, q0, q1, kv0, kv1 int) fa.BlockKind { panic("classifier") }

// Sizes at the limits of int give errors, and LocalGlobal with an
// unbounded window hides nothing.
func TestMaskSizeOverflow(t *testing.T) {
	huge := fa.BlockShape{Batch: 1, Heads: 1, SeqQ: 128, SeqK: math.MaxInt}
	noPanic(t, "NewBlockMask", func() {
		_, err := fa.NewBlockMask(huge, fa.MaskFunc(func(b, h, q, kv int) bool { return true }))
		wantArgErr(t, "NewBlockMask SeqK MaxInt", err, "shape")
	})
	noPanic(t, "BlockMaskFromTable", func() {
		_, err := fa.BlockMaskFromTable(huge, nil)
		wantArgErr(t, "BlockMaskFromTable SeqK MaxInt", err, "shape")
	})
	noPanic(t, "BigBird", func() {
		_, err := fa.BigBird(huge, 1, 1, 1, 1)
		wantArgErr(t, "BigBird SeqK MaxInt", err, "shape")
	})
	noPanic(t, "one huge block", func() {
		s := fa.BlockShape{Batch: 1, Heads: 1, SeqQ: 2, SeqK: math.MaxInt, BlockQ: 2, BlockK: math.MaxInt}
		_, err := fa.BlockMaskFromTable(s, []uint8{1})
		if err != nil {
			t.Errorf("a one-block table of MaxInt keys: %v", err)
		}
	})
	lg, err := fa.LocalGlobal(math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	q, k, v := randTensor(r, 1, 70, 2, 16), randTensor(r, 1, 90, 2, 16), randTensor(r, 1, 90, 2, 16)
	a, la, err := fa.Forward(q, k, v, &fa.Options{Mask: lg})
	if err != nil {
		t.Fatal(err)
	}
	b, lb, _ := fa.Forward(q, k, v, nil)
	if !slices.Equal(a.Data, b.Data) || !slices.Equal(la, lb) {
		t.Error("LocalGlobal(MaxInt) hides keys")
	}
}

// Appends that would overwrite what the call reads are refused before
// anything is written.
func TestCacheAppendAliasing(t *testing.T) {
	const B, H, D, capacity = 2, 2, 16, 64
	r := rand.New(rand.NewPCG(7, 8))
	newCache := func() (k, v fa.Tensor) { return randTensor(r, B, capacity, H, D), randTensor(r, B, capacity, H, D) }
	q := randTensor(r, B, 1, H, D)
	k, v := newCache()
	kc, vc := slices.Clone(k.Data), slices.Clone(v.Data)
	unchanged := func(what string) {
		t.Helper()
		if !slices.Equal(k.Data, kc) || !slices.Equal(v.Data, vc) {
			t.Errorf("%s: the refused call changed the cache", what)
		}
	}
	newKV := func() (fa.Tensor, fa.Tensor) { return randTensor(r, B, 1, H, D), randTensor(r, B, 1, H, D) }
	kn, vn := newKV()
	// KNew is a view of the cache's own memory.
	inside := fa.Dense(k.Data[5*H*D:], B, 1, H, D)
	inside.BatchStride = capacity * H * D
	_, _, err := fa.Forward(q, k, v, &fa.Options{KVCache: &fa.KVCache{SeqLens: []int32{3, 4}, KNew: inside, VNew: vn}})
	wantArgErr(t, "KNew inside the cache", err, "Options.KVCache.KNew")
	unchanged("KNew inside the cache")
	// k and v are the same tensor.
	_, _, err = fa.Forward(q, k, k, &fa.Options{KVCache: &fa.KVCache{SeqLens: []int32{3, 4}, KNew: kn, VNew: vn}})
	wantArgErr(t, "k == v", err, "v")
	unchanged("k == v")
	// Two sequences append to one cache row.
	_, _, err = fa.Forward(q, k, v, &fa.Options{KVCache: &fa.KVCache{SeqLens: []int32{3, 4}, BatchIdx: []int32{1, 1}, KNew: kn, VNew: vn}})
	wantArgErr(t, "repeated BatchIdx", err, "Options.KVCache.BatchIdx")
	unchanged("repeated BatchIdx")
	// Paged: sequence 1 reads the block sequence 0 appends to.
	pk, pv := randTensor(r, 4, 16, H, D), randTensor(r, 4, 16, H, D)
	pkc := slices.Clone(pk.Data)
	_, _, err = fa.Forward(q, pk, pv, &fa.Options{KVCache: &fa.KVCache{
		SeqLens: []int32{3, 10}, BlockTable: []int32{0, 1, 0, 2}, BlocksPerSeq: 2, KNew: kn, VNew: vn}})
	wantArgErr(t, "shared page", err, "Options.KVCache.BlockTable")
	if !slices.Equal(pk.Data, pkc) {
		t.Error("shared page: the refused call changed the cache")
	}
	// Without appends, shared pages and k == v are fine (read only).
	_, _, err = fa.Forward(q, pk, pk, &fa.Options{KVCache: &fa.KVCache{SeqLens: []int32{3, 10}, BlockTable: []int32{0, 1, 0, 2}, BlocksPerSeq: 2}})
	if err != nil {
		t.Errorf("read-only shared pages: %v", err)
	}
	// A q8_0 append whose second new key cannot be quantised writes
	// nothing.
	q8k, q8v := fa.NewTensorOf(fa.Q8_0, B, capacity, H, 32), fa.NewTensorOf(fa.Q8_0, B, capacity, H, 32)
	if err := fa.Convert(q8k, randTensor(r, B, capacity, H, 32)); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(q8k.Q8)
	kn2, vn2 := randTensor(r, B, 2, H, 32), randTensor(r, B, 2, H, 32)
	kn2.Data[(0*2+1)*H*32+5] = float32(math.NaN()) // sequence 0, second new key
	_, _, err = fa.Forward(randTensor(r, B, 2, H, 32), q8k, q8v, &fa.Options{KVCache: &fa.KVCache{SeqLens: []int32{3, 4}, KNew: kn2, VNew: vn2}})
	wantArgErr(t, "q8_0 NaN append", err, "Options.KVCache.KNew")
	if !slices.Equal(before, q8k.Q8) {
		t.Error("q8_0 NaN append: the first new key was written")
	}
}

// MergeStates refuses an lse that shares memory with what it reads.
func TestMergeStatesAliasing(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const B, S, H, D = 1, 5, 2, 8
	n := B * H * S
	parts := []fa.Tensor{randTensor(r, B, S, H, D), randTensor(r, B, S, H, D)}
	buf := make([]float32, 3*n)
	lses := [][]float32{buf[:n], buf[n : 2*n]}
	out := fa.NewTensor(B, S, H, D)
	wantArgErr(t, "lse over lses[1]", fa.MergeStates(out, buf[n+1:2*n+1], parts, lses), "lse")
	wantArgErr(t, "lse inside out", fa.MergeStates(out, out.Data[:n], parts, lses), "lse")
	wantArgErr(t, "lse inside a part", fa.MergeStates(out, parts[1].Data[3:3+n], parts, lses), "lse")
	wantArgErr(t, "out over an lse", fa.MergeStates(fa.Dense(buf, B, S, H, D/2), nil, []fa.Tensor{fa.Dense(make([]float32, n*D/2), B, S, H, D/2)}, [][]float32{buf[:n]}), "out")
	if err := fa.MergeStates(parts[0], lses[0], parts, lses); err != nil {
		t.Errorf("merging in place: %v", err)
	}
}

// Constructor errors are *ArgErrors naming the argument; nil masks and
// score functions are refused as arguments.
func TestConstructorArgErrors(t *testing.T) {
	shape := fa.BlockShape{Batch: 1, Heads: 1, SeqQ: 8, SeqK: 8}
	_, err := fa.Documents(nil, nil, 4, 4)
	wantArgErr(t, "Documents(nil, nil)", err, "idsQ")
	_, err = fa.LocalGlobal(-1)
	wantArgErr(t, "LocalGlobal(-1)", err, "window")
	_, err = fa.LocalGlobal(1, -3)
	wantArgErr(t, "LocalGlobal global -3", err, "global")
	_, err = fa.Fixed(shape, 0, 1)
	wantArgErr(t, "Fixed stride 0", err, "stride")
	_, err = fa.BigBird(shape, -1, 0, 0, 0)
	wantArgErr(t, "BigBird window -1", err, "window")
	_, err = fa.NewBlockMask(shape, nil)
	wantArgErr(t, "NewBlockMask nil", err, "mask")
	_, err = fa.NewBlockMask(fa.BlockShape{}, fa.PrefixLM(1))
	wantArgErr(t, "NewBlockMask zero shape", err, "shape")
	_, err = fa.BlockMaskFromFunc(shape, nil)
	wantArgErr(t, "BlockMaskFromFunc nil", err, "visible")
	_, err = fa.BlockMaskFromTable(shape, []uint8{1, 1})
	wantArgErr(t, "BlockMaskFromTable short", err, "table")
	r := rand.New(rand.NewPCG(11, 12))
	q := randTensor(r, 1, 8, 1, 8)
	var nilMask fa.MaskFunc
	var nilScore fa.ScoreFunc
	for _, c := range []struct {
		name string
		o    fa.Options
		arg  string
	}{
		{"nil MaskFunc", fa.Options{Mask: nilMask}, "Options.Mask"},
		{"And(nil)", fa.Options{Mask: fa.And(nil)}, "Options.Mask"},
		{"And(nil MaskFunc)", fa.Options{Mask: fa.And(fa.PrefixLM(2), nilMask)}, "Options.Mask"},
		{"nil ScoreFunc", fa.Options{ScoreMod: nilScore}, "Options.ScoreMod"},
		{"nil *Bias", fa.Options{ScoreMod: (*fa.Bias)(nil)}, "Options.ScoreMod"},
		{"nil pointer mask", fa.Options{Mask: (*ptrMask)(nil)}, "Options.Mask"},
		{"And(nil pointer mask)", fa.Options{Mask: fa.And(fa.PrefixLM(2), (*ptrMask)(nil))}, "Options.Mask"},
	} {
		_, _, err := fa.Forward(q, q, q, &c.o)
		wantArgErr(t, c.name, err, c.arg)
	}
}

// A ScoreMod that sends some scores to −Inf with a NaN derivative there
// gives the gradients of the same call with those positions masked.
func TestScoreModMaskedDerivative(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const N, H, D = 40, 2, 16
	q, k, v, do := randTensor(r, 1, N, H, D), randTensor(r, 1, N, H, D), randTensor(r, 1, N, H, D), randTensor(r, 1, N, H, D)
	hidden := func(q, kv int) bool { return (q+2*kv)%5 == 0 }
	mod := fa.ScoreFunc(func(b, h, q, kv int, x float32) (float32, float32) {
		if hidden(q, kv) {
			return float32(math.Inf(-1)), float32(math.NaN())
		}
		return x, 1
	})
	mask := fa.MaskFunc(func(b, h, q, kv int) bool { return !hidden(q, kv) })
	grads := func(o *fa.Options) [][]float32 {
		out, lse, err := fa.Forward(q, k, v, o)
		if err != nil {
			t.Fatal(err)
		}
		dq, dk, dv, err := fa.Backward(q, k, v, out, do, lse, o)
		if err != nil {
			t.Fatal(err)
		}
		return [][]float32{out.Data, dq.Data, dk.Data, dv.Data}
	}
	a, b := grads(&fa.Options{ScoreMod: mod}), grads(&fa.Options{Mask: mask})
	for i, name := range []string{"O", "dQ", "dK", "dV"} {
		for j, x := range a[i] {
			if x != x || math.Abs(float64(x-b[i][j])) > 1e-6 {
				t.Errorf("%s[%d] = %v with the ScoreMod, %v with the mask", name, j, x, b[i][j])
				break
			}
		}
	}
}

// ptrMask is a user's mask with a pointer receiver: a nil one is refused.
type ptrMask struct{ n int }

func (m *ptrMask) Hide(b, h, q, kv0 int, keep []bool) {
	for c := range keep {
		keep[c] = kv0+c < m.n
	}
}

// Tensor.At reads an element of every type without allocating, the value
// Convert gives for it.
func TestTensorAtNoAlloc(t *testing.T) {
	src := fa.NewTensor(1, 2, 2, 64)
	for i := range src.Data {
		src.Data[i] = float32(i%13) - 6.3
	}
	for dt := fa.Float32; dt <= fa.FP8E5M2; dt++ {
		x := fa.NewTensorOf(dt, 1, 2, 2, 64)
		if dt == fa.FP8E4M3 || dt == fa.FP8E5M2 {
			x.Scale = 0.5
		}
		back := fa.NewTensor(1, 2, 2, 64)
		if err := fa.Convert(x, src); err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if err := fa.Convert(back, x); err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		var sum float32
		if n := testing.AllocsPerRun(50, func() { sum += x.At(0, 1, 1, 37) }); n != 0 {
			t.Errorf("%v: At allocates %v times per call", dt, n)
		}
		for _, i := range [][4]int{{0, 0, 0, 0}, {0, 1, 1, 37}, {0, 1, 0, 63}} {
			if got, want := x.At(0, i[1], i[2], i[3]), back.At(0, i[1], i[2], i[3]); got != want {
				t.Errorf("%v: At%v = %v, want %v (Convert's)", dt, i, got, want)
			}
		}
	}
}

// An fp8 tensor's Scale must be 0 (meaning 1) or a positive finite normal
// float32: a subnormal descale (1e-45) saturates every stored value and
// flushes every read one, a mistake refused like a negative or NaN one.
func TestFP8ScaleNormal(t *testing.T) {
	src := fa.NewTensor(1, 2, 1, 32)
	for _, c := range []struct {
		scale float32
		ok    bool
	}{
		{0, true}, {1, true}, {0x1p-126, true}, {math.MaxFloat32, true},
		{1e-45, false}, {0x1p-127, false}, {-0x1p-130, false}, {-1, false},
		{float32(math.Inf(1)), false}, {float32(math.NaN()), false},
	} {
		for _, dt := range []fa.DType{fa.FP8E4M3, fa.FP8E5M2} {
			x := fa.NewTensorOf(dt, 1, 2, 1, 32)
			x.Scale = c.scale
			verr, cerr := x.Validate("k"), fa.Convert(x, src)
			if c.ok {
				if verr != nil || cerr != nil {
					t.Errorf("%v Scale %v: Validate %v, Convert %v; want no error", dt, c.scale, verr, cerr)
				}
				continue
			}
			wantArgErr(t, fmt.Sprintf("%v Scale %v: Validate", dt, c.scale), verr, "k")
			if cerr == nil {
				t.Errorf("%v Scale %v: Convert: no error", dt, c.scale)
			}
		}
	}
}
