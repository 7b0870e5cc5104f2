package flashattn

import (
	"slices"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
)

// gridRotation hands a numeric grid's cases to the kernel paths its loop
// visits, one visit after another. Without the race detector every visit
// gets every case: the plain test run keeps the grid's whole breadth.
// Under -race, where the float64 reference loops run ten times slower and
// the grid would not fit go test's timeout, visit k of paths gets the cases
// i with i mod paths = k mod paths: every case still runs once under the
// race detector, each path runs about len(cases)/paths of them (at least
// one while there are as many cases as paths), and each of those calls
// still goes through the workers, splits and backward passes the race
// detector is there for. The share is deterministic: the same cases run on
// the same path every time.
type gridRotation struct {
	paths, visit int
}

// newGridRotation is a rotation over paths kernel paths (paths ≥ 1).
func newGridRotation(paths int) *gridRotation {
	return &gridRotation{paths: max(paths, 1)}
}

// kernelPaths is the number of kernel paths forEachKernel visits.
func kernelPaths() int { return len(kernel.Available()) }

// halfPaths is the number of 16-bit product paths forEachHalf visits for dt.
func halfPaths(dt DType) int { return len(kernel.HalfAvailable(dt.elem())) }

// gridShare returns the cases of g's next visit.
func gridShare[T any](g *gridRotation, cases []T) []T {
	k := g.visit % g.paths
	g.visit++
	if !raceEnabled {
		return cases
	}
	var share []T
	for i, c := range cases {
		if i%g.paths == k {
			share = append(share, c)
		}
	}
	return share
}

// TestGridShare: without the race detector every visit gets every case;
// under it the visits of one round over the paths share the cases out,
// each case once, each visit at least one, in the cases' order, and the
// next round repeats the first.
func TestGridShare(t *testing.T) {
	for _, tc := range []struct{ paths, cases int }{{1, 5}, {3, 7}, {15, 24}, {6, 24}, {3, 3}} {
		cases := make([]int, tc.cases)
		for i := range cases {
			cases[i] = i
		}
		g := newGridRotation(tc.paths)
		var rounds [2][]int
		for r := range rounds {
			for k := 0; k < tc.paths; k++ {
				share := gridShare(g, cases)
				if !raceEnabled && !slices.Equal(share, cases) {
					t.Fatalf("%d paths, visit %d: %v, want every case %v", tc.paths, k, share, cases)
				}
				if raceEnabled && len(share) == 0 {
					t.Fatalf("%d paths, %d cases: visit %d runs none", tc.paths, tc.cases, k)
				}
				rounds[r] = append(rounds[r], share...)
			}
		}
		want := cases
		if !raceEnabled {
			want = slices.Repeat(cases, tc.paths)
		}
		for r, got := range rounds {
			if !raceEnabled {
				if !slices.Equal(got, want) {
					t.Errorf("%d paths: round %d ran %v, want %v", tc.paths, r, got, want)
				}
				continue
			}
			if slices.Sort(got); !slices.Equal(got, want) {
				t.Errorf("%d paths, %d cases: round %d ran %v, want each case once", tc.paths, tc.cases, r, got)
			}
		}
	}
}
