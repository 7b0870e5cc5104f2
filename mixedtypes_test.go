package flashattn

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestMixedTypesRounding checks the rule for mixed element types stated on
// DType: with a 16-bit k or v, a float32 q is rounded to that type before
// the products (a call with q rounded by the caller gives the same bits),
// and O meets the 16-bit error rule against the float64 attention over the
// rounded q; with a q8_0 or q4_0 cache a float32 q is not rounded (its
// result differs from the rounded q's and meets the float32 rule). For a
// KV cache (contiguous and paged, new keys appended) and a plain call.
func TestMixedTypesRounding(t *testing.T) {
	for _, dt := range []DType{BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		for _, mode := range []string{"plain", "cache", "paged"} {
			if mode == "plain" && dt.cacheOnly() {
				continue // q8_0 and q4_0 are KV-cache types only
			}
			t.Run(fmt.Sprintf("%v/%s", dt, mode), func(t *testing.T) { checkMixedTypes(t, dt, mode) })
		}
	}
}

func checkMixedTypes(t *testing.T, dt DType, mode string) {
	const B, sq, Hq, Hk, D, sk, block = 2, 3, 4, 2, 64, 96, 32
	r := rand.New(rand.NewPCG(uint64(dt), 11))
	rows, seq := B, sk
	var c *KVCache
	switch mode {
	case "cache":
		c = &KVCache{SeqLens: []int32{60, 93}}
	case "paged":
		rows, seq = B*sk/block, block
		c = &KVCache{SeqLens: []int32{60, 93}, BlocksPerSeq: sk / block, BlockTable: make([]int32, B*sk/block)}
		for i, p := range r.Perm(rows) {
			c.BlockTable[i] = int32(p)
		}
	}
	kc, vc := NewTensorOf(dt, rows, seq, Hk, D), NewTensorOf(dt, rows, seq, Hk, D)
	if err := Convert(kc, Dense(randSlice(r, rows*seq*Hk*D), rows, seq, Hk, D)); err != nil {
		t.Fatal(err)
	}
	if err := Convert(vc, Dense(randSlice(r, rows*seq*Hk*D), rows, seq, Hk, D)); err != nil {
		t.Fatal(err)
	}
	var knew, vnew []float32
	if c != nil {
		knew, vnew = randSlice(r, B*sq*Hk*D), randSlice(r, B*sq*Hk*D)
	}
	q := randSlice(r, B*sq*Hq*D)
	// run calls attention with queries x on fresh copies of the cache (the
	// new keys are appended each time).
	run := func(x []float32) (Tensor, []float32, Tensor, Tensor) {
		k, v := NewTensorOf(dt, rows, seq, Hk, D), NewTensorOf(dt, rows, seq, Hk, D)
		if err := Convert(k, kc); err != nil {
			t.Fatal(err)
		}
		if err := Convert(v, vc); err != nil {
			t.Fatal(err)
		}
		o := &Options{Causal: true}
		if c != nil {
			cc := *c
			cc.KNew, cc.VNew = Dense(knew, B, sq, Hk, D), Dense(vnew, B, sq, Hk, D)
			o.KVCache = &cc
		}
		out, lse, err := Forward(Dense(slices.Clone(x), B, sq, Hq, D), k, v, o)
		if err != nil {
			t.Fatal(err)
		}
		return out, lse, k, v
	}
	out, lse, k, v := run(q)
	// The rounding the rule states: to the 16-bit type, or none for a
	// quantised cache (whose values are exact in float32).
	f, half := dt.Format()
	rf := f
	if !half {
		rf, _ = BFloat16.Format() // a rounding that does not happen
	}
	out2, lse2, _, _ := run(rf.RoundSlice(q))
	same := slices.Equal(out.Data, out2.Data) && slices.Equal(lse, lse2)
	if half != same {
		t.Errorf("q rounded to %v by the caller gives the same bits: %v, want %v", rf, same, half)
	}
	// Against the float64 attention over the cache as it now holds it and
	// the queries as the rule rounds them.
	kf, vf := NewTensor(rows, seq, Hk, D), NewTensor(rows, seq, Hk, D)
	if err := Convert(kf, k); err != nil {
		t.Fatal(err)
	}
	if err := Convert(vf, v); err != nil {
		t.Fatal(err)
	}
	for b := range B {
		nk := sk
		if c != nil {
			nk = int(c.SeqLens[b]) + sq
		}
		ek, ev := make([]float32, 0, nk*Hk*D), make([]float32, 0, nk*Hk*D)
		for j := range nk {
			row, pos := b, j
			if mode == "paged" {
				row, pos = int(c.BlockTable[b*sk/block+j/block]), j%block
			}
			off := (row*seq + pos) * Hk * D
			ek, ev = append(ek, kf.Data[off:off+Hk*D]...), append(ev, vf.Data[off:off+Hk*D]...)
		}
		qb := q[b*sq*Hq*D : (b+1)*sq*Hq*D]
		par := reference.Params{Batch: 1, SeqQ: sq, SeqK: nk, Heads: Hq, KVHeads: Hk, HeadDim: D, Causal: true}
		gotO, gotL := out.Data[b*sq*Hq*D:(b+1)*sq*Hq*D], lse[b*Hq*sq:(b+1)*Hq*sq]
		var errO, errL error
		if half {
			qr := f.RoundSlice(qb)
			o64, l64 := reference.Forward64(par, to64(qr), to64(ek), to64(ev))
			oh, lh := reference.ForwardHalf(par, f, qr, ek, ev)
			errO, errL = reference.CheckHalf("O", f, gotO, oh, o64), reference.CheckHalf("LSE", f, gotL, lh, l64)
		} else {
			o64, l64 := reference.Forward64(par, to64(qb), to64(ek), to64(ev))
			o32, l32 := reference.Forward32(plainPar(par), qb, ek, ev)
			errO, errL = reference.Check("O", gotO, o32, o64), reference.Check("LSE", gotL, l32, l64)
		}
		for _, err := range []error{errO, errL} {
			if err != nil {
				t.Errorf("sequence %d: %v", b, err)
			}
		}
	}
}
