package gpu

import (
	"math"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/half"
)

// NewTensor allocates a dense device tensor of the given type and shape.
func (d *Device) NewTensor(dt DType, batch, seq, heads, dim int) (Tensor, error) {
	t := Tensor{DType: dt, Batch: batch, Seq: seq, Heads: heads, Dim: dim}
	if !dt.Valid() {
		return t, argErr("dt", "NewTensor of type %v; package gpu takes bfloat16 and float16", dt)
	}
	if batch < 1 || seq < 1 || heads < 1 || dim < 1 {
		return t, argErr("shape", "NewTensor shape %v: every dimension must be ≥ 1", t.shape())
	}
	n := int64(batch) * int64(seq) * int64(heads) * int64(dim) * 2
	if n > math.MaxInt {
		return t, argErr("shape", "NewTensor shape %v is too large", t.shape())
	}
	b, err := d.Alloc(int(n))
	t.Buf = b
	return t, err
}

// Free frees the tensor's buffer.
func (t Tensor) Free() error { return t.Buf.Free() }

// Upload rounds data (t.Len() float32 values, row-major) to t's type and
// copies it into t.
func (t Tensor) Upload(data []float32) error {
	if !t.DType.Valid() {
		return argErr("t", "Upload into a tensor of type %v; package gpu takes bfloat16 and float16", t.DType)
	}
	if len(data) != t.Len() {
		return argErr("data", "Upload of %d values into a tensor of %d", len(data), t.Len())
	}
	if t.DType == F16 {
		return upload(t.Buf, data, half.EncodeF16)
	}
	return upload(t.Buf, data, half.EncodeBF16)
}

// upload converts data with encode and copies the bits to the start of b.
func upload[T half.BF16 | half.F16](b *Buffer, data []float32, encode func([]T, []float32)) error {
	h := make([]T, len(data))
	encode(h, data)
	return CopyIn(b, h)
}

// Download copies t to the host as float32 values.
func (t Tensor) Download() ([]float32, error) {
	if !t.DType.Valid() {
		return nil, argErr("t", "Download of a tensor of type %v; package gpu takes bfloat16 and float16", t.DType)
	}
	if t.DType == F16 {
		return download(t.Buf, t.Len(), half.DecodeF16)
	}
	return download(t.Buf, t.Len(), half.DecodeBF16)
}

// download copies n 16-bit values from the start of b and converts them
// with decode.
func download[T half.BF16 | half.F16](b *Buffer, n int, decode func([]float32, []T)) ([]float32, error) {
	h := make([]T, n)
	if err := CopyOut(h, b); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	decode(out, h)
	return out, nil
}

// ForwardHost is Forward on host tensors: q, k and v (float32, any
// strides) are rounded to dt on the host and copied to the device; out is
// returned dense with the values of the dt result, and lse as float32
// ([batch, heads, seq_q], or [heads, total_q] with VarLen). The arguments
// are validated, as Forward validates them, before anything is allocated.
func (d *Device) ForwardHost(dt DType, q, k, v flashattn.Tensor, opts *Options) (out flashattn.Tensor, lse []float32, err error) {
	in, p, err := hostInputs(dt, opts, q, k, v)
	if err != nil {
		return out, nil, err
	}
	var ts tensors
	defer ts.free()
	dev, err := ts.upload(d, dt, in)
	if err != nil {
		return out, nil, err
	}
	do, err := ts.alloc(d, dt, q)
	if err != nil {
		return out, nil, err
	}
	lb, err := d.Alloc(4 * p.lseLen())
	if err != nil {
		return out, nil, err
	}
	ts.bufs = append(ts.bufs, lb)
	if err := d.Forward(dev[0], dev[1], dev[2], do, lb, opts); err != nil {
		return out, nil, err
	}
	o, err := do.Download()
	if err != nil {
		return out, nil, err
	}
	lse = make([]float32, p.lseLen())
	if err := CopyOut(lse, lb); err != nil {
		return out, nil, err
	}
	return flashattn.Dense(o, q.Batch, q.Seq, q.Heads, q.Dim), lse, nil
}

// BackwardHost is Backward on host tensors (float32, rounded to dt on the
// host); it returns dq, dk and dv dense, with the values of the dt
// results. The arguments are validated, as Backward validates them, before
// anything is allocated.
func (d *Device) BackwardHost(dt DType, q, k, v, out, dout flashattn.Tensor, lse []float32, opts *Options) (dq, dk, dv flashattn.Tensor, err error) {
	in, p, err := hostInputs(dt, opts, q, k, v, out, dout)
	if err != nil {
		return dq, dk, dv, err
	}
	if err := p.checkBackward(); err != nil {
		return dq, dk, dv, err
	}
	if err := p.likeShape(in[3].shape, "out", false); err != nil {
		return dq, dk, dv, err
	}
	if err := p.likeShape(in[4].shape, "dout", false); err != nil {
		return dq, dk, dv, err
	}
	if len(lse) != p.lseLen() {
		return dq, dk, dv, argErr("lse", "lse has %d elements, want %d", len(lse), p.lseLen())
	}
	var ts tensors
	defer ts.free()
	dev, err := ts.upload(d, dt, in)
	if err != nil {
		return dq, dk, dv, err
	}
	lb, err := d.Alloc(4 * len(lse))
	if err != nil {
		return dq, dk, dv, err
	}
	ts.bufs = append(ts.bufs, lb)
	if err := CopyIn(lb, lse); err != nil {
		return dq, dk, dv, err
	}
	var grads [3]Tensor
	for i, like := range []flashattn.Tensor{q, k, v} {
		if grads[i], err = ts.alloc(d, dt, like); err != nil {
			return dq, dk, dv, err
		}
	}
	if err := d.Backward(dev[0], dev[1], dev[2], dev[3], dev[4], lb, grads[0], grads[1], grads[2], opts); err != nil {
		return dq, dk, dv, err
	}
	var res [3]flashattn.Tensor
	for i, like := range []flashattn.Tensor{q, k, v} {
		x, err := grads[i].Download()
		if err != nil {
			return dq, dk, dv, err
		}
		res[i] = flashattn.Dense(x, like.Batch, like.Seq, like.Heads, like.Dim)
	}
	return res[0], res[1], res[2], nil
}

// hostInput is a host tensor argument, gathered dense.
type hostInput struct {
	data  []float32
	shape shape4
}

// hostNames are the names of the host functions' tensor arguments, in order.
var hostNames = [...]string{"q", "k", "v", "out", "dout"}

// hostInputs checks dt and the host tensors (q, k, v, then out and dout if
// given), gathers them, and validates q, k and v with the options as the
// device call will.
func hostInputs(dt DType, opts *Options, ts ...flashattn.Tensor) ([]hostInput, *problem, error) {
	if !dt.Valid() {
		return nil, nil, argErr("dt", "dt is %v; package gpu computes in bfloat16 or float16", dt)
	}
	in := make([]hostInput, len(ts))
	for i, t := range ts {
		data, err := gather(t, hostNames[i])
		if err != nil {
			return nil, nil, err
		}
		in[i] = hostInput{data, shape4{t.Batch, t.Seq, t.Heads, t.Dim}}
	}
	p, err := checkQKV(dt, in[0].shape, in[1].shape, in[2].shape, opts)
	if err != nil {
		return nil, nil, err
	}
	return in, p, nil
}

// tensors tracks the device buffers of a host call.
type tensors struct{ bufs []*Buffer }

func (ts *tensors) free() {
	for _, b := range ts.bufs {
		b.Free()
	}
}

// alloc allocates a device tensor shaped like t.
func (ts *tensors) alloc(d *Device, dt DType, t flashattn.Tensor) (Tensor, error) {
	x, err := d.NewTensor(dt, t.Batch, t.Seq, t.Heads, t.Dim)
	if x.Buf != nil {
		ts.bufs = append(ts.bufs, x.Buf)
	}
	return x, err
}

// upload copies the gathered inputs to new device tensors of type dt.
func (ts *tensors) upload(d *Device, dt DType, in []hostInput) ([]Tensor, error) {
	dev := make([]Tensor, len(in))
	for i, x := range in {
		s := x.shape
		t, err := d.NewTensor(dt, s[0], s[1], s[2], s[3])
		if t.Buf != nil {
			ts.bufs = append(ts.bufs, t.Buf)
		}
		if err != nil {
			return nil, err
		}
		if err := t.Upload(x.data); err != nil {
			return nil, err
		}
		dev[i] = t
	}
	return dev, nil
}

// gather returns t's elements in dense row-major order, or an error if t is
// not a float32 tensor, if flashattn's Tensor.Validate refuses it, or if it
// is too large for the host functions.
func gather(t flashattn.Tensor, name string) ([]float32, error) {
	if dt := t.DType(); dt != flashattn.Float32 {
		return nil, argErr(name, "%s is %v; the host functions of package gpu take float32 tensors", name, dt)
	}
	if err := t.Validate(name); err != nil {
		return nil, err
	}
	if int64(t.Batch)*int64(t.Seq)*int64(t.Heads)*int64(t.Dim) > math.MaxInt32*4 {
		return nil, argErr(name, "%s of shape [%d %d %d %d] is too large for package gpu's host functions", name, t.Batch, t.Seq, t.Heads, t.Dim)
	}
	dense := flashattn.NewTensor(t.Batch, t.Seq, t.Heads, t.Dim)
	if err := flashattn.Convert(dense, t); err != nil {
		return nil, err
	}
	return dense.Data, nil
}
