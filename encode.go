package flashattn

import (
	"encoding/binary"
	"math"
	"unsafe"
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
//	             2 float16, 3 q8_0, 4 q4_0, 5 fp8_e4m3, 6 fp8_e5m2
//	bytes 5-7    zero (reserved)
//	bytes 8-39   batch, seq, heads, dim: four uint64, each ≥ 1
//	bytes 40-47  fp8 only: the float32 Scale's bits, then 4 zero bytes
//	then         the batch·seq·heads·dim elements in row-major order
//	             (dim fastest): float32 as their IEEE 754 bits (4 bytes),
//	             bfloat16 and float16 as their bits (2 bytes), q8_0 and
//	             q4_0 as llama.cpp's blocks of 32 values (34 and 18 bytes:
//	             a float16 scale, then 32 int8 or 16 bytes of 4-bit codes),
//	             fp8 as one byte each
//
// The header's size (40 bytes, 48 for fp8) is a multiple of 8, so elements
// that follow an aligned header are aligned (and DecodeTensor can alias
// them).
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
	f := &formats[v.dt]
	if f.scaled {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v.scale))
		b = append(b, 0, 0, 0, 0)
	}
	B, S, H, D := v.shape[0], v.shape[1], v.shape[2], v.shape[3]
	for bi := 0; bi < B; bi++ {
		for s := 0; s < S; s++ {
			for h := 0; h < H; h++ {
				o := v.off(bi, s, h)
				b = appendLE(b, v.raw[f.bytes(o):f.bytes(o+D)], f.wireUnit())
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
	dt := d.DType()
	c := NewTensorOf(dt, d.Batch, d.Seq, d.Heads, d.Dim)
	dst, _ := formats[dt].raw(c)
	src, _ := formats[dt].raw(d)
	copy(dst, src)
	c.Scale = d.Scale
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
	if dt >= numDTypes {
		return Tensor{}, data, argErr("data", "encoded tensor has element type %d", data[4])
	}
	f := &formats[dt]
	body := data[tensorHead:]
	var scale float32
	if f.scaled {
		if len(body) < 8 {
			return Tensor{}, data, argErr("data", "encoded %v tensor has no scale", dt)
		}
		scale = math.Float32frombits(binary.LittleEndian.Uint32(body))
		if !(scale >= 0) || math.IsInf(float64(scale), 1) {
			return Tensor{}, data, argErr("data", "encoded %v tensor has scale %v", dt, scale)
		}
		if binary.LittleEndian.Uint32(body[4:]) != 0 {
			return Tensor{}, data, argErr("data", "encoded %v tensor: the 4 bytes after its scale are %x, want zero (reserved)", dt, body[4:8])
		}
		body = body[8:]
	}
	blk := f.kf.Block()
	if shape[3]%blk != 0 {
		return Tensor{}, data, argErr("data", "encoded %v tensor has head dim %d, not a multiple of %d", dt, shape[3], blk)
	}
	if bb := f.bytes(blk); n/blk > len(body)/bb {
		if blk > 1 {
			return Tensor{}, data, argErr("data", "encoded tensor %v needs %d %v blocks, has bytes for %d", shape, n/blk, dt, len(body)/bb)
		}
		return Tensor{}, data, argErr("data", "encoded tensor %v needs %d values, has bytes for %d", shape, n, len(body)/bb)
	}
	size := f.bytes(n)
	body, rest = body[:size:size], body[size:]
	t = Tensor{Batch: shape[0], Seq: shape[1], Heads: shape[2], Dim: shape[3], Scale: scale}
	t = f.wrap(t, fromLE(body, f.wireUnit()))
	return t, rest, nil
}

// wireUnit is the size of the little-endian words of the type's encoding:
// 4 (float32), 2 (16-bit) or 1 (bytes, block formats).
func (f *dtypeFormat) wireUnit() int {
	if f.kf.Block() > 1 {
		return 1
	}
	return f.bytes(1)
}

// appendLE appends the words of unit bytes in raw (native order) to b,
// little-endian.
func appendLE(b, raw []byte, unit int) []byte {
	if littleEndian || unit == 1 {
		return append(b, raw...)
	}
	for i := 0; i < len(raw); i += unit {
		for j := unit - 1; j >= 0; j-- {
			b = append(b, raw[i+j])
		}
	}
	return b
}

// fromLE returns the little-endian words of unit bytes in b in native
// order, aligned for their type: b itself when it can (no copy).
func fromLE(b []byte, unit int) []byte {
	if unit == 1 || littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(unit) == 0 {
		return b
	}
	out := asBytes(make([]uint64, (len(b)+7)/8))[:len(b)]
	for i := 0; i < len(b); i += unit {
		for j := 0; j < unit; j++ {
			if littleEndian {
				out[i+j] = b[i+j]
			} else {
				out[i+j] = b[i+unit-1-j]
			}
		}
	}
	return out
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
