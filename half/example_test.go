package half_test

import (
	"fmt"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/half"
)

// bfloat16 stands for an engine's own bfloat16 type (GoMLX's
// bfloat16.BFloat16 is a uint16 like it).
type bfloat16 uint16

// An engine's bfloat16 data used as a Tensor without a copy and without
// package unsafe: Encode fills it, Cast shares it with the Tensor and the
// output back with the engine.
func ExampleCast() {
	const B, N, H, D = 1, 8, 2, 16
	engine := make([]bfloat16, B*N*H*D)
	x := make([]float32, len(engine))
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	half.Encode(half.BFloat16, engine, x)
	q := flashattn.DenseOf(half.Cast[half.BF16](engine), B, N, H, D)
	out, _, err := flashattn.Forward(q, q, q, &flashattn.Options{Causal: true})
	if err != nil {
		panic(err)
	}
	result := half.Cast[bfloat16](out.BF16) // the engine's type, sharing out's memory
	row := make([]float32, D)
	half.Decode(half.BFloat16, row, result[:D])
	fmt.Println(len(result), row[:4]) // row 0 of causal attention is V row 0
	// Output:
	// 256 [0 0.14257812 0.28515625 0.42773438]
}
