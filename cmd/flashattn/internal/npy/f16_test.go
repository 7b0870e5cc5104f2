package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/half"
)

func f16bytes(v ...uint16) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

// f16Bits are float16 patterns of every class: ±0, 1, -2, the largest
// finite, the smallest subnormal, ±Inf, a quiet NaN with a payload and a
// signalling one.
var f16Bits = []uint16{0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x7e01, 0x7c01}

// A hand-made '<f2' file (NumPy's float16) decodes bit for bit, through
// ReadFloat16, ReadFloat and Read; Stat reports its dtype and 2-byte size.
func TestReadFloat16(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "h.npy")
	if err := os.WriteFile(p, rawNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 5), }", f16bytes(f16Bits...)), 0o644); err != nil {
		t.Fatal(err)
	}
	want := make([]half.F16, len(f16Bits))
	for i, b := range f16Bits {
		want[i] = half.F16(b)
	}
	got, shape, err := Reader{}.ReadFloat16(p)
	if err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(shape, []int{2, 5}) {
		t.Fatalf("ReadFloat16: %v %v %v", got, shape, err)
	}
	a, err := Reader{}.ReadFloat(p)
	if err != nil || a.F32 != nil || !reflect.DeepEqual(a.F16, want) {
		t.Fatalf("ReadFloat: %+v %v", a, err)
	}
	a, err = Read(p)
	if err != nil || !reflect.DeepEqual(a.F16, want) {
		t.Fatalf("Read: %+v %v", a, err)
	}
	info, err := Stat(p)
	if err != nil || info.Descr != "<f2" || info.Bytes() != 20 {
		t.Fatalf("Stat: %+v (%v bytes) %v", info, info.Bytes(), err)
	}
	if got[2].Float32() != 1 || got[3].Float32() != -2 || got[4].Float32() != 65504 {
		t.Errorf("values %v %v %v", got[2].Float32(), got[3].Float32(), got[4].Float32())
	}
	// ReadFloat takes '<f4' too; the narrow readers refuse the other width.
	p4 := filepath.Join(dir, "f.npy")
	if err := WriteFloat32(p4, []float32{1.5, -3}, []int{2}); err != nil {
		t.Fatal(err)
	}
	if a, err := (Reader{}).ReadFloat(p4); err != nil || !reflect.DeepEqual(a.F32, []float32{1.5, -3}) || a.F16 != nil {
		t.Fatalf("ReadFloat <f4: %+v %v", a, err)
	}
	for _, c := range []struct {
		read func() error
		want string
	}{
		{func() error { _, _, err := ReadFloat32(p); return err }, "h.npy: dtype <f2, want float32 (<f4)"},
		{func() error { _, _, err := (Reader{}).ReadFloat16(p4); return err }, "f.npy: dtype <f4, want float16 (<f2)"},
		{func() error { _, _, err := ReadInt32(p); return err }, "h.npy: dtype <f2, want int32 (<i4)"},
	} {
		if err := c.read(); err == nil || !strings.HasSuffix(err.Error(), c.want) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
}

// Bad '<f2' files: an odd byte, a missing element, trailing data, a
// big-endian or Fortran-order float16, an <i4 or <f8 file for ReadFloat.
func TestReadFloat16Bad(t *testing.T) {
	dir := t.TempDir()
	hdr := func(descr, shape string) string {
		return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }"
	}
	for name, c := range map[string]struct {
		file []byte
		want string
	}{
		"odd":      {rawNpy(hdr("<f2", "(3,)"), f16bytes(1, 2)[:3]), "truncated"},
		"short":    {rawNpy(hdr("<f2", "(3,)"), f16bytes(1, 2)), "truncated"},
		"trailing": {rawNpy(hdr("<f2", "(1,)"), f16bytes(1, 2)), "trailing data"},
		"big":      {rawNpy(hdr(">f2", "(1,)"), f16bytes(1)), "dtype >f2"},
		"fortran":  {rawNpy("{'descr': '<f2', 'fortran_order': True, 'shape': (1, 2), }", f16bytes(1, 2)), "fortran_order"},
		"int32":    {rawNpy(hdr("<i4", "(1,)"), f16bytes(1, 2)), "want float32 (<f4) or float16 (<f2)"},
		"f8":       {rawNpy(hdr("<f8", "(1,)"), make([]byte, 8)), "want float32 (<f4) or float16 (<f2)"},
	} {
		p := filepath.Join(dir, name+".npy")
		if err := os.WriteFile(p, c.file, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Reader{}.ReadFloat(p)
		if err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	// The memory limit counts 2 bytes per element.
	p := filepath.Join(dir, "lim.npy")
	if err := os.WriteFile(p, rawNpy(hdr("<f2", "(4,)"), f16bytes(1, 2, 3, 4)), 0o644); err != nil {
		t.Fatal(err)
	}
	var me *memlimit.Error
	if _, err := (Reader{Limit: memlimit.Limit{Bytes: 7, Source: "test"}}).ReadFloat(p); !errors.As(err, &me) {
		t.Errorf("over the limit: %v", err)
	}
	if _, err := (Reader{Limit: memlimit.Limit{Bytes: 8, Source: "test"}}).ReadFloat(p); err != nil {
		t.Errorf("at the limit: %v", err)
	}
}

// WriteFloat16 writes the header NumPy writes for float16 and the bits as
// they are; WriteAll writes F16 arrays beside others, all or nothing.
func TestWriteFloat16(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "h.npy")
	data := make([]half.F16, len(f16Bits))
	for i, b := range f16Bits {
		data[i] = half.F16(b)
	}
	if err := WriteFloat16(p, data, []int{5, 2}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := rawNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (5, 2), }", f16bytes(f16Bits...))
	if !bytes.Equal(b, want) {
		t.Fatalf("file bytes\n%q\nwant\n%q", b, want)
	}
	if err := WriteFloat16(p, data, []int{3}); err == nil || !strings.Contains(err.Error(), "h.npy") {
		t.Errorf("shape mismatch: %v", err)
	}
	if err := WriteFiles(map[string]Array{p: {Shape: []int{1}, F16: data[:1], F32: []float32{1}}}); err == nil || !strings.Contains(err.Error(), "more than one kind") {
		t.Errorf("two kinds: %v", err)
	}
	// Empty and scalar arrays.
	for _, shape := range [][]int{{0}, {}} {
		n := 1
		if len(shape) == 1 {
			n = 0
		}
		if err := WriteFloat16(p, data[:n], shape); err != nil {
			t.Fatal(err)
		}
		got, gs, err := Reader{}.ReadFloat16(p)
		if err != nil || len(got) != n || len(gs) != len(shape) {
			t.Errorf("shape %v: %v %v %v", shape, got, gs, err)
		}
	}
	// A big array crosses the 64 KiB encode buffer.
	big := make([]half.F16, 100003)
	for i := range big {
		big[i] = half.F16(uint16(i * 40503))
	}
	if err := WriteFloat16(p, big, []int{len(big)}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := (Reader{}).ReadFloat16(p); err != nil || !reflect.DeepEqual(got, big) {
		t.Fatalf("big round trip: %v", err)
	}
}

// FuzzReadFloat decodes arbitrary bytes as a '<f4' or '<f2' array under a
// 1 MiB limit: no panic, elements matching the shape and the width, and a
// successful decode re-encodes to the same header dtype and the same bits.
func FuzzReadFloat(f *testing.F) {
	var buf bytes.Buffer
	encode(&buf, Array{Shape: []int{2, 5}, F16: []half.F16{0, 0x8000, 0x3c00, 0xc000, 0x7bff, 1, 0x7c00, 0xfc00, 0x7e01, 0x7c01}})
	f.Add(buf.Bytes(), uint64(0))
	buf.Reset()
	encode(&buf, Array{Shape: []int{3}, F32: []float32{1, 2, 3}})
	f.Add(buf.Bytes(), uint64(0))
	f.Add(rawNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", []byte{1, 2, 3, 4, 5}), uint64(0))
	f.Add(rawNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (524289,), }", nil), uint64(2*524289))
	f.Add(rawNpy("{'descr': '<f2', 'fortran_order': False, 'shape': (524288,), }", nil), uint64(2*524288))
	f.Add(rawNpy("{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }", []byte{1, 2}), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, extra uint64) {
		a, ok := fuzzDecode(t, b, extra, floats)
		if !ok {
			return
		}
		if a.I32 != nil || a.U8 != nil || a.F32 != nil && a.F16 != nil {
			t.Fatalf("decoded kinds %+v", a)
		}
		size := 4
		if a.F16 != nil {
			size = 2
		}
		if a.Len() != len(a.F32)+len(a.F16) || size*a.Len() > fuzzLimit {
			t.Fatalf("shape %v but %d+%d elements", a.Shape, len(a.F32), len(a.F16))
		}
		n, a2 := reencode(t, a, floats)
		if (n-size*a.Len())%64 != 0 {
			t.Fatalf("re-encoded data offset not 64-aligned")
		}
		if !reflect.DeepEqual(a.Shape, a2.Shape) || !reflect.DeepEqual(a.F16, a2.F16) || len(a.F32) != len(a2.F32) || (a.F16 == nil) != (a2.F16 == nil) {
			t.Fatalf("round trip: %+v vs %+v", a, a2)
		}
		for i := range a.F32 {
			if math.Float32bits(a.F32[i]) != math.Float32bits(a2.F32[i]) {
				t.Fatalf("round trip element %d", i)
			}
		}
	})
}
