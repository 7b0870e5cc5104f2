package flashattn_test

import (
	"fmt"

	"github.com/flashattn/flashattn"
)

// float64 data (gonum's mat.Dense.RawMatrix().Data, say) converted for a
// Tensor and the output converted back.
func ExampleFloat64To32() {
	const B, N, H, D = 1, 4, 1, 8
	x := make([]float64, B*N*H*D) // the caller's float64 values
	for i := range x {
		x[i] = float64(i%5) / 4
	}
	q := flashattn.NewTensor(B, N, H, D)
	flashattn.Float64To32(q.Data, x)
	out, _, err := flashattn.Forward(q, q, q, &flashattn.Options{Causal: true})
	if err != nil {
		panic(err)
	}
	y := make([]float64, len(out.Data))
	n := flashattn.Float32To64(y, out.Data)
	fmt.Println(n, y[:4]) // row 0 of causal attention is V row 0
	// Output:
	// 32 [0 0.25 0.5 0.75]
}

// A server reserves the memory of its largest request before it takes
// any, so that its first request is not slower than the next.
func ExampleReserve() {
	const maxBatch, maxKeys, H, Hk, D = 8, 512, 8, 2, 64
	q := flashattn.NewTensor(maxBatch, 1, H, D)
	k, v := flashattn.NewTensor(maxBatch, maxKeys, Hk, D), flashattn.NewTensor(maxBatch, maxKeys, Hk, D)
	opts := &flashattn.Options{Workers: 2}
	if err := flashattn.Reserve(q, k, v, opts); err != nil {
		panic(err)
	}
	out := flashattn.NewTensor(maxBatch, 1, H, D)
	fmt.Println(flashattn.ForwardInto(out, nil, q, k, v, opts)) // allocates nothing
	// Output:
	// <nil>
}

// A training step's memory reserved ahead: Reserve for the forward,
// ReserveBackward for the backward, then the step's ForwardInto and
// BackwardInto allocate nothing.
func ExampleReserveBackward() {
	const B, S, H, Hk, D = 2, 256, 8, 2, 64
	q := flashattn.NewTensor(B, S, H, D)
	k, v := flashattn.NewTensor(B, S, Hk, D), flashattn.NewTensor(B, S, Hk, D)
	opts := &flashattn.Options{Causal: true, Workers: 2}
	if err := flashattn.Reserve(q, k, v, opts); err != nil {
		panic(err)
	}
	if err := flashattn.ReserveBackward(q, k, v, opts); err != nil {
		panic(err)
	}
	out, lse := flashattn.NewTensor(B, S, H, D), make([]float32, B*H*S)
	dout := flashattn.NewTensor(B, S, H, D) // the loss's gradient
	dq, dk, dv := flashattn.NewTensor(B, S, H, D), flashattn.NewTensor(B, S, Hk, D), flashattn.NewTensor(B, S, Hk, D)
	fmt.Println(flashattn.ForwardInto(out, lse, q, k, v, opts))
	fmt.Println(flashattn.BackwardInto(dq, dk, dv, q, k, v, out, dout, lse, opts))
	// Output:
	// <nil>
	// <nil>
}

// A padded dense batch: two sequences of 3 and 5 tokens stored
// [2, 5, heads, dim], the first padded with 2 positions. KeyPadding hides
// the padding keys; the padded query rows' outputs are ignored.
func ExampleKeyPadding() {
	const B, S, H, D = 2, 5, 2, 8
	lens := []int{3, 5}
	q, k, v := flashattn.NewTensor(B, S, H, D), flashattn.NewTensor(B, S, H, D), flashattn.NewTensor(B, S, H, D)
	for i := range v.Data {
		q.Data[i] = float32(i%7) / 7
		k.Data[i] = float32(i%5) / 5
		v.Data[i] = float32(i / (S * H * D)) // 0 in sequence 0, 1 in sequence 1
	}
	for i := 3 * H * D; i < S*H*D; i++ {
		v.Data[i] = 1000 // sequence 0's padding: must not be seen
	}
	out, _, err := flashattn.Forward(q, k, v, &flashattn.Options{Mask: flashattn.KeyPadding(lens...)})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%.4g %.4g\n", out.At(0, 2, 0, 0), out.At(1, 4, 1, 7))
	// Output:
	// 0 1
}
