package npy

import (
	"bytes"
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

// snapshot returns the names and contents of the entries of dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			m[e.Name()] = "<" + e.Type().String() + ">"
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func sameSnapshot(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s changed (present %v)", k, ok)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s left behind", k)
		}
	}
}

// outputs is a set of five arrays in dir like the attn command writes.
func outputs(dir string, v float32) map[string]Array {
	m := map[string]Array{}
	for i, name := range []string{"dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"} {
		m[filepath.Join(dir, name)] = Array{Shape: []int{2}, F32: []float32{v, float32(i)}}
	}
	return m
}

// When one destination is a directory, WriteFiles says so and every earlier
// file is left byte-identical (the rollback used to delete them).
func TestWriteFilesDirectoryInTheWay(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFiles(outputs(dir, 1)); err != nil {
		t.Fatal(err)
	}
	lse := filepath.Join(dir, "lse.npy")
	if err := os.Remove(lse); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(lse, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	err := WriteFiles(outputs(dir, 2))
	if err == nil || err.Error() != lse+" is a directory" {
		t.Errorf("err = %v, want %q", err, lse+" is a directory")
	}
	sameSnapshot(t, snapshot(t, dir), before)
}

var _ = bytes.Equal
