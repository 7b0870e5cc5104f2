package kernel

import (
	"syscall"
	"testing"
	"unsafe"
)

// guarded returns a slice of n elements of T with an inaccessible page
// right after its end (after) or right before its start (!after), so that
// a kernel reading or writing even one element past either end faults
// (the test binary dies with SIGSEGV instead of passing).
func guarded[T any](t *testing.T, n int, after bool) []T {
	t.Helper()
	var z T
	size := int(unsafe.Sizeof(z)) * n
	page := syscall.Getpagesize()
	total := (size+page-1)/page*page + 2*page
	mem, err := syscall.Mmap(-1, 0, total, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	if err := syscall.Mprotect(mem[total-page:], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if n == 0 {
		return []T{}
	}
	start := page
	if after {
		start = total - page - size
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&mem[start])), n)
}

// guardedU16 and guardedF32 are slices of n elements ending at a guard page.
func guardedU16(t *testing.T, n int) []uint16  { return guarded[uint16](t, n, true) }
func guardedF32(t *testing.T, n int) []float32 { return guarded[float32](t, n, true) }
