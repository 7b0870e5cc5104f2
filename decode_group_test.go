package flashattn

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

// TestDecodeGroupHeads: decoding one token with grouped-query attention
// (16 query heads on 4 KV heads: the kernels that read every KV head of a
// key side by side) gives, bit for bit, what each KV head's query heads
// give alone (one KV head: the one-head kernels), for float32, bf16,
// fp16 and q8_0 caches, with key counts that are and are not multiples of the
// kernels' key blocks, on every decode kernel set.
func TestDecodeGroupHeads(t *testing.T) {
	const H, Hk, D, capacity = 16, 4, 64, 700
	g := H / Hk
	q := goldenTensor(Float32, 41, 1, 1, 1, H, D)
	kf, vf := goldenTensor(Float32, 42, 1, 1, capacity, Hk, D), goldenTensor(Float32, 43, 1, 1, capacity, Hk, D)
	// heads returns heads h0..h0+n-1 of the dense float32 x as a tensor of
	// type dt.
	heads := func(dt DType, x Tensor, h0, n int) Tensor {
		f := NewTensor(x.Batch, x.Seq, n, x.Dim)
		for s := 0; s < x.Seq; s++ {
			for h := 0; h < n; h++ {
				copy(f.Data[(s*n+h)*x.Dim:(s*n+h+1)*x.Dim], x.Data[(s*x.Heads+h0+h)*x.Dim:])
			}
		}
		out := NewTensorOf(dt, x.Batch, x.Seq, n, x.Dim)
		if err := Convert(out, f); err != nil {
			t.Fatal(err)
		}
		return out
	}
	decode := func(q, k, v Tensor, n int) Tensor {
		out, _, err := Forward(q, k, v, &Options{KVCache: &KVCache{SeqLens: []int32{int32(n)}}})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, dk := range kernel.DecodeAvailable() {
		for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0} {
			for _, n := range []int{capacity, 613, 5} {
				t.Run(fmt.Sprintf("%s/%v/n=%d", dk.Name, dt, n), func(t *testing.T) {
					forceKernels(t, "decode="+dk.Name)
					all := decode(q, heads(dt, kf, 0, Hk), heads(dt, vf, 0, Hk), n)
					for hk := 0; hk < Hk; hk++ {
						one := decode(heads(Float32, q, hk*g, g), heads(dt, kf, hk, 1), heads(dt, vf, hk, 1), n)
						want := tensorBytes(one)
						got := tensorBytes(all)[hk*g*D*4 : (hk+1)*g*D*4]
						if !bytes.Equal(got, want) {
							t.Fatalf("KV head %d: O differs from its query heads decoded alone", hk)
						}
					}
				})
			}
		}
	}
}
