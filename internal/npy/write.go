package npy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

func checkShape(shape []int, n int) error {
	p := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && p > maxElems/d {
			return fmt.Errorf("shape %v is too large", shape)
		}
		p *= d
	}
	if p != n {
		return fmt.Errorf("shape %v has %d elements, data has %d", shape, p, n)
	}
	return nil
}

// checkArray checks that a can be encoded and returns its dtype.
func checkArray(a Array) (string, error) {
	descr, n := dtypeF32, len(a.F32)
	if a.I32 != nil {
		if a.F32 != nil {
			return "", errors.New("array has both F32 and I32 data")
		}
		descr, n = dtypeI32, len(a.I32)
	}
	return descr, checkShape(a.Shape, n)
}

// encode writes a whole .npy file for a to w.
func encode(w io.Writer, a Array) error {
	return encodeContext(context.Background(), w, a)
}

// encodeContext is encode that stops with the context's cause when ctx is
// canceled (checked every 64 KiB).
func encodeContext(ctx context.Context, w io.Writer, a Array) error {
	descr, err := checkArray(a)
	if err != nil {
		return err
	}
	n := len(a.F32) + len(a.I32)
	if _, err := w.Write(encodeHeader(descr, a.Shape)); err != nil {
		return err
	}
	var buf [64 << 10]byte
	for done := 0; done < n; {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		chunk := min(n-done, len(buf)/4)
		for t := 0; t < chunk; t++ {
			var u uint32
			if a.I32 != nil {
				u = uint32(a.I32[done+t])
			} else {
				u = math.Float32bits(a.F32[done+t])
			}
			binary.LittleEndian.PutUint32(buf[4*t:], u)
		}
		if _, err := w.Write(buf[:4*chunk]); err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

// newBufWriter buffers writes to a temporary file.
func newBufWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 64<<10) }

// WriteFloat32 writes data with the given shape (product(shape) must equal
// len(data); an empty shape is a scalar) to path as a '<f4' array. The write
// is atomic: path is either left untouched or replaced by the complete file.
func WriteFloat32(path string, data []float32, shape []int) error {
	if data == nil {
		data = []float32{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, F32: data}})
}

// WriteInt32 writes data with the given shape to path as a '<i4' array,
// atomically like WriteFloat32.
func WriteInt32(path string, data []int32, shape []int) error {
	if data == nil {
		data = []int32{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, I32: data}})
}

// WriteFiles writes several arrays, keyed by path, all or nothing; it is
// WriteAll without a context or hook.
func WriteFiles(files map[string]Array) error {
	return WriteAll(context.Background(), files, WriteOptions{})
}
