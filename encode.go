package flashattn

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/flashattn/flashattn/half"
)

// encode.go encodes tensors and LSE slices to bytes and back, so that a
// transport (a gRPC stream, a raw TCP connection) can carry the shards of
// sharded attention. The formats are in the doc comments of AppendBinary
// (tensors) and AppendLSE, where go doc shows them.

const (
	tensorMagic = "FAT1"
	lseMagic    = "FAL1"
	tensorHead  = 40
	lseHead     = 16
)

// AppendBinary appends the encoding of t (its logical shape, densely) to b
// and returns the extended slice. It implements encoding.BinaryAppender.
// DecodeTensor and UnmarshalBinary read it back; the README has a numpy
// decoder. The format, little-endian throughout, is a 40-byte header
// followed by the elements:
//
//	bytes 0-3    "FAT1"
//	byte  4      the element type, t.DType(): 0 float32, 1 bfloat16,
//	             2 float16, 3 q8_0, 4 q4_0
//	bytes 5-7    zero (reserved)
//	bytes 8-39   batch, seq, heads, dim: four uint64, each ≥ 1
//	bytes 40-    the batch·seq·heads·dim elements in row-major order
//	             (dim fastest): float32 as their IEEE 754 bits (4 bytes),
//	             bfloat16 and float16 as their bits (2 bytes), q8_0 and
//	             q4_0 as llama.cpp's blocks of 32 values (34 and 18 bytes:
//	             a float16 scale, then 32 int8 or 16 bytes of 4-bit codes)
//
// The header's size is a multiple of 8, so elements that follow an aligned
// header are aligned (and DecodeTensor can alias them).
func (t Tensor) AppendBinary(b []byte) ([]byte, error) {
	v, err := t.check("t", false, -1, -1, -1, -1)
	if err != nil {
		return b, err
	}
	b = append(b, tensorMagic...)
	b = append(b, byte(v.dt), 0, 0, 0)
	for _, x := range v.shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	B, S, H, D := v.shape[0], v.shape[1], v.shape[2], v.shape[3]
	for bi := 0; bi < B; bi++ {
		for s := 0; s < S; s++ {
			for h := 0; h < H; h++ {
				o := v.off(bi, s, h)
				switch v.dt {
				case Float32:
					for _, x := range v.data[o : o+D] {
						b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
					}
				case BFloat16, Float16:
					for _, x := range v.h[o : o+D] {
						b = binary.LittleEndian.AppendUint16(b, x)
					}
				case Q8_0, Q4_0:
					b = append(b, v.q[quantBytes(v.dt, o):quantBytes(v.dt, o+D)]...)
				}
			}
		}
	}
	return b, nil
}

// MarshalBinary returns the encoding of t. It implements
// encoding.BinaryMarshaler.
func (t Tensor) MarshalBinary() ([]byte, error) { return t.AppendBinary(nil) }

// UnmarshalBinary sets t to a dense tensor holding a copy of the encoded
// tensor in data (which must hold exactly one). It implements
// encoding.BinaryUnmarshaler; DecodeTensor decodes without copying where it
// can.
func (t *Tensor) UnmarshalBinary(data []byte) error {
	d, rest, err := DecodeTensor(data)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return argErr("data", "%d bytes after the tensor", len(rest))
	}
	c := NewTensorOf(d.DType(), d.Batch, d.Seq, d.Heads, d.Dim)
	copy(c.Data, d.Data)
	copy(c.bits(), d.bits())
	copy(c.Q8, d.Q8)
	copy(c.Q4, d.Q4)
	*t = c
	return nil
}

// DecodeTensor decodes the tensor at the start of data (in the format of
// AppendBinary) and returns it with the bytes that follow. On a little-endian machine, when the elements in
// data are aligned for their type, the tensor's slice is data itself (no
// copy: it changes when data does); otherwise the elements are copied.
func DecodeTensor(data []byte) (t Tensor, rest []byte, err error) {
	if !hasHeader(data, tensorMagic, tensorHead, 1) {
		return Tensor{}, data, argErr("data", "not an encoded tensor (want the %q header)", tensorMagic)
	}
	dt := DType(data[4])
	var shape [4]int
	n := 1
	for i := range shape {
		x := binary.LittleEndian.Uint64(data[8+8*i:])
		if x < 1 || x > math.MaxInt32 {
			return Tensor{}, data, argErr("data", "encoded tensor dimension %d is %d", i, x)
		}
		shape[i] = int(x)
		var ok bool
		if n, ok = mulAdd(n, shape[i], 0); !ok {
			return Tensor{}, data, argErr("data", "encoded tensor shape %v overflows int", shape)
		}
	}
	body := data[tensorHead:]
	var size int
	switch dt {
	case Float32:
		if n > len(body)/4 {
			return Tensor{}, data, argErr("data", "encoded tensor %v needs %d values, has bytes for %d", shape, n, len(body)/4)
		}
		size = 4 * n
	case BFloat16, Float16:
		if n > len(body)/2 {
			return Tensor{}, data, argErr("data", "encoded tensor %v needs %d values, has bytes for %d", shape, n, len(body)/2)
		}
		size = 2 * n
	case Q8_0, Q4_0:
		if shape[3]%32 != 0 {
			return Tensor{}, data, argErr("data", "encoded %v tensor has head dim %d, not a multiple of 32", dt, shape[3])
		}
		bb := quantBytes(dt, 32)
		if n/32 > len(body)/bb {
			return Tensor{}, data, argErr("data", "encoded tensor %v needs %d %v blocks, has bytes for %d", shape, n/32, dt, len(body)/bb)
		}
		size = quantBytes(dt, n)
	default:
		return Tensor{}, data, argErr("data", "encoded tensor has element type %d", data[4])
	}
	body, rest = body[:size:size], body[size:]
	t = Tensor{Batch: shape[0], Seq: shape[1], Heads: shape[2], Dim: shape[3]}
	switch dt {
	case Float32:
		t.Data = float32s(body, n)
	case BFloat16:
		t.BF16 = halves[half.BF16](body, n)
	case Float16:
		t.F16 = halves[half.F16](body, n)
	case Q8_0:
		t.Q8 = body
	case Q4_0:
		t.Q4 = body
	}
	return t, rest, nil
}

// AppendLSE appends the encoding of lse to b and returns the extended
// slice; DecodeLSE reads it back. The format, little-endian, is a 16-byte
// header followed by the values:
//
//	bytes 0-3    "FAL1"
//	bytes 4-7    zero (reserved)
//	bytes 8-15   the count n as a uint64
//	bytes 16-    n float32s as their IEEE 754 bits (4 bytes each)
func AppendLSE(b []byte, lse []float32) []byte {
	b = append(b, lseMagic...)
	b = append(b, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(lse)))
	for _, x := range lse {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// DecodeLSE decodes the LSE slice at the start of data and returns it with
// the bytes that follow; like DecodeTensor it aliases data where it can.
func DecodeLSE(data []byte) (lse []float32, rest []byte, err error) {
	if !hasHeader(data, lseMagic, lseHead, 0) {
		return nil, data, argErr("data", "not an encoded LSE (want the %q header)", lseMagic)
	}
	n := binary.LittleEndian.Uint64(data[8:])
	if n > uint64(len(data)-lseHead)/4 {
		// 4·n may overflow: say it in values.
		return nil, data, argErr("data", "encoded LSE needs %d values, has bytes for %d", n, (len(data)-lseHead)/4)
	}
	body := data[lseHead : lseHead+4*int(n)]
	return float32s(body, int(n)), data[lseHead+4*int(n):], nil
}

// hasHeader reports whether data starts with a header of head bytes: magic,
// then the fields bytes that follow it (a tensor's dtype), then zeros up to
// byte 8 (reserved).
func hasHeader(data []byte, magic string, head, fields int) bool {
	if len(data) < head || string(data[:4]) != magic {
		return false
	}
	for _, b := range data[4+fields : 8] {
		if b != 0 {
			return false
		}
	}
	return true
}

// littleEndian reports whether this machine stores numbers little-endian.
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// float32s returns the n little-endian float32s in b: b itself when it can.
func float32s(b []byte, n int) []float32 {
	if n == 0 {
		return []float32{}
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// halves returns the n little-endian 16-bit values in b: b itself when it
// can.
func halves[T half.BF16 | half.F16](b []byte, n int) []T {
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]T, n)
	for i := range out {
		out[i] = T(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out
}
