package kernel

import (
	"syscall"
	"testing"
	"unsafe"
)

// decodeGuarded returns a slice of n elements of T with an inaccessible
// page right after its end (after) or right before its start (!after),
// so that a kernel reading or writing past either end faults instead of
// passing.
func decodeGuarded[T any](t *testing.T, n int, after bool) []T {
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
