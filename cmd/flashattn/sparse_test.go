package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// The random block mask keeps the diagonal and the same number of blocks,
// round(density × blocks per row) (at least one), in every row of every
// head; the same seed gives the same mask, another seed another one.
func TestRandomBlockMask(t *testing.T) {
	for _, c := range []struct {
		heads, n int
		density  float64
		perRow   int
	}{{1, 1000, 0.1, 1}, {3, 4096, 0.1, 3}, {2, 4000, 0.5, 16}, {2, 640, 1, 5}, {1, 100, 0.01, 1}, {4, 2048, 0.05, 1}} {
		m, err := randomBlockMask(c.heads, c.n, c.density, 7)
		if err != nil {
			t.Fatal(err)
		}
		nqb, nkb := m.Blocks()
		if s := m.Shape(); s.Heads != c.heads || s.BlockQ != 128 || s.BlockK != 128 || nqb != nkb || nqb != (c.n+127)/128 {
			t.Fatalf("%+v: shape %+v, %d × %d blocks", c, s, nqb, nkb)
		}
		for h := 0; h < c.heads; h++ {
			for qb := 0; qb < nqb; qb++ {
				n := 0
				for kb := 0; kb < nkb; kb++ {
					if m.Kind(0, h, qb, kb) != flashattn.BlockEmpty {
						n++
					}
				}
				if n != c.perRow || m.Kind(0, h, qb, qb) != flashattn.BlockFull {
					t.Fatalf("%+v: head %d row %d holds %d blocks (diagonal %v), want %d with the diagonal", c, h, qb, n, m.Kind(0, h, qb, qb), c.perRow)
				}
			}
		}
		if d := m.Density(); math.Abs(d-float64(c.perRow)/float64(nkb)) > 1e-12 {
			t.Errorf("%+v: density %v", c, d)
		}
		again, _ := randomBlockMask(c.heads, c.n, c.density, 7)
		other, _ := randomBlockMask(c.heads, c.n, c.density, 8)
		same, differ := true, false
		for h := 0; h < c.heads; h++ {
			for qb := 0; qb < nqb; qb++ {
				for kb := 0; kb < nkb; kb++ {
					same = same && again.Kind(0, h, qb, kb) == m.Kind(0, h, qb, kb)
					differ = differ || other.Kind(0, h, qb, kb) != m.Kind(0, h, qb, kb)
				}
			}
		}
		if !same || (!differ && c.perRow > 1 && c.perRow < nkb) {
			t.Errorf("%+v: same seed same mask %v, other seed differs %v", c, same, differ)
		}
	}
	for _, d := range []float64{0, -0.1, 1.5, math.NaN()} {
		if _, err := randomBlockMask(1, 256, d, 1); err == nil {
			t.Errorf("density %v accepted", d)
		}
	}
}

// bench -variant block-sparse: the JSON carries the density and the
// median seconds per call, and its FLOPs count only the visible blocks.
func TestBenchBlockSparse(t *testing.T) {
	code, out, stderr := atRun("bench", "-seqlen", "640", "-headdim", "32", "-batch", "1", "-heads", "2", "-mode", "fwdbwd",
		"-variant", "block-sparse", "-density", "0.4", "-json", "-min-ms", "1", "-reps", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"seconds_median":`) || !strings.Contains(out, `"density":0.4`) {
		t.Fatalf("JSON %s lacks seconds_median or density", out)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	// 5 block rows × 2 blocks of 128² pairs per head, fwd+bwd = 3.5 × 4·pairs·D.
	flops := 3.5 * 4 * 2 * 5 * 2 * 128 * 128 * 32
	if got := r.GFlopsMedian * 1e9 * r.Seconds; math.Abs(got/flops-1) > 1e-6 || r.Variant != "block-sparse" || r.Causal {
		t.Errorf("result %+v: %g FLOPs, want %g", r, got, flops)
	}
}
