package flashattn

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestKVCache scatters each sequence's keys and values into a contiguous or
// paged cache (blocks in shuffled order) and compares the forward pass with
// the reference run on that sequence alone.
func TestKVCache(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sq, h, hk, d  int
		lens          []int
		block         int // 0: contiguous cache
		causal        bool
		window        *Window
		alibi, capped bool
	}{
		{name: "decode-paged", sq: 1, h: 8, hk: 2, d: 64, lens: []int{100, 0, 513, 37}, block: 16},
		{name: "decode-paged-d20", sq: 1, h: 4, hk: 4, d: 20, lens: []int{70, 300}, block: 32},
		{name: "decode-contiguous", sq: 1, h: 6, hk: 3, d: 32, lens: []int{5, 250, 1}},
		{name: "prefill-paged-causal", sq: 40, h: 4, hk: 2, d: 24, lens: []int{60, 130}, block: 16, causal: true},
		{name: "prefill-paged-window-alibi", sq: 70, h: 2, hk: 1, d: 64, lens: []int{200, 90}, block: 48,
			causal: true, window: &Window{Left: 30, Right: 0}, alibi: true},
		{name: "spec-decode-paged-softcap", sq: 3, h: 8, hk: 2, d: 40, lens: []int{77, 160}, block: 16, causal: true, capped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(4, uint64(len(tc.lens))))
			B := len(tc.lens)
			maxLen := 0
			for _, n := range tc.lens {
				maxLen = max(maxLen, n)
			}
			seqK := make([][]float32, B)
			seqV := make([][]float32, B)
			for b, n := range tc.lens {
				seqK[b], seqV[b] = randSlice(r, n*tc.hk*tc.d), randSlice(r, n*tc.hk*tc.d)
			}
			q := randSlice(r, B*tc.sq*tc.h*tc.d)
			row := tc.hk * tc.d
			var k, v Tensor
			cache := &KVCache{SeqLens: make([]int32, B)}
			for b, n := range tc.lens {
				cache.SeqLens[b] = int32(n)
			}
			if tc.block == 0 {
				cap := maxLen + 7
				k, v = NewTensor(B, cap, tc.hk, tc.d), NewTensor(B, cap, tc.hk, tc.d)
				for b, n := range tc.lens {
					copy(k.Data[b*cap*row:], seqK[b][:n*row])
					copy(v.Data[b*cap*row:], seqV[b][:n*row])
				}
			} else {
				per := (maxLen+tc.block-1)/tc.block + 1
				nblocks := B*per + 3
				k, v = NewTensor(nblocks, tc.block, tc.hk, tc.d), NewTensor(nblocks, tc.block, tc.hk, tc.d)
				perm := r.Perm(nblocks)
				cache.BlockTable, cache.BlocksPerSeq = make([]int32, B*per), per
				for b, n := range tc.lens {
					for i := 0; i < per; i++ {
						blk := perm[b*per+i]
						cache.BlockTable[b*per+i] = int32(blk)
						for j := i * tc.block; j < min(n, (i+1)*tc.block); j++ {
							copy(k.Data[(blk*tc.block+j%tc.block)*row:][:row], seqK[b][j*row:])
							copy(v.Data[(blk*tc.block+j%tc.block)*row:][:row], seqV[b][j*row:])
						}
					}
				}
			}
			var slopes []float32
			if tc.alibi {
				slopes = []float32{0.25, 0.0625}
			}
			opts := &Options{Causal: tc.causal, Window: tc.window, ALiBi: slopes, KVCache: cache}
			if tc.capped {
				opts.Softcap = 5
			}
			out, lse, err := Forward(Dense(q, B, tc.sq, tc.h, tc.d), k, v, opts)
			if err != nil {
				t.Fatal(err)
			}
			for b, n := range tc.lens {
				sq := q[b*tc.sq*tc.h*tc.d : (b+1)*tc.sq*tc.h*tc.d]
				gotO := out.Data[b*tc.sq*tc.h*tc.d : (b+1)*tc.sq*tc.h*tc.d]
				gotL := lse[b*tc.h*tc.sq : (b+1)*tc.h*tc.sq]
				if n == 0 {
					for _, x := range gotO {
						if x != 0 {
							t.Fatalf("sequence %d has an empty cache but O = %v", b, x)
						}
					}
					continue
				}
				par := reference.Params{Batch: 1, SeqQ: tc.sq, SeqK: n, Heads: tc.h, KVHeads: tc.hk, HeadDim: tc.d,
					Causal: tc.causal}
				if tc.alibi {
					par.ALiBi = to64(slopes)
				}
				if tc.capped {
					par.Softcap = 5
				}
				if tc.window != nil {
					par.Window, par.WindowLeft, par.WindowRight = true, tc.window.Left, tc.window.Right
				}
				o64, l64 := reference.Forward64(par, to64(sq), to64(seqK[b]), to64(seqV[b]))
				o32, l32 := reference.Forward32(plainPar(par), sq, seqK[b], seqV[b])
				if err := reference.Check("O", gotO, o32, o64); err != nil {
					t.Errorf("sequence %d: %v", b, err)
				}
				if err := reference.Check("LSE", gotL, l32, l64); err != nil {
					t.Errorf("sequence %d: %v", b, err)
				}
			}
		})
	}
}

func TestKVCacheValidation(t *testing.T) {
	q := NewTensor(2, 1, 4, 16)
	k, v := NewTensor(6, 16, 2, 16), NewTensor(6, 16, 2, 16)
	for _, tc := range []struct {
		c    KVCache
		k    Tensor
		want string
	}{
		{KVCache{SeqLens: []int32{3}}, NewTensor(2, 16, 2, 16), "SeqLens has 1"},
		{KVCache{SeqLens: []int32{3, 17}}, NewTensor(2, 16, 2, 16), "SeqLens[1] is 17"},
		{KVCache{SeqLens: []int32{3, 4}, BlockTable: []int32{0, 1, 2}, BlocksPerSeq: 2}, k, "BlockTable has 3"},
		{KVCache{SeqLens: []int32{3, 4}, BlockTable: []int32{0, 1, 2, 6}, BlocksPerSeq: 2}, k, "BlockTable[3] is 6"},
		{KVCache{SeqLens: []int32{3, 40}, BlockTable: []int32{0, 1, 2, 3}, BlocksPerSeq: 2}, k, "SeqLens[1] is 40"},
		{KVCache{SeqLens: []int32{3, 4}, BlockTable: []int32{0, 1, 2, 3}, BlocksPerSeq: 2}, NewTensor(6, 12, 2, 16), "multiple of 16"},
	} {
		vv := NewTensor(tc.k.Batch, tc.k.Seq, tc.k.Heads, tc.k.Dim)
		_, _, err := Forward(q, tc.k, vv, &Options{KVCache: &tc.c})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}
	_, _, _, err := Backward(q, k, v, q, q, make([]float32, 8), &Options{KVCache: &KVCache{SeqLens: []int32{1, 1}, BlockTable: []int32{0, 1, 2, 3}, BlocksPerSeq: 2}})
	if err == nil || !strings.Contains(err.Error(), "KVCache") {
		t.Errorf("Backward with a KVCache: %v", err)
	}
}

// TestKVCacheSeqLensNoWrap: SeqLens near MaxInt32 with new keys is refused
// as an *ArgError for SeqLens and leaves the cache as it was, contiguous or
// paged. Before, SeqLens + Snew wrapped on 32-bit platforms (GOARCH=386),
// passed the capacity check and the append panicked (ErrInternal).
func TestKVCacheSeqLensNoWrap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     KVCache
		cache [4]int
	}{
		{"contiguous", KVCache{SeqLens: []int32{math.MaxInt32, 1}}, [4]int{2, 32, 2, 16}},
		{"contiguous, second", KVCache{SeqLens: []int32{1, math.MaxInt32 - 1}}, [4]int{2, 32, 2, 16}},
		{"paged", KVCache{SeqLens: []int32{math.MaxInt32, 1}, BlockTable: []int32{0, 1, 2, 3}, BlocksPerSeq: 2}, [4]int{4, 16, 2, 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := NewTensor(tc.cache[0], tc.cache[1], tc.cache[2], tc.cache[3])
			v := NewTensor(tc.cache[0], tc.cache[1], tc.cache[2], tc.cache[3])
			c := tc.c
			c.KNew, c.VNew = NewTensor(2, 2, 2, 16), NewTensor(2, 2, 2, 16)
			for i := range c.KNew.Data {
				c.KNew.Data[i], c.VNew.Data[i] = 1, 1
			}
			_, _, err := Forward(NewTensor(2, 1, 4, 16), k, v, &Options{KVCache: &c})
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Arg != "Options.KVCache.SeqLens" {
				t.Fatalf("error %v, want an *ArgError for Options.KVCache.SeqLens", err)
			}
			for i := range k.Data {
				if k.Data[i] != 0 || v.Data[i] != 0 {
					t.Fatalf("the cache was written at %d", i)
				}
			}
		})
	}
}
