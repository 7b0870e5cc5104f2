package gpu

import (
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// Device-level argument errors, on the simulator: every bad call returns an
// error naming the problem and leaves the device usable.
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
	freed := mk(BF16, 1, 40, 2, 64)
	freed.Free()
	q256 := mk(BF16, 1, 40, 1, 256)
	k256 := mk(BF16, 1, 50, 1, 256)
	lse256, _ := d.Alloc(4 * 40)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"out aliases q", d.Forward(q, k, v, q, lse, nil), "shares its buffer"},
		{"lse too small", d.Forward(q, k, v, o, small, nil), "lse needs"},
		{"lse nil", d.Forward(q, k, v, o, nil, nil), "lse has no buffer"},
		{"out shape", d.Forward(q, k, v, k, lse, nil), "out is"},
		{"freed input", d.Forward(freed, k, v, o, lse, nil), "no buffer"},
		{"other device", d.Forward(q, k, v, foreign, lse, nil), "another device"},
		{"backward headdim 256", d.Backward(q256, k256, k256, q256, q256, lse256, q256, k256, k256, nil), "64 and 128"},
		{"dk shape", d.Backward(q, k, v, o, o, lse, mk(BF16, 1, 40, 2, 64), q, mk(BF16, 1, 50, 2, 64), nil), "dk is"},
		{"copy too big", CopyIn(small, make([]float32, 5)), "copy of 20 bytes"},
		{"upload length", q.Upload(make([]float32, 3)), "Upload of 3"},
	}
	if _, err := d.NewTensor(BF16, 1, 0, 2, 64); err == nil {
		t.Error("NewTensor with a zero dimension")
	}
	if _, err := d.Alloc(0); err == nil {
		t.Error("Alloc(0)")
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	// Still usable.
	if err := d.Forward(q, k, v, o, lse, &Options{Causal: true}); err != nil {
		t.Fatal(err)
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
