package flashattn

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
)

// allocated returns the bytes and the number of heap objects that f
// allocates (every goroutine's, the worker pool's included).
func allocated(t *testing.T, f func() error) (bytes, objects uint64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := f(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, after.Mallocs - before.Mallocs
}

// TestKeySplitBuffersSizedByUse: the key splits' partial-result buffers
// hold the splits the call uses, not maxSplits per row block. A batch of
// decode rows reading 32 cached keys (two 16-key groups) uses two splits
// whether KVCache.NumSplits asks for 2 or 16, so once calls with 2 have run
// (a few, so that both workers' workspaces are sized), the first with 16
// finds its buffers and allocates (nearly) nothing.
func TestKeySplitBuffersSizedByUse(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race calls allocate; counted by the plain test run")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const b, h, hk, d, capacity, keys = 64, 8, 2, 64, 64, 32
	r := rand.New(rand.NewPCG(27, 1))
	kc := Dense(randSlice(r, b*capacity*hk*d), b, capacity, hk, d)
	vc := Dense(randSlice(r, b*capacity*hk*d), b, capacity, hk, d)
	q := Dense(randSlice(r, b*h*d), b, 1, h, d)
	out := NewTensor(b, 1, h, d)
	lens := make([]int32, b)
	for i := range lens {
		lens[i] = keys
	}
	var outs [][]float32
	for _, splits := range []int{2, 16} {
		opts := &Options{Workers: 2, KVCache: &KVCache{SeqLens: lens, NumSplits: splits}}
		call := func() error { return ForwardInto(out, nil, q, kc, vc, opts) }
		bytes, _ := allocated(t, call)
		t.Logf("NumSplits %d: the first call allocates %d bytes", splits, bytes)
		if splits == 2 {
			for range 8 {
				allocated(t, call)
			}
		} else if bytes > 64<<10 {
			t.Errorf("NumSplits 16 after NumSplits 2 (both use 2 splits) allocates %d bytes: buffers sized for unused splits", bytes)
		}
		outs = append(outs, slices.Clone(out.Data))
	}
	if !slices.Equal(outs[0], outs[1]) {
		t.Error("NumSplits 2 and 16 give different outputs with the same 2 splits")
	}
}

// TestReserve: after Reserve, the first ForwardInto with the same arguments
// allocates (nearly) nothing — prefill, a batch of decode rows with key splits, and
// a decode step appending to a KV cache (which Reserve leaves as it is) —
// and computes what it computes without Reserve.
func TestReserve(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race calls allocate; counted by the plain test run")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	r := rand.New(rand.NewPCG(27, 2))
	type call struct {
		name    string
		q, k, v Tensor
		opts    *Options
	}
	dense := func(b, s, h, d int) Tensor { return Dense(randSlice(r, b*s*h*d), b, s, h, d) }
	const b, h, hk, d, capacity = 48, 8, 2, 80, 96
	lens := make([]int32, b)
	for i := range lens {
		lens[i] = int32(40 + i)
	}
	cache := &KVCache{SeqLens: lens, KNew: dense(b, 1, hk, d), VNew: dense(b, 1, hk, d)}
	kc, vc := dense(b, capacity, hk, d), dense(b, capacity, hk, d)
	for _, c := range []call{
		{"prefill", dense(2, 333, 6, 48), dense(2, 333, 3, 48), dense(2, 333, 3, 48), &Options{Causal: true}},
		{"decode batch", dense(b, 1, h, d), dense(b, 700, hk, d), dense(b, 700, hk, d), &Options{Workers: 2}},
		{"decode step on a KV cache", dense(b, 1, h, d), kc, vc, &Options{Workers: 2, KVCache: cache}},
	} {
		kBefore, vBefore := slices.Clone(c.k.Data), slices.Clone(c.v.Data)
		if err := Reserve(c.q, c.k, c.v, c.opts); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(kBefore, c.k.Data) || !slices.Equal(vBefore, c.v.Data) {
			t.Errorf("%s: Reserve changed K or V", c.name)
		}
		out := NewTensor(c.q.Batch, c.q.Seq, c.q.Heads, c.v.Dim)
		lse := make([]float32, c.q.Batch*c.q.Heads*c.q.Seq)
		bytes, objects := allocated(t, func() error { return ForwardInto(out, lse, c.q, c.k, c.v, c.opts) })
		// Nearly nothing: the runtime may allocate a wait-queue entry
		// (112 bytes) when the caller waits for a worker.
		if bytes > 512 || objects > 4 {
			t.Errorf("%s: the first ForwardInto after Reserve allocates %d bytes in %d objects", c.name, bytes, objects)
		}
		if c.opts.KVCache != nil { // the append happened once, in the call: undo it and compare with Forward
			copy(c.k.Data, kBefore)
			copy(c.v.Data, vBefore)
		}
		want, wantLSE, err := Forward(c.q, c.k, c.v, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(want.Data, out.Data) || !slices.Equal(wantLSE, lse) {
			t.Errorf("%s: ForwardInto after Reserve differs from Forward", c.name)
		}
	}
	var ae *ArgError
	if err := Reserve(NewTensor(1, 4, 2, 8), NewTensor(1, 4, 2, 16), NewTensor(1, 4, 2, 8), nil); !errors.As(err, &ae) {
		t.Errorf("Reserve with mismatched head dims: %v, want an *ArgError", err)
	}
}

// TestReserveBackward: after ReserveBackward (and Reserve, for the
// training step's forward), the first BackwardGrads with the same
// arguments allocates (nearly) nothing — the one-pass backward (many
// sequence × KV-head pairs), the dQ pass (one pair), 16-bit gradients with
// DSinks and a broadcast Bias's DBias — and computes what it computes
// without them.
func TestReserveBackward(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race calls allocate; counted by the plain test run")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	r := rand.New(rand.NewPCG(27, 3))
	typed := func(dt DType, b, s, h, d int) Tensor {
		x := NewTensorOf(dt, b, s, h, d)
		if err := Convert(x, Dense(randSlice(r, b*s*h*d), b, s, h, d)); err != nil {
			t.Fatal(err)
		}
		return x
	}
	bias, err := NewBias(randSlice(r, 2*1*1*150), 2, 1, 1, 150) // a key-padding-like [b, 1, 1, sk] bias
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		dt             DType
		b, s, h, hk, d int
		opts           *Options
		sinks, dbias   bool
	}{
		{"one pass", Float32, 4, 200, 8, 4, 64, &Options{Causal: true, Workers: 2}, false, false},
		{"dq pass", Float32, 1, 600, 4, 1, 64, &Options{Causal: true, Workers: 2}, false, false},
		{"bf16, sinks, bias", BFloat16, 2, 150, 4, 2, 32, &Options{Workers: 2, Sinks: randSlice(r, 4), ScoreMod: bias}, true, true},
	} {
		q, k, v := typed(c.dt, c.b, c.s, c.h, c.d), typed(c.dt, c.b, c.s, c.hk, c.d), typed(c.dt, c.b, c.s, c.hk, c.d)
		dout := typed(c.dt, c.b, c.s, c.h, c.d)
		if err := Reserve(q, k, v, c.opts); err != nil {
			t.Fatalf("%s: Reserve: %v", c.name, err)
		}
		if err := ReserveBackward(q, k, v, c.opts); err != nil {
			t.Fatalf("%s: ReserveBackward: %v", c.name, err)
		}
		out := NewTensorOf(c.dt, c.b, c.s, c.h, c.d)
		lse := make([]float32, c.b*c.h*c.s)
		if bytes, objects := allocated(t, func() error { return ForwardInto(out, lse, q, k, v, c.opts) }); bytes > 512 || objects > 4 {
			t.Errorf("%s: the first ForwardInto after Reserve allocates %d bytes in %d objects", c.name, bytes, objects)
		}
		g := Grads{DQ: NewTensorOf(c.dt, c.b, c.s, c.h, c.d), DK: NewTensorOf(c.dt, c.b, c.s, c.hk, c.d), DV: NewTensorOf(c.dt, c.b, c.s, c.hk, c.d)}
		if c.sinks {
			g.DSinks = make([]float32, c.h)
		}
		if c.dbias {
			g.DBias = make([]float32, bias.len())
		}
		bytes, objects := allocated(t, func() error { return BackwardGrads(context.Background(), g, q, k, v, out, dout, lse, nil, c.opts) })
		t.Logf("%s: the first backward after ReserveBackward allocates %d bytes in %d objects", c.name, bytes, objects)
		if bytes > 512 || objects > 4 {
			t.Errorf("%s: the first BackwardGrads after ReserveBackward allocates %d bytes in %d objects", c.name, bytes, objects)
		}
		want := Grads{DQ: NewTensorOf(c.dt, c.b, c.s, c.h, c.d), DK: NewTensorOf(c.dt, c.b, c.s, c.hk, c.d), DV: NewTensorOf(c.dt, c.b, c.s, c.hk, c.d),
			DSinks: slices.Clone(g.DSinks), DBias: slices.Clone(g.DBias)}
		if err := BackwardGrads(context.Background(), want, q, k, v, out, dout, lse, nil, c.opts); err != nil {
			t.Fatal(err)
		}
		for i, x := range [][2]Tensor{{g.DQ, want.DQ}, {g.DK, want.DK}, {g.DV, want.DV}} {
			if !slices.Equal(x[0].BF16, x[1].BF16) || !slices.Equal(x[0].Data, x[1].Data) {
				t.Errorf("%s: gradient %d after ReserveBackward differs from a later call's", c.name, i)
			}
		}
		if !slices.Equal(g.DSinks, want.DSinks) || !slices.Equal(g.DBias, want.DBias) {
			t.Errorf("%s: DSinks or DBias after ReserveBackward differ from a later call's", c.name)
		}
	}
	var ae *ArgError
	if err := ReserveBackward(NewTensor(1, 4, 2, 8), NewTensor(1, 4, 2, 16), NewTensor(1, 4, 2, 8), nil); !errors.As(err, &ae) {
		t.Errorf("ReserveBackward with mismatched head dims: %v, want an *ArgError", err)
	}
	kc := NewTensor(1, 16, 2, 8)
	if err := ReserveBackward(NewTensor(1, 1, 2, 8), kc, kc, &Options{KVCache: &KVCache{SeqLens: []int32{4}}}); !errors.As(err, &ae) {
		t.Errorf("ReserveBackward with a KVCache: %v, want an *ArgError", err)
	}
}
