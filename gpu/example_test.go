package gpu_test

import (
	"errors"
	"fmt"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu"
)

// The README's example: host tensors in and out, the library's options plus
// Deterministic, and a bad argument reported as a *flashattn.ArgError.
// (Compiled, not run: it needs a GPU.)
func ExampleDevice_ForwardHost() {
	d, err := gpu.Open(0)
	if errors.Is(err, gpu.ErrNoDevice) {
		fmt.Println("no GPU:", err)
		return
	}
	if err != nil {
		panic(err)
	}
	defer d.Close()
	q := flashattn.NewTensor(1, 128, 8, 64)
	k := flashattn.NewTensor(1, 128, 2, 64)
	v := flashattn.NewTensor(1, 128, 2, 64)
	dout := flashattn.NewTensor(1, 128, 8, 64)
	opts := &gpu.Options{Options: flashattn.Options{Causal: true}, Deterministic: true}
	out, lse, err := d.ForwardHost(gpu.BF16, q, k, v, opts)
	if err != nil {
		panic(err)
	}
	dq, dk, dv, err := d.BackwardHost(gpu.BF16, q, k, v, out, dout, lse, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println(dq.Heads, dk.Heads, dv.Heads)

	opts.ALiBi = []float32{0.5}
	_, _, err = d.ForwardHost(gpu.BF16, q, k, v, opts)
	var ae *flashattn.ArgError
	if errors.As(err, &ae) {
		fmt.Println(ae.Arg) // Options.ALiBi
	}
}

// ValidateShape checks a configuration without tensors or a device.
func ExampleValidateShape() {
	s := flashattn.Shape{Batch: 2, Heads: 8, KVHeads: 2, SeqQ: 512, SeqK: 512, Dim: 96}
	err := gpu.ValidateShape(s, &gpu.Options{Options: flashattn.Options{Causal: true}})
	var ae *flashattn.ArgError
	if errors.As(err, &ae) {
		fmt.Printf("%s: %s\n", ae.Arg, ae.Msg)
	}
	// Output: q: head dim 96 is not supported by package gpu (64, 128 or 256)
}
