package gpu

import (
	"errors"
	"unsafe"

	"github.com/flashattn/flashattn/gpu/internal/cuda"
)

// Buffer is a block of device memory. Free it with Free; Device.Close frees
// the buffers still allocated.
type Buffer struct {
	d   *Device
	ptr cuda.Ptr
	n   int
}

// Alloc allocates n bytes of device memory.
func (d *Device) Alloc(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, argErr("n", "Alloc(%d): size must be > 0", n)
	}
	if err := d.opened(); err != nil {
		return nil, err
	}
	d.bufMu.Lock()
	defer d.bufMu.Unlock()
	if d.bufs == nil {
		return nil, errors.New("gpu: device is closed")
	}
	p, err := d.ctx.Alloc(n)
	if err != nil {
		return nil, err
	}
	b := &Buffer{d: d, ptr: p, n: n}
	d.bufs[b] = true
	return b, nil
}

// Len returns the buffer's size in bytes (0 for a nil Buffer).
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	return b.n
}

// Free releases the memory; the buffer must not be used afterwards. Freeing
// a freed buffer, or one that Device.Close freed, does nothing.
func (b *Buffer) Free() error {
	if b == nil || b.d == nil { // nil, or not from Alloc: nothing to free
		return nil
	}
	d := b.d
	d.bufMu.Lock()
	defer d.bufMu.Unlock()
	if b.ptr == 0 {
		return nil
	}
	err := d.ctx.Free(b.ptr)
	b.ptr = 0
	delete(d.bufs, b)
	return err
}

// Elem is an element type that can be copied to and from device memory:
// uint16 for bf16/fp16 bits, float32, int32.
type Elem interface{ ~uint16 | ~float32 | ~int32 }

// CopyIn copies src to the start of b. It returns when the data is on the
// device, so that work on any stream may read it.
func CopyIn[T Elem](b *Buffer, src []T) error {
	n, err := span(b, "src", src)
	if err != nil || n == 0 {
		return err
	}
	c := b.d.ctx
	if err := c.CopyInAsync(b.ptr, unsafe.Pointer(&src[0]), n, 0); err != nil {
		return err
	}
	return c.SyncStream(0)
}

// CopyOut copies the start of b into dst. It orders itself after the
// default stream's work (Device.Forward and Device.Backward have finished
// when they return); after work queued on a Stream, call the stream's
// Synchronize first.
func CopyOut[T Elem](dst []T, b *Buffer) error {
	n, err := span(b, "dst", dst)
	if err != nil || n == 0 {
		return err
	}
	return b.d.ctx.CopyOut(unsafe.Pointer(&dst[0]), b.ptr, n)
}

// span returns the bytes of s, the host side (argument name) of a copy
// with b.
func span[T Elem](b *Buffer, name string, s []T) (int, error) {
	if b == nil || b.ptr == 0 {
		return 0, argErr("b", "copy with a nil or freed buffer")
	}
	var z T
	n := len(s) * int(unsafe.Sizeof(z))
	if n > b.n {
		return 0, argErr(name, "copy of %d bytes (%s) with a buffer of %d", n, name, b.n)
	}
	return n, nil
}

// Tensor is a dense tensor in device memory: [Batch, Seq, Heads, Dim]
// elements of DType, row-major, from the start of Buf (flash-attn's layout;
// packed [total, Heads, Dim] with Batch 1 for a variable-length batch).
type Tensor struct {
	Buf                    *Buffer
	DType                  DType
	Batch, Seq, Heads, Dim int
}

func (t Tensor) shape() shape4 { return shape4{t.Batch, t.Seq, t.Heads, t.Dim} }

// Len returns the number of elements.
func (t Tensor) Len() int { return t.Batch * t.Seq * t.Heads * t.Dim }

// check validates the shape, type and buffer size of t, argument name.
func (t Tensor) check(name string) error {
	if t.Buf == nil || t.Buf.ptr == 0 {
		return argErr(name, "%s has no buffer (nil or freed)", name)
	}
	if !t.DType.Valid() {
		return argErr(name, "%s has type %v; package gpu takes bfloat16 and float16 tensors", name, t.DType)
	}
	if t.Batch < 1 || t.Seq < 1 || t.Heads < 1 || t.Dim < 1 {
		return argErr(name, "%s has shape %v; every dimension must be ≥ 1", name, t.shape())
	}
	n := int64(t.Batch) * int64(t.Seq) * int64(t.Heads) * int64(t.Dim) * 2
	if n > int64(t.Buf.n) {
		return argErr(name, "%s of shape %v needs %d bytes, its buffer has %d", name, t.shape(), n, t.Buf.n)
	}
	return nil
}
