package npy

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A sparse file exactly as large as its header claims (4 TiB of data) is
// refused with an error about memory, before anything is allocated.
func TestReadHugeSparseFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.npy")
	const n = 1 << 40 // float32 elements: 4 TiB
	hdr := rawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", nil)
	if err := os.WriteFile(p, hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, int64(len(hdr))+4*n); err != nil {
		t.Fatalf("cannot make a sparse 4 TiB file here: %v", err)
	}
	want := "huge.npy: needs 4.0 TiB of memory, but only "
	if strconv.IntSize == 32 {
		want = "huge.npy: invalid header: dimension 1099511627776 in 'shape' is too large"
	}
	_, _, err := ReadFloat32(p)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// A FIFO (or any non-regular file) is refused at once instead of blocking.
func TestReadNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir, "/dev/null"} {
		done := make(chan error, 1)
		go func() { _, _, err := ReadFloat32(p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s: err = %v", p, err)
			}
		case <-time.After(5 * time.Second):
			// Unblock the reader so that the test can end.
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			t.Fatalf("%s: reading blocked", p)
		}
	}
}

// Len never overflows: a shape whose product does not fit in an int gives -1.
func TestLenOverflow(t *testing.T) {
	for _, c := range []struct {
		shape []int
		want  int
	}{
		{[]int{math.MaxInt/4 + 1, 2, 2}, -1},
		{[]int{math.MaxInt / 3, 4}, -1},
		{[]int{math.MaxInt, 2}, -1},
		{[]int{math.MaxInt, 0}, 0},
		{[]int{0, math.MaxInt, math.MaxInt}, 0},
		{[]int{3, -1}, -1},
		{[]int{6, 7}, 42},
		{nil, 1},
	} {
		if got := (Array{Shape: c.shape}).Len(); got != c.want {
			t.Errorf("Len(%v) = %d, want %d", c.shape, got, c.want)
		}
	}
}

// Stat reads only the header but checks the file as reading it would.
func TestStat(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.npy")
	if err := WriteInt32(p, []int32{1, 2, 3, 4, 5, 6}, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	info, err := Stat(p)
	if err != nil || info.Descr != "<i4" || len(info.Shape) != 2 || info.Shape[0] != 2 || info.Shape[1] != 3 || info.Bytes() != 24 {
		t.Fatalf("Stat = %+v, %v", info, err)
	}
	b, _ := os.ReadFile(p)
	for name, content := range map[string][]byte{
		"trunc.npy": b[:len(b)-1],
		"trail.npy": append(b, 0),
		"f8.npy":    rawNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", make([]byte, 8)),
		"text.npy":  []byte("hello"),
	} {
		q := filepath.Join(dir, name)
		if err := os.WriteFile(q, content, 0o644); err != nil {
			t.Fatal(err)
		}
		_, serr := Stat(q)
		_, rerr := Read(q)
		if serr == nil || rerr == nil || serr.Error() != rerr.Error() {
			t.Errorf("%s: Stat error %v, Read error %v", name, serr, rerr)
		}
	}
	fifo := filepath.Join(dir, "p.npy")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Stat(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("FIFO: %v", err)
	}
	if _, err := Stat(filepath.Join(dir, "missing.npy")); err == nil || !strings.Contains(err.Error(), "missing.npy: no such file") {
		t.Errorf("missing: %v", err)
	}
}
