package flashattn_test

import (
	"fmt"
	"math"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/reference"
)

// A causal forward pass on a dense batch, checked against the plain
// reference.
func Example() {
	const B, N, H, D = 1, 100, 4, 32
	q := flashattn.NewTensor(B, N, H, D)
	k := flashattn.NewTensor(B, N, H, D)
	v := flashattn.NewTensor(B, N, H, D)
	for i := range q.Data {
		q.Data[i] = float32(math.Sin(float64(i)))
		k.Data[i] = float32(math.Cos(float64(i) * 0.7))
		v.Data[i] = float32(i%13) / 13
	}
	out, lse, err := flashattn.Forward(q, k, v, &flashattn.Options{Causal: true})
	if err != nil {
		panic(err)
	}
	p := reference.Params{Batch: B, SeqQ: N, SeqK: N, Heads: H, KVHeads: H, HeadDim: D, Causal: true}
	ref, _ := reference.Forward32(p, q.Data, k.Data, v.Data)
	fmt.Printf("shape %d×%d×%d×%d, %d LSE values\n", out.Batch, out.Seq, out.Heads, out.Dim, len(lse))
	fmt.Printf("max |flashattn - reference| < 1e-5: %v\n", reference.MaxAbsDiff32vs64(out.Data, to64(ref)) < 1e-5)
	// Output:
	// shape 1×100×4×32, 400 LSE values
	// max |flashattn - reference| < 1e-5: true
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// Training step: forward, then gradients for an upstream gradient dout.
// Grouped-query attention: 8 query heads share 2 KV heads.
func ExampleBackward() {
	q, k, v := flashattn.NewTensor(2, 64, 8, 16), flashattn.NewTensor(2, 64, 2, 16), flashattn.NewTensor(2, 64, 2, 16)
	dout := flashattn.NewTensor(2, 64, 8, 16)
	for i := range q.Data {
		q.Data[i], dout.Data[i] = float32(i%5), 1
	}
	opts := &flashattn.Options{Causal: true, Dropout: 0.1, Seed: 42}
	out, lse, err := flashattn.Forward(q, k, v, opts)
	if err != nil {
		panic(err)
	}
	dq, dk, dv, err := flashattn.Backward(q, k, v, out, dout, lse, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println(dq.Heads, dk.Heads, dv.Heads)
	// Output: 8 2 2
}

// Q, K and V sliced from one packed QKV projection, without copying, and
// the output written into a caller-owned buffer (no allocation per call).
func ExampleForwardInto() {
	const B, N, H, D = 1, 10, 2, 8
	qkv := make([]float32, B*N*3*H*D) // [B, N, 3, H, D]
	q, k, v := flashattn.PackedQKV(qkv, B, N, H, D)
	out := flashattn.NewTensor(B, N, H, D)
	lse := make([]float32, B*H*N)
	for step := 0; step < 3; step++ {
		if err := flashattn.ForwardInto(out, lse, q, k, v, nil); err != nil {
			panic(err)
		}
	}
	// All scores are equal, so each row's LSE is log(N).
	fmt.Printf("%.4f %.4f\n", lse[0], math.Log(N))
	// Output: 2.3026 2.3026
}

// Errors say what is wrong.
func ExampleForward_error() {
	q, k := flashattn.NewTensor(1, 8, 4, 64), flashattn.NewTensor(1, 8, 3, 64)
	_, _, err := flashattn.Forward(q, k, k, nil)
	fmt.Println(err)
	// Output: flashattn: q has 4 heads, not a multiple of the 3 heads of k and v
}

// A variable-length batch: two sequences of 3 and 5 tokens packed together.
func ExampleVarLen() {
	const H, D = 2, 4
	q, k, v := flashattn.NewTensor(1, 8, H, D), flashattn.NewTensor(1, 8, H, D), flashattn.NewTensor(1, 8, H, D)
	opts := &flashattn.Options{Causal: true, VarLen: &flashattn.VarLen{
		CuSeqlensQ: []int32{0, 3, 8},
		CuSeqlensK: []int32{0, 3, 8},
	}}
	_, lse, err := flashattn.Forward(q, k, v, opts)
	if err != nil {
		panic(err)
	}
	// LSE is [heads, total]: with equal scores, row i of a causal sequence sees i+1 keys.
	fmt.Printf("%.3f %.3f %.3f | %.3f\n", lse[0], lse[1], lse[2], lse[3])
	// Output: 0.000 0.693 1.099 | 0.000
}

// Decoding one token per sequence against a paged KV cache: two sequences
// hold 20 and 5 keys in 16-key blocks, in whatever blocks the allocator gave
// them.
func ExampleKVCache() {
	const H, Hk, D, block = 4, 2, 8, 16
	q := flashattn.NewTensor(2, 1, H, D)                                               // the new token of each sequence
	k, v := flashattn.NewTensor(5, block, Hk, D), flashattn.NewTensor(5, block, Hk, D) // 5 cache blocks
	opts := &flashattn.Options{KVCache: &flashattn.KVCache{
		SeqLens:      []int32{20, 5},
		BlockTable:   []int32{3, 0, 4, 1}, // sequence 0: blocks 3, 0; sequence 1: blocks 4, (1)
		BlocksPerSeq: 2,
	}}
	_, lse, err := flashattn.Forward(q, k, v, opts)
	if err != nil {
		panic(err)
	}
	// Equal scores: LSE is log(keys in the cache).
	fmt.Printf("%.4f %.4f | %.4f %.4f\n", lse[0], math.Log(20), lse[4], math.Log(5))
	// Output: 2.9957 2.9957 | 1.6094 1.6094
}
