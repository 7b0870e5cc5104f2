package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/sbinet/npyio/npy"
)

// rawNpy builds a version-1.0 .npy file from a header dictionary and data.
func rawNpy(dict string, data []byte) []byte {
	h := []byte(dict)
	for (10+len(h)+1)%64 != 0 {
		h = append(h, ' ')
	}
	h = append(h, '\n')
	out := []byte(magic)
	out = append(out, 1, 0)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(h)))
	out = append(out, h...)
	return append(out, data...)
}

func f32bytes(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func TestHeaderBytes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.npy")
	if err := WriteFloat32(p, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != "\x93NUMPY\x01\x00" {
		t.Fatalf("preamble %q", b[:8])
	}
	hlen := int(binary.LittleEndian.Uint16(b[8:10]))
	if (10+hlen)%64 != 0 {
		t.Fatalf("data starts at %d, not a multiple of 64", 10+hlen)
	}
	hdr := string(b[10 : 10+hlen])
	want := "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
	if !strings.HasPrefix(hdr, want) || strings.TrimLeft(hdr[len(want):], " ") != "\n" {
		t.Fatalf("header %q", hdr)
	}
	if !bytes.Equal(b[10+hlen:], f32bytes(1, 2, 3, 4, 5, 6)) {
		t.Fatal("data bytes differ")
	}
	for shape, want := range map[string]string{"": "()", "7": "(7,)", "2,0,4": "(2, 0, 4)"} {
		var s []int
		for _, f := range strings.Split(shape, ",") {
			if f != "" {
				var d int
				for _, c := range f {
					d = d*10 + int(c-'0')
				}
				s = append(s, d)
			}
		}
		h := encodeHeader("<f4", s)
		if len(h)%64 != 0 || !bytes.Contains(h, []byte("'shape': "+want+", }")) {
			t.Errorf("shape %v: header %q", s, h)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		shape []int
		n     int
	}{{nil, 1}, {[]int{}, 1}, {[]int{0}, 0}, {[]int{5}, 5}, {[]int{2, 3}, 6}, {[]int{2, 3, 1, 4}, 24}, {[]int{3, 0, 2}, 0}, {[]int{40000}, 40000}}
	for ci, c := range cases {
		f := make([]float32, c.n)
		in := make([]int32, c.n)
		for i := range f {
			f[i] = float32(i)*0.37 - 5
			in[i] = int32(i*7919) - 1<<30
		}
		if c.n > 1 {
			f[1] = float32(math.Inf(-1))
			f[0] = math.Float32frombits(0x7fc00123) // NaN payload
		}
		pf := filepath.Join(dir, "f.npy")
		pi := filepath.Join(dir, "i.npy")
		if err := WriteFloat32(pf, f, c.shape); err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		if err := WriteInt32(pi, in, c.shape); err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		gf, sf, err := ReadFloat32(pf)
		if err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		gi, si, err := ReadInt32(pi)
		if err != nil {
			t.Fatalf("case %d: %v", ci, err)
		}
		wantShape := c.shape
		if wantShape == nil {
			wantShape = []int{}
		}
		if !reflect.DeepEqual(sf, wantShape) || !reflect.DeepEqual(si, wantShape) {
			t.Fatalf("case %d: shapes %v %v, want %v", ci, sf, si, wantShape)
		}
		if len(gf) != c.n || len(gi) != c.n {
			t.Fatalf("case %d: lengths %d %d", ci, len(gf), len(gi))
		}
		for i := range f {
			if math.Float32bits(gf[i]) != math.Float32bits(f[i]) || gi[i] != in[i] {
				t.Fatalf("case %d: element %d differs", ci, i)
			}
		}
		a, err := Read(pi)
		if err != nil || a.F32 != nil || len(a.I32) != c.n || a.Len() != c.n {
			t.Fatalf("case %d: Read = %+v, %v", ci, a, err)
		}
		// An independent reader (sbinet/npyio) accepts our files.
		if c.n > 0 && len(c.shape) > 0 {
			fh, _ := os.Open(pf)
			r, err := npy.NewReader(fh)
			if err != nil {
				t.Fatalf("case %d: npyio: %v", ci, err)
			}
			if r.Header.Descr.Type != "<f4" || r.Header.Descr.Fortran || !reflect.DeepEqual(r.Header.Descr.Shape, c.shape) {
				t.Fatalf("case %d: npyio header %v", ci, r.Header)
			}
			var got []float32
			if err := r.Read(&got); err != nil {
				t.Fatalf("case %d: npyio read: %v", ci, err)
			}
			fh.Close()
			if len(got) != c.n || got[c.n-1] != f[c.n-1] {
				t.Fatalf("case %d: npyio data differs", ci)
			}
		}
	}
}

// Files written by npyio (a different header layout: version 2.0) are read.
func TestReadsNpyioFiles(t *testing.T) {
	var buf bytes.Buffer
	if err := npy.Write(&buf, []float32{1.5, -2, 3}); err != nil {
		t.Fatal(err)
	}
	a, err := decode(bytes.NewReader(buf.Bytes()), int64(buf.Len()), []string{dtypeF32}, memlimit.Limit{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Shape, []int{3}) || !reflect.DeepEqual(a.F32, []float32{1.5, -2, 3}) {
		t.Fatalf("got %+v", a)
	}
}

func TestErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	write := func(name string, b []byte) {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("q.npy", rawNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", make([]byte, 16)))
	write("k.npy", rawNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", make([]byte, 16)))
	write("v.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 64), }", make([]byte, 4000)))
	write("x.npy", []byte("hello, world"))
	write("c.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", make([]byte, 8)))
	write("t.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", make([]byte, 12)))
	write("h.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000000000), }", nil))
	write("big.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", nil))
	write("neg.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", nil))
	write("ovf.npy", rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", nil))
	write("short.npy", []byte("\x93NUMPY\x01\x00\xff\x00{'descr'"))
	tests := []struct {
		read func(string) error
		file string
		want string
	}{
		{rf32, "q.npy", "q.npy: dtype <f8, want float32 (<f4)"},
		{ri32, "c.npy", "c.npy: dtype <f4, want int32 (<i4)"},
		{rf32, "k.npy", "k.npy: fortran_order arrays are not supported"},
		{rf32, "v.npy", "v.npy: truncated: header says 4096 elements, file has 1000"},
		{rf32, "x.npy", "x.npy: not a .npy file"},
		{rf32, "t.npy", "t.npy: 4 bytes of trailing data after the 2 elements the header describes"},
		{rf32, "h.npy", "h.npy: truncated: header says 10000000000000000000000 elements"},
		{rf32, "big.npy", "big.npy: invalid header: dimension 99999999999999999999 in 'shape' is too large"},
		{rf32, "neg.npy", "neg.npy: invalid header: negative dimension in 'shape'"},
		{rf32, "ovf.npy", "ovf.npy: shape (4294967296, 4294967296, 4294967296) is too large"},
		{rf32, "short.npy", "short.npy: truncated header"},
		{rf32, "missing.npy", "missing.npy: no such file"},
	}
	for _, tc := range tests {
		err := tc.read(tc.file)
		if err == nil {
			t.Errorf("%s: no error, want %q", tc.file, tc.want)
			continue
		}
		if tc.file == "h.npy" {
			// 1e22 elements overflows the element limit first.
			tc.want = "h.npy: shape (100000000000, 100000000000) is too large"
		}
		if strconv.IntSize == 32 && (tc.file == "h.npy" || tc.file == "ovf.npy") {
			// Each dimension alone is over the 32-bit limit.
			tc.want = tc.file + ": invalid header: dimension "
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want %q", tc.file, err, tc.want)
		}
	}
	if err := rf32("c.npy"); err != nil {
		t.Errorf("c.npy: %v", err)
	}
}

func rf32(p string) error { _, _, err := ReadFloat32(p); return err }
func ri32(p string) error { _, _, err := ReadInt32(p); return err }

func TestBadHeaders(t *testing.T) {
	for _, dict := range []string{
		"",
		"{",
		"[]",
		"{'descr': '<f4', 'fortran_order': False}",
		"{'descr': '<f4', 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
		"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk",
		"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
		"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}",
		"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
		"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
		"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
	} {
		b := rawNpy(dict, make([]byte, 8))
		if _, err := decode(bytes.NewReader(b), int64(len(b)), []string{dtypeF32}, memlimit.Limit{}); err == nil {
			t.Errorf("header %q accepted", dict)
		}
	}
	// Accepted variants: double quotes, other key order, no trailing comma,
	// Python 2 long suffix.
	for _, dict := range []string{
		`{"descr": "<f4", "fortran_order": False, "shape": (2,)}`,
		"{'shape': (1, 2), 'fortran_order': False, 'descr': '<f4'}",
		"{'descr':'<f4','fortran_order':False,'shape':(2L,),}",
	} {
		b := rawNpy(dict, make([]byte, 8))
		if _, err := decode(bytes.NewReader(b), int64(len(b)), []string{dtypeF32}, memlimit.Limit{}); err != nil {
			t.Errorf("header %q: %v", dict, err)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFloat32(filepath.Join(dir, "a.npy"), []float32{1, 2, 3}, []int{2, 2}); err == nil ||
		!strings.Contains(err.Error(), "a.npy") {
		t.Errorf("shape mismatch: %v", err)
	}
	if err := WriteFloat32(filepath.Join(dir, "b.npy"), []float32{1}, []int{-1, -1}); err == nil {
		t.Error("negative shape accepted")
	}
	if err := WriteFloat32(filepath.Join(dir, "nodir", "c.npy"), []float32{1}, []int{1}); err == nil {
		t.Error("write into a missing directory succeeded")
	}
	// All or nothing: one bad entry means no file appears, no temp is left.
	err := WriteFiles(map[string]Array{
		filepath.Join(dir, "out.npy"): {Shape: []int{2}, F32: []float32{1, 2}},
		filepath.Join(dir, "lse.npy"): {Shape: []int{3}, F32: []float32{1, 2}},
	})
	if err == nil || !strings.Contains(err.Error(), "lse.npy") {
		t.Errorf("WriteFiles: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left behind: %v", ents)
	}
	// Overwrite keeps the old content until the new one is complete.
	p := filepath.Join(dir, "o.npy")
	if err := WriteFloat32(p, []float32{1}, []int{1}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFloat32(p, []float32{1, 2}, []int{3}); err == nil {
		t.Fatal("bad overwrite succeeded")
	}
	if d, _, err := ReadFloat32(p); err != nil || len(d) != 1 {
		t.Fatalf("old file damaged: %v %v", d, err)
	}
	if err := WriteFiles(map[string]Array{
		p:                           {Shape: []int{2}, F32: []float32{3, 4}},
		filepath.Join(dir, "i.npy"): {Shape: []int{1}, I32: []int32{9}},
	}); err != nil {
		t.Fatal(err)
	}
	if d, _, err := ReadFloat32(p); err != nil || !reflect.DeepEqual(d, []float32{3, 4}) {
		t.Fatalf("overwrite: %v %v", d, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("directory holds %d entries, want 2", len(ents))
	}
}

// fourByte is the set of four-byte dtypes.
var fourByte = []string{dtypeF32, dtypeI32}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	encode(&buf, Array{Shape: []int{2, 3}, F32: []float32{1, 2, 3, 4, 5, 6}})
	f.Add(buf.Bytes(), uint64(0))
	buf.Reset()
	encode(&buf, Array{Shape: []int{3}, I32: []int32{1, -2, 3}})
	f.Add(buf.Bytes(), uint64(0))
	buf.Reset()
	encode(&buf, Array{Shape: []int{}, F32: []float32{7}})
	f.Add(buf.Bytes(), uint64(0))
	buf.Reset()
	npy.Write(&buf, []float32{1, 2})
	f.Add(buf.Bytes(), uint64(0))
	f.Add(rawNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", make([]byte, 8)), uint64(0))
	f.Add(rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 64), }", make([]byte, 40)), uint64(0))
	f.Add(rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", nil), uint64(0))
	f.Add(rawNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", make([]byte, 8)), uint64(0))
	f.Add(rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", nil), uint64(0))
	f.Add([]byte("\x93NUMPY\x01\x00\xff\xff{"), uint64(0))
	f.Add([]byte("\x93NUMPY\x02\x00\xff\xff\xff\xff{"), uint64(0))
	f.Add([]byte("not npy"), uint64(0))
	// Files as large as their headers claim (the data is virtual zeros):
	// 4 TiB, and just over the fuzz limit.
	f.Add(rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", nil), uint64(4<<40))
	f.Add(encodeHeader(dtypeI32, []int{1<<18 + 1}), uint64(4<<18+4))
	f.Add(encodeHeader(dtypeI32, []int{1 << 18}), uint64(4<<18))
	f.Fuzz(func(t *testing.T, b []byte, extra uint64) {
		a, ok := fuzzDecode(t, b, extra, fourByte)
		if !ok {
			return
		}
		if 4*a.Len() > fuzzLimit {
			t.Fatalf("decoded %d elements, over the limit", a.Len())
		}
		if a.Len() != len(a.F32)+len(a.I32) {
			t.Fatalf("shape %v but %d+%d elements", a.Shape, len(a.F32), len(a.I32))
		}
		size, a2 := reencode(t, a, fourByte)
		if size%4 != 0 || (size-4*a.Len())%64 != 0 {
			t.Fatalf("re-encoded data offset not 64-aligned")
		}
		if !reflect.DeepEqual(a.Shape, a2.Shape) || len(a.F32) != len(a2.F32) || !reflect.DeepEqual(a.I32, a2.I32) {
			t.Fatalf("round trip: %+v vs %+v", a, a2)
		}
		for i := range a.F32 {
			if math.Float32bits(a.F32[i]) != math.Float32bits(a2.F32[i]) {
				t.Fatalf("round trip element %d", i)
			}
		}
	})
}

// fuzzLimit is the memory limit the fuzzers decode under.
const fuzzLimit = 1 << 20

// fuzzDecode decodes, as an array of one of want, the file that is b
// followed by extra zero bytes (up to 16 TiB), under a memory limit of
// fuzzLimit: a header whose data is really there but does not fit must be
// refused before allocating, and only then. ok is false if decoding
// failed.
func fuzzDecode(t *testing.T, b []byte, extra uint64, want []string) (a Array, ok bool) {
	t.Helper()
	extra %= 16 << 40
	r := io.MultiReader(bytes.NewReader(b), &zeros{n: extra})
	a, err := decode(r, int64(len(b))+int64(extra), want, memlimit.Limit{Bytes: fuzzLimit, Source: "fuzz"})
	if err != nil {
		var me *memlimit.Error
		if errors.As(err, &me) && me.Need <= fuzzLimit {
			t.Fatalf("refused %v, within the limit", me.Need)
		}
		return Array{}, false
	}
	return a, true
}

// reencode encodes a and decodes the file again as one of want; it returns
// the file's size and the array read back.
func reencode(t *testing.T, a Array, want []string) (size int, back Array) {
	t.Helper()
	var out bytes.Buffer
	if err := encode(&out, a); err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	back, err := decode(bytes.NewReader(out.Bytes()), int64(out.Len()), want, memlimit.Limit{})
	if err != nil {
		t.Fatalf("re-decode: %v", err)
	}
	return out.Len(), back
}

// zeros reads as n zero bytes.
type zeros struct{ n uint64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	k := min(uint64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}
