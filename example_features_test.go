package flashattn_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/flashattn/flashattn"
)

// fill returns a tensor of the given shape holding a smooth pattern.
func fill(seed, b, s, h, d int) flashattn.Tensor {
	t := flashattn.NewTensor(b, s, h, d)
	for i := range t.Data {
		t.Data[i] = float32(math.Sin(float64(i*7+seed*131))) * 0.5
	}
	return t
}

// Learnable attention sinks (gpt-oss): one logit per head joins every
// row's softmax as a key whose value is zero, so LSE grows by the sink's
// share; BackwardGrads returns the sinks' gradient.
func ExampleOptions_sinks() {
	q, k, v := fill(1, 1, 8, 2, 16), fill(2, 1, 8, 2, 16), fill(3, 1, 8, 2, 16)
	_, plain, _ := flashattn.Forward(q, k, v, &flashattn.Options{Causal: true})
	opts := &flashattn.Options{Causal: true, Sinks: []float32{1.5, -2}}
	out, lse, err := flashattn.Forward(q, k, v, opts)
	if err != nil {
		panic(err)
	}
	// LSE = log(exp(LSE without the sink) + exp(sink)).
	want := math.Log(math.Exp(float64(plain[0])) + math.Exp(1.5))
	fmt.Printf("LSE %.5f, want %.5f\n", lse[0], want)

	dq, dk, dv := flashattn.NewTensor(1, 8, 2, 16), flashattn.NewTensor(1, 8, 2, 16), flashattn.NewTensor(1, 8, 2, 16)
	dsinks := make([]float32, 2)
	g := flashattn.Grads{DQ: dq, DK: dk, DV: dv, DSinks: dsinks}
	if err := flashattn.BackwardGrads(context.Background(), g, q, k, v, out, fill(4, 1, 8, 2, 16), lse, nil, opts); err != nil {
		panic(err)
	}
	fmt.Println("dSinks per head:", len(dsinks))
	// Output:
	// LSE 1.76090, want 1.76090
	// dSinks per head: 2
}

// Ring attention by hand: a causal sequence split into shards (standing in
// for machines) computes, per query shard, its parts over the key shards
// with Offsets, merges them with MergeStates, and runs each part's
// backward with the merged O and LSE, accumulating gradients. The result
// is the unsharded call's.
func Example_ringAttention() {
	const N, H, D = 96, 2, 16
	q, k, v, do := fill(1, 1, N, H, D), fill(2, 1, N, H, D), fill(3, 1, N, H, D), fill(4, 1, N, H, D)
	bounds := []int{0, 32, 64, N}
	part := func(t flashattn.Tensor, s int) flashattn.Tensor {
		return flashattn.Dense(t.Data[bounds[s]*H*D:bounds[s+1]*H*D], 1, bounds[s+1]-bounds[s], H, D)
	}
	opts := func(qs, ks int) *flashattn.Options {
		return &flashattn.Options{Causal: true, Offsets: &flashattn.Offsets{Query: bounds[qs], Key: bounds[ks]}}
	}
	dq, dk, dv := flashattn.NewTensor(1, N, H, D), flashattn.NewTensor(1, N, H, D), flashattn.NewTensor(1, N, H, D)
	var mu sync.Mutex // key shards' dK, dV are shared by the query shards
	var wg sync.WaitGroup
	outs := make([]flashattn.Tensor, 3)
	for qs := range 3 {
		wg.Add(1)
		go func() { // one "machine" per query shard
			defer wg.Done()
			var parts []flashattn.Tensor
			var lses [][]float32
			for ks := 0; ks <= qs; ks++ { // causal: later key shards see nothing
				o, l, _ := flashattn.Forward(part(q, qs), part(k, ks), part(v, ks), opts(qs, ks))
				parts, lses = append(parts, o), append(lses, l)
			}
			n := bounds[qs+1] - bounds[qs]
			outs[qs] = flashattn.NewTensor(1, n, H, D)
			lse := make([]float32, H*n)
			flashattn.MergeStates(outs[qs], lse, parts, lses)
			for ks := 0; ks <= qs; ks++ {
				g := flashattn.Grads{DQ: part(dq, qs), DK: part(dk, ks), DV: part(dv, ks), Accumulate: true}
				mu.Lock()
				flashattn.BackwardGrads(context.Background(), g, part(q, qs), part(k, ks), part(v, ks), outs[qs], part(do, qs), lse, nil, opts(qs, ks))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	whole, lse, _ := flashattn.Forward(q, k, v, &flashattn.Options{Causal: true})
	wdq, _, _, _ := flashattn.Backward(q, k, v, whole, do, lse, &flashattn.Options{Causal: true})
	var maxO, maxDQ float64
	for s := range 3 {
		for i, x := range outs[s].Data {
			maxO = max(maxO, math.Abs(float64(x-whole.Data[bounds[s]*H*D+i])))
		}
	}
	for i, x := range dq.Data {
		maxDQ = max(maxDQ, math.Abs(float64(x-wdq.Data[i])))
	}
	fmt.Println("sharded = unsharded:", maxO < 1e-5, maxDQ < 1e-5)
	// Output:
	// sharded = unsharded: true true
}

// DeepSeek-style absorbed MLA decoding: the cache stores one 576-wide
// latent per token, and V is a view of its first 512 columns — no copy.
// Appending a token's latent (KNew alone) appends its value too.
func ExampleKVCache_mla() {
	const heads, D, DV, maxLen = 16, 576, 512, 64
	latent := flashattn.NewTensorOf(flashattn.BFloat16, 1, maxLen, 1, D) // [batch, tokens, 1 KV head, 576]
	v := latent
	v.Dim, v.HeadStride, v.SeqStride, v.BatchStride = DV, D, D, maxLen*D // the first 512 columns
	q := fill(1, 1, 1, heads, D)
	opts := &flashattn.Options{KVCache: &flashattn.KVCache{SeqLens: []int32{10}, KNew: fill(2, 1, 1, 1, D)}}
	out, _, err := flashattn.Forward(q, latent, v, opts)
	fmt.Println(out.Heads, out.Dim, err)
	// Output:
	// 16 512 <nil>
}

// An additive bias tensor (ONNX/GoMLX attention bias) as a score modifier;
// −Inf hides a position.
func ExampleNewBias() {
	const N, H, D = 4, 1, 8
	bias := make([]float32, N*N) // [1, 1, N, N]: broadcast over batch and heads
	for i := range N {
		for j := range N {
			if j > i {
				bias[i*N+j] = float32(math.Inf(-1)) // causal, through the bias
			}
		}
	}
	b, err := flashattn.NewBias(bias, 1, 1, N, N)
	if err != nil {
		panic(err)
	}
	q := flashattn.NewTensor(1, N, H, D) // zero scores: the softmax is uniform over what is visible
	_, lse, _ := flashattn.Forward(q, q, q, &flashattn.Options{ScoreMod: b})
	fmt.Printf("%.4f %.4f\n", lse[3], math.Log(4))
	// Output:
	// 1.3863 1.3863
}

// A call whose context is cancelled returns ctx.Err(); the workers stop
// between tiles.
func ExampleForwardContext() {
	q := fill(1, 1, 512, 4, 64)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := flashattn.ForwardContext(ctx, q, q, q, nil)
	fmt.Println(errors.Is(err, context.Canceled))
	// Output:
	// true
}

// Shards travel as bytes: a tensor and its LSE encode, and decode on the
// other side without a copy where the bytes are aligned.
func ExampleDecodeTensor() {
	out, lse, _ := flashattn.Forward(fill(1, 1, 4, 2, 8), fill(2, 1, 4, 2, 8), fill(3, 1, 4, 2, 8), nil)
	msg, _ := out.AppendBinary(nil)
	msg = flashattn.AppendLSE(msg, lse)
	// ... sent and received ...
	o, rest, err := flashattn.DecodeTensor(msg)
	if err != nil {
		panic(err)
	}
	l, _, err := flashattn.DecodeLSE(rest)
	fmt.Println(o.Batch, o.Seq, o.Heads, o.Dim, len(l), o.At(0, 3, 1, 7) == out.At(0, 3, 1, 7), err)
	// Output:
	// 1 4 2 8 8 true <nil>
}

// ValidateShape checks a configuration before any tensor exists.
func ExampleValidateShape() {
	err := flashattn.ValidateShape(flashattn.Shape{Batch: 1, Heads: 12, KVHeads: 5, SeqQ: 128, SeqK: 128, Dim: 64}, nil)
	var ae *flashattn.ArgError
	fmt.Println(errors.As(err, &ae), ae.Arg)
	// Output:
	// true k
}
