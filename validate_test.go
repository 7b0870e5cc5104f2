package flashattn

import (
	"math"
	"strings"
	"testing"
)

// TestValidation: every bad input returns an error naming the problem.
func TestValidation(t *testing.T) {
	q, k, v := NewTensor(1, 8, 4, 16), NewTensor(1, 6, 2, 16), NewTensor(1, 6, 2, 16)
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name    string
		q, k, v Tensor
		opt     Options
		want    string
	}{
		{"nil q", Tensor{Batch: 1, Seq: 8, Heads: 4, Dim: 16}, k, v, Options{}, "q is nil"},
		{"zero dim", NewTensor(1, 8, 4, 16), Tensor{Data: k.Data, Batch: 1, Seq: 0, Heads: 2, Dim: 16}, v, Options{}, "k has shape"},
		{"short q", Dense(make([]float32, 10), 1, 8, 4, 16), k, v, Options{}, "q needs 512 elements"},
		{"headdim", q, NewTensor(1, 6, 2, 8), v, Options{}, "k has headdim 8, want 16"},
		{"batch", q, NewTensor(2, 6, 2, 16), v, Options{}, "k has batch 2, want 1"},
		{"v seqlen", q, k, NewTensor(1, 7, 2, 16), Options{}, "v has seqlen 7, want 6"},
		{"gqa", q, NewTensor(1, 6, 3, 16), NewTensor(1, 6, 3, 16), Options{}, "not a multiple"},
		{"scale nan", q, k, v, Options{Scale: nan}, "Scale"},
		{"scale neg", q, k, v, Options{Scale: -1}, "Scale"},
		{"scale inf", q, k, v, Options{Scale: float32(math.Inf(1))}, "Scale"},
		{"softcap", q, k, v, Options{Softcap: -2}, "Softcap"},
		{"softcap nan", q, k, v, Options{Softcap: nan}, "Softcap"},
		{"dropout 1", q, k, v, Options{Dropout: 1}, "Dropout"},
		{"dropout nan", q, k, v, Options{Dropout: nan}, "Dropout"},
		{"window", q, k, v, Options{Window: &Window{Left: -2, Right: 0}}, "Window"},
		{"workers", q, k, v, Options{Workers: -1}, "Workers"},
		{"blocks", q, k, v, Options{BlockQ: -1}, "BlockQ"},
		{"alibi len", q, k, v, Options{ALiBi: make([]float32, 3)}, "ALiBi has 3 slopes"},
		{"alibi nan", q, k, v, Options{ALiBi: []float32{1, 2, nan, 4}}, "ALiBi slope 2"},
		{"negative stride", Tensor{Data: q.Data, Batch: 1, Seq: 8, Heads: 4, Dim: 16, SeqStride: -1}, k, v, Options{}, "negative stride"},
		{"varlen batch", NewTensor(2, 8, 4, 16), NewTensor(2, 6, 2, 16), NewTensor(2, 6, 2, 16),
			Options{VarLen: &VarLen{CuSeqlensQ: []int32{0, 8}, CuSeqlensK: []int32{0, 6}}}, "Batch 1"},
		{"cu decreasing", q, k, v, Options{VarLen: &VarLen{CuSeqlensQ: []int32{0, 5, 3, 8}, CuSeqlensK: []int32{0, 2, 4, 6}}}, "decreases"},
		{"cu end", q, k, v, Options{VarLen: &VarLen{CuSeqlensQ: []int32{0, 7}, CuSeqlensK: []int32{0, 6}}}, "ends at 7"},
		{"cu start", q, k, v, Options{VarLen: &VarLen{CuSeqlensQ: []int32{1, 8}, CuSeqlensK: []int32{0, 6}}}, "[0] is 1"},
		{"cu len", q, k, v, Options{VarLen: &VarLen{CuSeqlensQ: []int32{0, 8}, CuSeqlensK: []int32{0, 3, 6}}}, "equal length"},
		{"used", q, k, v, Options{VarLen: &VarLen{CuSeqlensQ: []int32{0, 8}, CuSeqlensK: []int32{0, 6}, SeqUsedK: []int32{7}}}, "SeqUsedK[0] is 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Forward(tc.q, tc.k, tc.v, &tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Forward error %v, want one containing %q", err, tc.want)
			}
			_, _, _, err = Backward(tc.q, tc.k, tc.v, NewTensor(1, 8, 4, 16), NewTensor(1, 8, 4, 16), make([]float32, 32), &tc.opt)
			if err == nil {
				t.Fatalf("Backward accepted bad input")
			}
		})
	}
}

func TestValidationOutputs(t *testing.T) {
	q, k, v := NewTensor(1, 8, 4, 16), NewTensor(1, 6, 2, 16), NewTensor(1, 6, 2, 16)
	if err := ForwardInto(NewTensor(1, 8, 4, 8), nil, q, k, v, nil); err == nil || !strings.Contains(err.Error(), "out has headdim") {
		t.Errorf("wrong out shape: %v", err)
	}
	overlap := Tensor{Data: make([]float32, 1000), Batch: 1, Seq: 8, Heads: 4, Dim: 16, HeadStride: 8}
	if err := ForwardInto(overlap, nil, q, k, v, nil); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping out: %v", err)
	}
	if err := ForwardInto(NewTensor(1, 8, 4, 16), make([]float32, 31), q, k, v, nil); err == nil || !strings.Contains(err.Error(), "lse has 31") {
		t.Errorf("short lse: %v", err)
	}
	out, lse, _ := Forward(q, k, v, nil)
	if _, _, _, err := Backward(q, k, v, out, NewTensor(1, 8, 4, 15), lse, nil); err == nil || !strings.Contains(err.Error(), "dout") {
		t.Errorf("bad dout: %v", err)
	}
	if _, _, _, err := Backward(q, k, v, out, out, lse[:5], nil); err == nil || !strings.Contains(err.Error(), "lse has 5") {
		t.Errorf("short lse: %v", err)
	}
	if err := BackwardInto(NewTensor(1, 8, 4, 16), NewTensor(1, 6, 4, 16), NewTensor(1, 6, 2, 16), q, k, v, out, out, lse, nil); err == nil || !strings.Contains(err.Error(), "dk has heads 4") {
		t.Errorf("bad dk: %v", err)
	}
}

// FuzzValidation feeds arbitrary shapes, strides and options: the library
// must return an error or a result, never panic, and a result must be free
// of NaN for finite inputs.
func FuzzValidation(f *testing.F) {
	f.Add(1, 5, 7, 2, 1, 8, 0, 0, 0, float32(0), float32(0), float32(0), -1, -1, false, 40, 0, 0, uint64(0))
	f.Add(2, 3, 3, 4, 2, 3, 3, 0, 9, float32(0.5), float32(2), float32(0.3), 2, 0, true, 70, 1, 1, uint64(7))
	f.Add(1, 1, 1, 1, 1, 1, -4, 2, 0, float32(-1), float32(-3), float32(1), -7, 3, true, 0, 3, 2, uint64(99))
	f.Add(2, 1, 16, 4, 2, 8, 0, 0, 0, float32(0), float32(0), float32(0), -1, -1, false, 0, 0, 2, uint64(12345))
	f.Fuzz(func(t *testing.T, b, sq, sk, h, hk, d, hs, ss, bs int, scale, softcap, drop float32, wl, wr int, causal bool, extra, nslopes, cache int, cacheBits uint64) {
		clamp := func(x, lo, hi int) int { return min(max(x, lo), hi) }
		b, sq, sk, h, hk, d = clamp(b, -1, 3), clamp(sq, -1, 9), clamp(sk, -1, 9), clamp(h, -1, 4), clamp(hk, -1, 4), clamp(d, -1, 9)
		size := clamp(b*max(sq, sk)*h*d+extra, 0, 4000)
		mk := func(s, heads int) Tensor {
			return Tensor{Data: make([]float32, size), Batch: b, Seq: s, Heads: heads, Dim: d,
				HeadStride: clamp(hs, -5, 40), SeqStride: clamp(ss, -5, 200), BatchStride: clamp(bs, -5, 2000)}
		}
		q, k, v := mk(sq, h), mk(sk, hk), mk(sk, hk)
		for _, t := range []Tensor{q, k, v} {
			for i := range t.Data {
				t.Data[i] = float32(i%7) - 3
			}
		}
		opt := &Options{Scale: scale, Softcap: softcap, Dropout: drop, Causal: causal, ALiBi: make([]float32, clamp(nslopes, 0, 20)),
			Window: &Window{Left: clamp(wl, -3, 10), Right: clamp(wr, -3, 10)}, Workers: 2}
		// cache: 0 none, 1 contiguous KV cache, 2 paged (k's batch = blocks).
		if cache%3 != 0 && b > 0 {
			kc := &KVCache{SeqLens: make([]int32, b)}
			for i := range kc.SeqLens {
				kc.SeqLens[i] = int32(cacheBits>>(4*i)&31) - 2
			}
			if cache%3 == 2 {
				kc.BlocksPerSeq = int(cacheBits>>40&3) - 1
				for i := 0; i < max(0, b*kc.BlocksPerSeq)+int(cacheBits>>44&1); i++ {
					kc.BlockTable = append(kc.BlockTable, int32(cacheBits>>(48+2*i)&7)-1)
				}
			}
			opt.KVCache = kc
		}
		out, lse, err := Forward(q, k, v, opt)
		if err != nil {
			return
		}
		if opt.KVCache != nil {
			return // forward only
		}
		for _, x := range append(append([]float32(nil), out.Data...), lse...) {
			if math.IsNaN(float64(x)) {
				t.Fatalf("NaN in a result for valid input")
			}
		}
		dq, dk, dv, err := Backward(q, k, v, out, out, lse, opt)
		if err != nil {
			t.Fatalf("Backward refused what Forward accepted: %v", err)
		}
		for _, x := range [][]float32{dq.Data, dk.Data, dv.Data} {
			for _, y := range x {
				if math.IsNaN(float64(y)) {
					t.Fatalf("NaN in a gradient")
				}
			}
		}
	})
}

// TestShapeResolved: Resolved fills in KVHeads, KVBatch and DimV from
// Heads, Batch and Dim when they are 0, and keeps them otherwise.
func TestShapeResolved(t *testing.T) {
	for _, c := range []struct{ s, want Shape }{
		{Shape{Batch: 2, Heads: 8, SeqQ: 3, SeqK: 5, Dim: 64}, Shape{Batch: 2, Heads: 8, KVHeads: 8, SeqQ: 3, SeqK: 5, Dim: 64, KVBatch: 2, DimV: 64}},
		{Shape{Batch: 2, Heads: 8, KVHeads: 2, SeqQ: 3, SeqK: 5, Dim: 576, KVBatch: 7, DimV: 512}, Shape{Batch: 2, Heads: 8, KVHeads: 2, SeqQ: 3, SeqK: 5, Dim: 576, KVBatch: 7, DimV: 512}},
	} {
		if got := c.s.Resolved(); got != c.want {
			t.Errorf("%+v.Resolved() = %+v, want %+v", c.s, got, c.want)
		}
	}
}
