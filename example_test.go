package flashattn_test

import (
	"fmt"
	"math"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/half"
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

// One step of continuous batching (as vLLM's scheduler runs it): a
// decode row, a 3-token prompt chunk over a cached prefix and a sequence
// with nothing to do this step, in one call on a paged cache. The packed
// new keys and values are appended at each sequence's SeqLens, then each
// sequence's queries attend over its cached and new keys (causal,
// bottom-right per sequence).
func ExampleKVCache_continuousBatching() {
	const H, Hk, D, block = 4, 2, 8, 16
	q := flashattn.NewTensor(1, 4, H, D)                                               // packed: 1 + 3 + 0 query rows
	k, v := flashattn.NewTensor(6, block, Hk, D), flashattn.NewTensor(6, block, Hk, D) // 6 cache blocks
	kNew, vNew := flashattn.NewTensor(1, 4, Hk, D), flashattn.NewTensor(1, 4, Hk, D)   // packed: 1 + 3 + 0 new keys
	for i := range vNew.Data {
		vNew.Data[i] = 1 // the new values are 1, the cached ones 0
	}
	cu := []int32{0, 1, 4, 4}
	seqLens := []int32{20, 5, 9}
	opts := &flashattn.Options{Causal: true,
		VarLen: &flashattn.VarLen{CuSeqlensQ: cu},
		KVCache: &flashattn.KVCache{
			SeqLens:      seqLens,
			BlockTable:   []int32{3, 0, 4, 1, 2, 5}, // two blocks per sequence
			BlocksPerSeq: 2,
			KNew:         kNew, VNew: vNew, CuSeqlensKNew: cu,
		}}
	out, lse, err := flashattn.Forward(q, k, v, opts)
	if err != nil {
		panic(err)
	}
	for b := range seqLens {
		seqLens[b] += cu[b+1] - cu[b] // the caller advances SeqLens
	}
	// Equal scores: row i of the chunk sees 5+i+1 keys, the decode row 21;
	// out is the mean of the values it sees (the new ones are 1).
	fmt.Printf("decode: lse %.4f = log 21, out %.4f = 1/21\n", lse[0], out.At(0, 0, 0, 0))
	fmt.Printf("chunk:  lse %.4f %.4f %.4f = log 6, 7, 8\n", lse[1], lse[2], lse[3])
	fmt.Println("SeqLens now", seqLens, "; v block 4 row 5 (sequence 1, position 5) holds", v.At(4, 5, 0, 0))
	// Output:
	// decode: lse 3.0445 = log 21, out 0.0476 = 1/21
	// chunk:  lse 1.7918 1.9459 2.0794 = log 6, 7, 8
	// SeqLens now [21 8 9] ; v block 4 row 5 (sequence 1, position 5) holds 1
}

// Block-sparse attention: a BigBird layout (local + global + random blocks)
// of 64 × 64 blocks; empty blocks are never computed, forward or backward.
func ExampleBigBird() {
	const N, H, D = 512, 2, 32
	q, k, v := flashattn.NewTensor(1, N, H, D), flashattn.NewTensor(1, N, H, D), flashattn.NewTensor(1, N, H, D)
	for i := range q.Data {
		q.Data[i], k.Data[i], v.Data[i] = float32(math.Sin(float64(i))), float32(math.Cos(float64(i))), float32(i%7)
	}
	mask, err := flashattn.BigBird(flashattn.BlockShape{Batch: 1, Heads: 1, SeqQ: N, SeqK: N, BlockQ: 64, BlockK: 64}, 1, 1, 1, 7)
	if err != nil {
		panic(err)
	}
	_, _, err = flashattn.Forward(q, k, v, &flashattn.Options{BlockMask: mask})
	fmt.Printf("density %.2f, error %v\n", mask.Density(), err)
	// Output:
	// density 0.59, error <nil>
}

// Document masking of packed sequences with a causal mask: tokens attend
// only within their own document.
func ExampleDocuments() {
	ids := []int32{0, 0, 0, 1, 1, 2, 2, 2} // three documents in one row of 8 tokens
	docs, err := flashattn.Documents(ids, ids, 8, 8)
	if err != nil {
		panic(err)
	}
	q := flashattn.NewTensor(1, 8, 1, 4)
	for i := range q.Data {
		q.Data[i] = 1
	}
	v := flashattn.NewTensor(1, 8, 1, 4)
	for i := range v.Data {
		v.Data[i] = float32(i / 4) // value row j holds j
	}
	out, _, _ := flashattn.Forward(q, q, v, &flashattn.Options{Causal: true, Mask: docs})
	for i := 0; i < 8; i++ {
		fmt.Printf("%.1f ", out.At(0, i, 0, 0)) // the mean of the visible values
	}
	fmt.Println()
	// Output:
	// 0.0 0.5 1.0 3.0 3.5 5.0 5.5 6.0
}

// A score modifier with its derivative: a tanh soft cap written by hand
// (Options.Softcap does the same built in).
func ExampleScoreFunc() {
	capped := flashattn.ScoreFunc(func(b, h, q, kv int, x float32) (float32, float32) {
		t := float32(math.Tanh(float64(x / 5)))
		return 5 * t, 1 - t*t
	})
	q, k, v := flashattn.NewTensor(1, 16, 1, 8), flashattn.NewTensor(1, 16, 1, 8), flashattn.NewTensor(1, 16, 1, 8)
	for i := range q.Data {
		q.Data[i], k.Data[i], v.Data[i] = float32(i%5), float32(i%3), float32(i%7)
	}
	a, _, _ := flashattn.Forward(q, k, v, &flashattn.Options{ScoreMod: capped})
	b, _, _ := flashattn.Forward(q, k, v, &flashattn.Options{Softcap: 5})
	fmt.Println(reference.MaxAbsDiff32vs64(a.Data, to64(b.Data)) < 1e-5)
	// Output:
	// true
}

// bfloat16 inputs: products in bfloat16 with float32 accumulation; the
// output has q's type.
func ExampleDenseOf() {
	x := make([]half.BF16, 1*32*2*16)
	for i := range x {
		x[i] = half.NewBF16(float32(i%9) / 9)
	}
	q := flashattn.DenseOf(x, 1, 32, 2, 16)
	out, lse, err := flashattn.Forward(q, q, q, &flashattn.Options{Causal: true})
	fmt.Println(out.DType(), len(lse), err)
	// Output:
	// bfloat16 64 <nil>
}

// A decoding loop: prefill a prompt into a KV cache, then generate one token
// at a time, appending each new key and value in place with rotary position
// embeddings (flash_attn_with_kvcache). The model's projections are stand-ins.
func ExampleKVCache_decodingLoop() {
	const maxLen, H, Hk, D = 64, 4, 2, 16
	kc, vc := flashattn.NewTensor(1, maxLen, Hk, D), flashattn.NewTensor(1, maxLen, Hk, D)
	rope := &flashattn.Rotary{Dim: D, Cos: make([]float32, maxLen*D/2), Sin: make([]float32, maxLen*D/2)}
	for p := 0; p < maxLen; p++ {
		for t := 0; t < D/2; t++ {
			th := float64(p) * math.Pow(10000, -2*float64(t)/D)
			rope.Cos[p*D/2+t], rope.Sin[p*D/2+t] = float32(math.Cos(th)), float32(math.Sin(th))
		}
	}
	project := func(n, heads, seed int) flashattn.Tensor { // stand-in for x·W
		t := flashattn.NewTensor(1, n, heads, D)
		for i := range t.Data {
			t.Data[i] = float32(math.Sin(float64(i*7 + seed)))
		}
		return t
	}
	cacheLen := int32(0)
	step := func(n int) flashattn.Tensor { // n new tokens: prefill, then 1
		opts := &flashattn.Options{Causal: true, KVCache: &flashattn.KVCache{
			SeqLens: []int32{cacheLen},
			KNew:    project(n, Hk, int(cacheLen)), VNew: project(n, Hk, 1000+int(cacheLen)),
			Rotary: rope,
		}}
		out, _, err := flashattn.Forward(project(n, H, 2000+int(cacheLen)), kc, vc, opts)
		if err != nil {
			panic(err)
		}
		cacheLen += int32(n)
		return out
	}
	step(10) // the prompt
	for range 5 {
		step(1) // one token at a time; the cache is read once per step
	}
	fmt.Println("tokens in the cache:", cacheLen)
	// Output:
	// tokens in the cache: 15
}
