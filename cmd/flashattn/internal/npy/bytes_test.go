package npy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/sbinet/npyio/npy"
)

// One-byte arrays written by an independent writer (npyio: '|u1', '|i1',
// '|b1') read back as their raw bytes; Stat sizes them at one byte each.
func TestReadBytesFromNpyio(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		data  any
		descr string
		want  []uint8
	}{
		{"u1", []uint8{0, 1, 2, 255, 7, 0}, dtypeU8, []uint8{0, 1, 2, 255, 7, 0}},
		{"i1", []int8{0, -1, 5, -128, 127, 0}, dtypeI8, []uint8{0, 0xff, 5, 0x80, 127, 0}},
		{"b1", []bool{true, false, false, true, true, false}, dtypeBool, []uint8{1, 0, 0, 1, 1, 0}},
	} {
		var buf bytes.Buffer
		if err := npy.Write(&buf, c.data); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, c.name+".npy")
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		got, shape, err := Reader{}.ReadBytes(p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.want) || !reflect.DeepEqual(shape, []int{6}) {
			t.Errorf("%s: %v %v, want %v [6]", c.name, got, shape, c.want)
		}
		info, err := Stat(p)
		if err != nil || info.Descr != c.descr || info.Bytes() != 6 {
			t.Errorf("%s: Stat = %+v (%v bytes), %v", c.name, info, info.Bytes(), err)
		}
		// A float reader refuses a one-byte file, naming what it wants.
		if _, _, err := ReadFloat32(p); err == nil || !strings.Contains(err.Error(), "want float32") {
			t.Errorf("%s: ReadFloat32 error %v", c.name, err)
		}
	}
}

// WriteUint8 writes '|u1' files that npyio reads.
func TestWriteUint8(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.npy")
	data := []uint8{3, 0, 1, 9, 0, 255}
	if err := WriteUint8(p, data, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := npy.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint8
	if err := r.Read(&got); err != nil {
		t.Fatal(err)
	}
	if r.Header.Descr.Type != dtypeU8 || !reflect.DeepEqual(r.Header.Descr.Shape, []int{1, 2, 3}) || !reflect.DeepEqual(got, data) {
		t.Errorf("npyio reads %v %v %v", r.Header.Descr.Type, r.Header.Descr.Shape, got)
	}
	if err := WriteFiles(map[string]Array{p: {Shape: []int{1}, U8: []uint8{1}, F32: []float32{1}}}); err == nil {
		t.Error("an array with two kinds of data was written")
	}
}

func TestReadBytesErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, dict string
		data       []byte
		want       string
	}{
		{"float", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", make([]byte, 8), "want uint8 (|u1), int8 (|i1) or bool (|b1)"},
		{"int32", "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", make([]byte, 8), "dtype <i4"},
		{"uint16", "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", make([]byte, 4), "dtype <u2"},
		{"bool 2", "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", []byte{0, 2, 1}, "bool element 1 is 2"},
		{"fortran", "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2), }", make([]byte, 4), "fortran"},
		{"truncated", "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", make([]byte, 4), "truncated"},
		{"trailing", "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", make([]byte, 4), "trailing"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".npy")
		if err := os.WriteFile(p, rawNpy(c.dict, c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := Reader{}.ReadBytes(p)
		if err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q naming the file", c.name, err, c.want)
		}
	}
	// Over the memory limit: refused before allocating.
	p := filepath.Join(dir, "big.npy")
	if err := os.WriteFile(p, rawNpy("{'descr': '|u1', 'fortran_order': False, 'shape': (4096,), }", make([]byte, 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	var me *memlimit.Error
	if _, _, err := (Reader{Limit: memlimit.Limit{Bytes: 4095, Source: "test"}}).ReadBytes(p); !errors.As(err, &me) {
		t.Errorf("over the limit: %v", err)
	}
	if _, _, err := (Reader{Limit: memlimit.Limit{Bytes: 4096, Source: "test"}}).ReadBytes(p); err != nil {
		t.Errorf("at the limit: %v", err)
	}
}

// FuzzReadBytes decodes arbitrary bytes as a one-byte array under a 1 MiB
// limit: no panic, elements matching the shape, bools 0 or 1, and a
// successful decode re-encodes to the same bytes.
func FuzzReadBytes(f *testing.F) {
	for _, d := range []any{[]uint8{1, 2, 3}, []int8{-1, 0}, []bool{true, false}} {
		var buf bytes.Buffer
		npy.Write(&buf, d)
		f.Add(buf.Bytes(), uint64(0))
	}
	f.Add(rawNpy("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", []byte{1, 3}), uint64(0))
	f.Add(rawNpy("{'descr': '|u1', 'fortran_order': False, 'shape': (2097152,), }", nil), uint64(2<<20))
	f.Add(rawNpy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", nil), uint64(6))
	f.Fuzz(func(t *testing.T, b []byte, extra uint64) {
		a, ok := fuzzDecode(t, b, extra, oneByte)
		if !ok {
			return
		}
		if a.F32 != nil || a.I32 != nil || len(a.U8) != a.Len() || a.Len() > fuzzLimit {
			t.Fatalf("decoded %+v", a)
		}
		_, a2 := reencode(t, a, oneByte)
		if !reflect.DeepEqual(a2.U8, a.U8) || !reflect.DeepEqual(a2.Shape, a.Shape) {
			t.Fatalf("round trip: %+v vs %+v", a, a2)
		}
	})
}
