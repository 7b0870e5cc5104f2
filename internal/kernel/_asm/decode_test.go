package main

import (
	"slices"
	"testing"
)

// TestFoldPerm: the folding tree of the decode kernels sums every input
// into exactly one lane (foldPerm panics if a level mixes inputs).
func TestFoldPerm(t *testing.T) {
	for _, s := range []isa{isaAVX512, isaAVX2} {
		perm := foldPerm(s)
		got := slices.Sorted(slices.Values(perm))
		for i, v := range got {
			if v != i {
				t.Fatalf("%s: fold permutation %v is not a permutation of 0..%d", s.Suffix, perm, s.Lanes-1)
			}
		}
	}
}

// TestScoresPrefetchRows: about 8 KiB of rows ahead, a power of two.
func TestScoresPrefetchRows(t *testing.T) {
	for _, e := range decodeElems {
		r := scoresPrefetchRows(e)
		if r&(r-1) != 0 || r < 16 || r > 64 {
			t.Errorf("%s: %d rows", e.Name, r)
		}
	}
}
