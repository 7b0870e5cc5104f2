package gpu_test

import (
	"errors"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu"
)

// TestHostTensorRules checks that the host functions refuse a bad host
// tensor with the *ArgError package flashattn's Forward gives for it (one
// set of tensor rules, flashattn's Tensor.Validate), before they touch the
// device: a zero Device, which has no memory, is enough.
func TestHostTensorRules(t *testing.T) {
	const n, h, d = 4, 2, 64
	data := make([]float32, n*h*d)
	good := flashattn.Dense(data, 1, n, h, d)
	for _, c := range []struct {
		name string
		q    flashattn.Tensor
	}{
		{"overlapping heads", flashattn.Tensor{Data: data, Batch: 1, Seq: n, Heads: h, Dim: d, HeadStride: d / 2}},
		{"negative stride", flashattn.Tensor{Data: data, Batch: 1, Seq: n, Heads: h, Dim: d, SeqStride: -h * d}},
		{"short data", flashattn.Dense(data[:n*h*d-1], 1, n, h, d)},
		{"nil", flashattn.Tensor{Batch: 1, Seq: n, Heads: h, Dim: d}},
	} {
		_, _, cpu := flashattn.Forward(c.q, good, good, nil)
		var want *flashattn.ArgError
		if !errors.As(cpu, &want) {
			t.Fatalf("%s: flashattn.Forward gave %v, want an *ArgError", c.name, cpu)
		}
		_, _, err := new(gpu.Device).ForwardHost(gpu.BF16, c.q, good, good, nil)
		var got *flashattn.ArgError
		if !errors.As(err, &got) || *got != *want {
			t.Errorf("%s: ForwardHost gave %v, want flashattn's %v", c.name, err, cpu)
		}
	}
}
