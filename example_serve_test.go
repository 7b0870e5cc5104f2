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
