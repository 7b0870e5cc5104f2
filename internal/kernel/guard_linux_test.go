package kernel

import (
	"syscall"
	"testing"
	"unsafe"
)

// guardedBytes returns n bytes that end exactly where an inaccessible page
// begins, so that a kernel reading or writing even one byte past the end
// faults (the test binary dies with SIGSEGV instead of passing).
func guardedBytes(t *testing.T, n int) []byte {
	t.Helper()
	page := syscall.Getpagesize()
	size := (n+page-1)/page*page + page
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	if err := syscall.Mprotect(mem[size-page:], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem[size-page-n : size-page : size-page]
}

// guardedU16 and guardedF32 are slices of n elements ending at a guard page.
func guardedU16(t *testing.T, n int) []uint16 {
	b := guardedBytes(t, 2*n)
	if n == 0 {
		return []uint16{}
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
}

func guardedF32(t *testing.T, n int) []float32 {
	b := guardedBytes(t, 4*n)
	if n == 0 {
		return []float32{}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}
