package flashattn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// Every element type round-trips through AppendBinary and DecodeTensor /
// UnmarshalBinary, strided views encode their logical shape densely, and a
// decoded tensor aliases the bytes when they are aligned.
func TestTensorEncoding(t *testing.T) {
	r := newRand(1)
	x := randSlice(r, 2*3*4*32)
	src := Dense(x, 2, 3, 4, 32)
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		tt := newCache(dt, 2, 3, 4, 32)
		if err := Convert(tt, src); err != nil {
			t.Fatal(err)
		}
		enc, err := tt.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		buf := append(slices.Clone(enc), 7, 7) // trailing bytes
		got, rest, err := DecodeTensor(buf)
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if !bytes.Equal(rest, []byte{7, 7}) {
			t.Errorf("%v: rest %v", dt, rest)
		}
		if !slices.Equal(storedBytes(got), storedBytes(tt)) || len(storedBytes(tt)) == 0 || got.DType() != dt || got.Scale != tt.Scale || got.Batch != 2 || got.Dim != 32 {
			t.Errorf("%v: decoded tensor differs", dt)
		}
		var u Tensor
		if err := u.UnmarshalBinary(enc); err != nil || !slices.Equal(storedBytes(u), storedBytes(tt)) || u.Scale != tt.Scale {
			t.Errorf("%v: UnmarshalBinary: %v", dt, err)
		}
		if dt == Float32 && littleEndian && uintptr(unsafe.Pointer(&buf[tensorHead]))%4 == 0 {
			buf[tensorHead] ^= 1
			if got.Data[0] == tt.Data[0] {
				t.Error("the decoded float32 tensor does not alias the aligned bytes")
			}
		}
	}
	// A strided view ([B, H, S, D] memory) encodes its logical shape.
	bhsd := Tensor{Data: x, Batch: 2, Seq: 3, Heads: 4, Dim: 32, BatchStride: 4 * 3 * 32, SeqStride: 32, HeadStride: 3 * 32}
	enc, err := bhsd.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := DecodeTensor(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.At(1, 2, 3, 5) != bhsd.At(1, 2, 3, 5) || got.At(0, 1, 2, 31) != bhsd.At(0, 1, 2, 31) {
		t.Error("strided view encoded wrongly")
	}
	lse := randSlice(r, 37)
	l, rest, err := DecodeLSE(AppendLSE(nil, lse))
	if err != nil || len(rest) != 0 || !slices.Equal(l, lse) {
		t.Errorf("LSE round trip: %v", err)
	}
	for _, bad := range [][]byte{nil, []byte("FAT1"), enc[:50], append([]byte("FAT1\x09\x00\x00\x00"), enc[8:]...), []byte("FAL1\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff")} {
		if _, _, err := DecodeTensor(bad); err == nil && len(bad) > 0 && string(bad[:4]) == "FAT1" {
			t.Errorf("DecodeTensor accepted %q", bad)
		}
		if _, _, err := DecodeLSE(bad); err == nil {
			t.Errorf("DecodeLSE accepted %q", bad)
		}
	}
}

// FuzzDecodeTensor: arbitrary bytes decode to an error or a valid tensor,
// never a panic.
func FuzzDecodeTensor(f *testing.F) {
	enc, _ := Dense(make([]float32, 64), 1, 2, 1, 32).MarshalBinary()
	f.Add(enc)
	e4 := NewTensorOf(FP8E4M3, 1, 1, 2, 32)
	e4.Scale = 0.5
	for _, x := range []Tensor{e4, NewTensorOf(Q4_0, 1, 2, 1, 32), NewTensorOf(BFloat16, 2, 1, 1, 3)} {
		enc, _ := x.MarshalBinary()
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tt, rest, err := DecodeTensor(data)
		if err != nil {
			return
		}
		if _, err := tt.check("t", false, -1, -1, -1, -1); err != nil {
			t.Fatalf("decoded an invalid tensor: %v", err)
		}
		// What was accepted is exactly what encoding the tensor writes:
		// no field, reserved byte or element is read loosely.
		used := data[:len(data)-len(rest)]
		if re, err := tt.AppendBinary(nil); err != nil || !bytes.Equal(re, used) {
			t.Fatalf("re-encoding the decoded tensor gives %d bytes (%v), not the %d decoded", len(re), err, len(used))
		}
	})
}

// FuzzDecodeLSE: DecodeLSE never panics, and what it accepts re-encodes
// to the bytes it consumed.
func FuzzDecodeLSE(f *testing.F) {
	f.Add(AppendLSE(nil, []float32{1, float32(math.Inf(-1)), 3}))
	f.Add(AppendLSE(nil, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		lse, rest, err := DecodeLSE(data)
		if err != nil {
			return
		}
		if re := AppendLSE(nil, lse); !bytes.Equal(re, data[:len(data)-len(rest)]) {
			t.Fatalf("re-encoding the decoded LSE gives %d bytes, not the %d decoded", len(re), len(data)-len(rest))
		}
	})
}

// TestDecodeTensorScalePadding: the 4 bytes after an fp8 tensor's scale
// are reserved (zero) and refused otherwise, as the header's are; a
// garbage or newer encoding is not read as this one.
func TestDecodeTensorScalePadding(t *testing.T) {
	for _, dt := range []DType{FP8E4M3, FP8E5M2} {
		x := NewTensorOf(dt, 1, 1, 1, 32)
		x.Scale = 2
		good, err := x.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := DecodeTensor(good); err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		for i := tensorHead + 4; i < tensorHead+8; i++ {
			bad := slices.Clone(good)
			bad[i] = 0x30
			_, _, err := DecodeTensor(bad)
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Errorf("%v: byte %d (after the scale) set: error %v, want an *ArgError", dt, i, err)
			}
		}
	}
}

// DecodeLSE checks its reserved header bytes as DecodeTensor does, and a
// count too large for the bytes is reported as such (a count ≥ 2^62 used to
// say "needs 0 bytes": 4·count overflowed).
func TestDecodeLSEHeader(t *testing.T) {
	good := AppendLSE(nil, []float32{1, 2, 3})
	if lse, rest, err := DecodeLSE(good); err != nil || len(lse) != 3 || len(rest) != 0 {
		t.Fatalf("DecodeLSE(AppendLSE) = %v, %d bytes left, %v", lse, len(rest), err)
	}
	for i := 4; i < 8; i++ {
		bad := slices.Clone(good)
		bad[i] = 1
		if _, _, err := DecodeLSE(bad); err == nil {
			t.Errorf("reserved header byte %d set to 1: accepted", i)
		}
	}
	for _, n := range []uint64{4, 1 << 62, 1<<62 + 1, 1<<64 - 1} {
		bad := slices.Clone(good)
		binary.LittleEndian.PutUint64(bad[8:], n)
		_, _, err := DecodeLSE(bad)
		var ae *ArgError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), strconv.FormatUint(n, 10)) {
			t.Errorf("count %d: error %v, want an *ArgError saying the %d values do not fit the 12 bytes", n, err, n)
			continue
		}
		// A byte count the message states must be 4·n, without overflow.
		want := new(big.Int).Mul(new(big.Int).SetUint64(n), big.NewInt(4))
		for _, m := range regexp.MustCompile(`needs (\d+) bytes`).FindAllStringSubmatch(err.Error(), -1) {
			if got, _ := new(big.Int).SetString(m[1], 10); got.Cmp(want) != 0 {
				t.Errorf("count %d: error %q states %s bytes, want %v", n, err, m[1], want)
			}
		}
	}
}

// storedBytes is tensorBytes for every type: the stored bytes of the
// block and fp8 types too (tensorBytes, which the golden hashes use,
// gives those of q8_0 only).
func storedBytes(t Tensor) []byte {
	if t.DType().cacheOnly() {
		b, _ := formats[t.DType()].raw(t)
		return slices.Clone(b)
	}
	return tensorBytes(t)
}
