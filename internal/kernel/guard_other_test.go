//go:build !linux

package kernel

import "testing"

// Without mmap guard pages the slices are plain allocations; the canary
// checks of the tests still catch writes outside the results.
func guarded[T any](t *testing.T, n int, after bool) []T { return make([]T, n) }

func guardedU16(t *testing.T, n int) []uint16  { return make([]uint16, n) }
func guardedF32(t *testing.T, n int) []float32 { return make([]float32, n) }
