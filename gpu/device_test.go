package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// Device-level argument errors, on the simulator: every bad call returns a
// *flashattn.ArgError naming the argument and leaves the device usable.
func TestDeviceErrors(t *testing.T) {
	d := newSimDevice()
	defer d.Close()
	mk := func(dt DType, b, s, h, dim int) Tensor {
		x, err := d.NewTensor(dt, b, s, h, dim)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	q, k, v, o := mk(BF16, 1, 40, 2, 64), mk(BF16, 1, 50, 2, 64), mk(BF16, 1, 50, 2, 64), mk(BF16, 1, 40, 2, 64)
	lse, err := d.Alloc(4 * 2 * 40)
	if err != nil {
		t.Fatal(err)
	}
	small, _ := d.Alloc(16)
	other := newSimDevice()
	foreign, _ := other.NewTensor(BF16, 1, 40, 2, 64)
	foreignLSE, _ := other.Alloc(4 * 2 * 40)
	freed := mk(BF16, 1, 40, 2, 64)
	freed.Free()
	q256 := mk(BF16, 1, 40, 1, 256)
	k256 := mk(BF16, 1, 50, 1, 256)
	lse256, _ := d.Alloc(4 * 40)
	do, dq, dk, dv := mk(BF16, 1, 40, 2, 64), mk(BF16, 1, 40, 2, 64), mk(BF16, 1, 50, 2, 64), mk(BF16, 1, 50, 2, 64)
	o16 := mk(F16, 1, 40, 2, 64)
	x := flashattn.NewTensor(1, 40, 2, 64)
	xk := flashattn.NewTensor(1, 50, 2, 64)
	hostLSE := make([]float32, 2*40)
	noAlibi := &Options{Options: flashattn.Options{ALiBi: []float32{1, 2}}}
	fwdHostErr := func(_ flashattn.Tensor, _ []float32, err error) error { return err }
	cases := []struct {
		name string
		err  error
		arg  string
		want string
	}{
		{"out aliases q", d.Forward(q, k, v, q, lse, nil), "out", "shares its buffer with q"},
		{"lse too small", d.Forward(q, k, v, o, small, nil), "lse", "lse needs"},
		{"lse nil", d.Forward(q, k, v, o, nil, nil), "lse", "lse has no buffer"},
		{"out shape", d.Forward(q, k, v, k, lse, nil), "out", "out has shape"},
		{"out type", d.Forward(q, k, v, o16, lse, nil), "out", "want bfloat16"},
		{"freed input", d.Forward(freed, k, v, o, lse, nil), "q", "no buffer"},
		{"other device out", d.Forward(q, k, v, foreign, lse, nil), "out", "another device"},
		{"other device lse", d.Forward(q, k, v, o, foreignLSE, nil), "lse", "another device"},
		{"other device q", d.Forward(foreign, k, v, o, lse, nil), "q", "another device"},
		{"unsupported option", d.Forward(q, k, v, o, lse, noAlibi), "Options.ALiBi", "not supported by package gpu"},
		{"bad scale", d.Forward(q, k, v, o, lse, &Options{Options: flashattn.Options{Scale: -1}}), "Options.Scale", "Scale -1"},
		{"backward headdim 256", d.Backward(q256, k256, k256, q256, q256, lse256, q256, k256, k256, nil), "q", "64 and 128"},
		{"dk shape", d.Backward(q, k, v, o, do, lse, dq, q, dv, nil), "dk", "dk has shape"},
		{"dq aliases dout", d.Backward(q, k, v, o, do, lse, do, dk, dv, nil), "dq", "shares its buffer with dout"},
		{"dv aliases dk", d.Backward(q, k, v, o, do, lse, dq, dk, dk, nil), "dk", "shares its buffer with dv"},
		{"backward bad cu", d.Backward(q, k, v, o, do, lse, dq, dk, dv, &Options{Options: flashattn.Options{VarLen: &flashattn.VarLen{CuSeqlensQ: []int32{0, 39}, CuSeqlensK: []int32{0, 50}}}}), "Options.VarLen.CuSeqlensQ", "ends at 39"},
		{"copy too big", CopyIn(small, make([]float32, 5)), "src", "copy of 20 bytes"},
		{"copy out of freed", CopyOut(make([]float32, 1), freed.Buf), "b", "nil or freed"},
		{"upload length", q.Upload(make([]float32, 3)), "data", "Upload of 3"},
		{"upload untyped", Tensor{Buf: q.Buf, Batch: 1, Seq: 40, Heads: 2, Dim: 64}.Upload(make([]float32, 40*2*64)), "t", "Format(0)"},
		{"download untyped", func() error {
			_, err := (Tensor{Buf: q.Buf, Batch: 1, Seq: 1, Heads: 1, Dim: 1}).Download()
			return err
		}(), "t", "Format(0)"},
		{"forward untyped", d.Forward(q, k, Tensor{Buf: v.Buf, Batch: 1, Seq: 50, Heads: 2, Dim: 64}, o, lse, nil), "v", "Format(0)"},
		{"new tensor shape", func() error { _, err := d.NewTensor(BF16, 1, 0, 2, 64); return err }(), "shape", "≥ 1"},
		{"new tensor type", func() error { _, err := d.NewTensor(0, 1, 1, 2, 64); return err }(), "dt", "bfloat16 and float16"},
		{"alloc 0", func() error { _, err := d.Alloc(0); return err }(), "n", "Alloc(0)"},
		{"host dt", fwdHostErr(d.ForwardHost(7, x, xk, xk, nil)), "dt", "Format(7)"},
		{"host bf16 tensor", fwdHostErr(d.ForwardHost(BF16, flashattn.NewTensorOf(flashattn.BFloat16, 1, 40, 2, 64), xk, xk, nil)), "q", "float32"},
		{"host short v", fwdHostErr(d.ForwardHost(BF16, x, xk, flashattn.Dense(make([]float32, 10), 1, 50, 2, 64), nil)), "v", "needs"},
		{"host v shape", fwdHostErr(d.ForwardHost(BF16, x, xk, x, nil)), "v", "want k's"},
		{"host option", fwdHostErr(d.ForwardHost(BF16, x, xk, xk, &Options{Options: flashattn.Options{Dropout: 0.5}})), "Options.Dropout", "not supported"},
		{"host window", fwdHostErr(d.ForwardHost(BF16, x, xk, xk, &Options{Options: flashattn.Options{Window: &flashattn.Window{Left: -3}}})), "Options.Window", "Window"},
		{"host lse", hostErr3(d.BackwardHost(BF16, x, xk, xk, x, x, hostLSE[:5], nil)), "lse", "lse has 5 elements, want 80"},
		{"host dout shape", hostErr3(d.BackwardHost(BF16, x, xk, xk, x, xk, hostLSE, nil)), "dout", "want [1 40 2 64]"},
		{"host out nil", hostErr3(d.BackwardHost(BF16, x, xk, xk, flashattn.Tensor{Batch: 1, Seq: 40, Heads: 2, Dim: 64}, x, hostLSE, nil)), "out", "out is nil"},
		{"host backward 256", hostErr3(d.BackwardHost(BF16, flashattn.NewTensor(1, 4, 1, 256), flashattn.NewTensor(1, 4, 1, 256), flashattn.NewTensor(1, 4, 1, 256), flashattn.NewTensor(1, 4, 1, 256), flashattn.NewTensor(1, 4, 1, 256), make([]float32, 4), nil)), "q", "64 and 128"},
	}
	for _, c := range cases {
		var ae *flashattn.ArgError
		if !errors.As(c.err, &ae) || ae.Arg != c.arg || !strings.Contains(ae.Msg, c.want) {
			t.Errorf("%s: %v, want an *ArgError for %s containing %q", c.name, c.err, c.arg, c.want)
		}
	}
	// Still usable.
	if err := d.Forward(q, k, v, o, lse, &Options{Options: flashattn.Options{Causal: true}}); err != nil {
		t.Fatal(err)
	}
}

func hostErr3(_, _, _ flashattn.Tensor, err error) error { return err }

// The host functions validate everything before they allocate device
// memory: a bad call leaves no trace on the device.
func TestHostValidatesFirst(t *testing.T) {
	d := newSimDevice()
	defer d.Close()
	m := d.ctx.backend.(*sim).m
	x, xk := flashattn.NewTensor(1, 40, 2, 64), flashattn.NewTensor(1, 50, 2, 64)
	for _, err := range []error{
		func() error {
			_, _, err := d.ForwardHost(BF16, x, xk, xk, &Options{Options: flashattn.Options{Causal: true, Scale: -1}})
			return err
		}(),
		func() error {
			_, _, _, err := d.BackwardHost(F16, x, xk, xk, x, x, make([]float32, 3), nil)
			return err
		}(),
	} {
		if err == nil {
			t.Fatal("bad host call accepted")
		}
		if n := m.Allocations(); n != 0 {
			t.Errorf("%v: %d device allocations made", err, n)
		}
	}
}

// A device whose shared memory is too small for a kernel says so.
func TestSharedMemoryLimit(t *testing.T) {
	d := newSimDevice()
	d.info.MaxSharedPerBlock = 32 << 10
	x := flashattn.NewTensor(1, 8, 1, 128)
	_, _, err := d.ForwardHost(BF16, x, x, x, nil)
	if err == nil || !strings.Contains(err.Error(), "shared memory") {
		t.Fatalf("ForwardHost on a 32 KiB device: %v", err)
	}
}

// A strided host tensor (a view of a packed QKV buffer) gives the same
// result as its dense copy.
func TestForwardHostStrided(t *testing.T) {
	d := newSimDevice()
	const B, N, H, D = 1, 33, 2, 64
	data := make([]float32, B*N*3*H*D)
	for i := range data {
		data[i] = BF16.Round(float32(i%97)/50 - 1)
	}
	q, k, v := flashattn.PackedQKV(data, B, N, H, D)
	o1, l1, err := d.ForwardHost(BF16, q, k, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	dense := func(t flashattn.Tensor) flashattn.Tensor {
		g, err := gather(t, "x")
		if err != nil {
			panic(err)
		}
		return flashattn.Dense(g, B, N, H, D)
	}
	o2, l2, err := d.ForwardHost(BF16, dense(q), dense(k), dense(v), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range o1.Data {
		if o1.Data[i] != o2.Data[i] {
			t.Fatalf("O[%d]: strided %v, dense %v", i, o1.Data[i], o2.Data[i])
		}
	}
	for i := range l1 {
		if l1[i] != l2[i] {
			t.Fatalf("LSE[%d]: strided %v, dense %v", i, l1[i], l2[i])
		}
	}
}
