//go:build !linux

package kernel

import "testing"

// Without mmap guard pages the slices are plain allocations; the canary
// checks of the tests still catch writes outside the results.
func decodeGuarded[T any](t *testing.T, n int, after bool) []T { return make([]T, n) }
