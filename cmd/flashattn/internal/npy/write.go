package npy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/flashattn/flashattn/half"
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
	descr, n, kinds := dtypeF32, len(a.F32), 0
	for _, k := range []struct {
		set   bool
		descr string
		n     int
	}{{a.F32 != nil, dtypeF32, len(a.F32)}, {a.F16 != nil, dtypeF16, len(a.F16)}, {a.I32 != nil, dtypeI32, len(a.I32)}, {a.U8 != nil, dtypeU8, len(a.U8)}} {
		if k.set {
			descr, n, kinds = k.descr, k.n, kinds+1
		}
	}
	if kinds > 1 {
		return "", errors.New("array has data of more than one kind (F32, F16, I32, U8)")
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
	n := len(a.F32) + len(a.F16) + len(a.I32)
	if _, err := w.Write(encodeHeader(descr, a.Shape)); err != nil {
		return err
	}
	if a.U8 != nil {
		for done := 0; done < len(a.U8); done += 64 << 10 {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if _, err := w.Write(a.U8[done:min(len(a.U8), done+64<<10)]); err != nil {
				return err
			}
		}
		return nil
	}
	var buf [64 << 10]byte
	elem := elemSize(descr)
	for done := 0; done < n; {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		chunk := min(n-done, len(buf)/elem)
		switch {
		case a.F16 != nil:
			for t := 0; t < chunk; t++ {
				binary.LittleEndian.PutUint16(buf[2*t:], uint16(a.F16[done+t]))
			}
		case a.I32 != nil:
			for t := 0; t < chunk; t++ {
				binary.LittleEndian.PutUint32(buf[4*t:], uint32(a.I32[done+t]))
			}
		default:
			for t := 0; t < chunk; t++ {
				binary.LittleEndian.PutUint32(buf[4*t:], math.Float32bits(a.F32[done+t]))
			}
		}
		if _, err := w.Write(buf[:elem*chunk]); err != nil {
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

// WriteFloat16 writes data with the given shape to path as a '<f2' array
// (the elements bit for bit), atomically like WriteFloat32.
func WriteFloat16(path string, data []half.F16, shape []int) error {
	if data == nil {
		data = []half.F16{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, F16: data}})
}

// WriteInt32 writes data with the given shape to path as a '<i4' array,
// atomically like WriteFloat32.
func WriteInt32(path string, data []int32, shape []int) error {
	if data == nil {
		data = []int32{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, I32: data}})
}

// WriteUint8 writes data with the given shape to path as a '|u1' array,
// atomically like WriteFloat32.
func WriteUint8(path string, data []uint8, shape []int) error {
	if data == nil {
		data = []uint8{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, U8: data}})
}

// WriteFiles writes several arrays, keyed by path, all or nothing; it is
// WriteAll without a context or hook.
func WriteFiles(files map[string]Array) error {
	return WriteAll(context.Background(), files, WriteOptions{})
}
