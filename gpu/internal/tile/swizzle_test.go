package tile

import "testing"

// Swizzling is a bijection of each row's chunks.
func TestSwizzleBijective(t *testing.T) {
	for _, rc := range []int{8, 16, 32} {
		seen := map[int]bool{}
		for r := 0; r < 64; r++ {
			for c := 0; c < rc; c++ {
				off := Offset(r, c, rc)
				if off < r*rc*ChunkBytes || off >= (r+1)*rc*ChunkBytes || seen[off] {
					t.Fatalf("rowChunks %d: chunk (%d,%d) at %d collides or leaves its row", rc, r, c, off)
				}
				seen[off] = true
			}
		}
	}
}

// Each 8-lane phase of every ldmatrix the kernels issue reads 8 chunks in 8
// distinct 16-byte bank groups (no shared-memory bank conflict).
func TestLdmatrixConflictFree(t *testing.T) {
	modes := map[string]func(l, r0, c0 int) (int, int){
		"A": LaneA, "ATrans": LaneATrans, "B": LaneB, "BTrans": LaneBTrans,
	}
	for name, f := range modes {
		for _, rc := range []int{8, 16, 32} {
			for r0 := 0; r0 < 64; r0 += 16 {
				for c0 := 0; c0 < rc*8; c0 += 16 {
					for m := 0; m < 4; m++ {
						var banks [8]bool
						for l := 8 * m; l < 8*m+8; l++ {
							r, c := f(l, r0, c0)
							g := (Offset(r, c, rc) / ChunkBytes) % 8
							if banks[g] {
								t.Fatalf("%s rowChunks %d block (%d,%d) matrix %d: bank group %d twice", name, rc, r0, c0, m, g)
							}
							banks[g] = true
						}
					}
				}
			}
		}
	}
}

// The copy schedule covers every chunk of a tile exactly once.
func TestCopyChunkCovers(t *testing.T) {
	for _, shape := range [][2]int{{64, 8}, {64, 16}, {128, 8}, {32, 32}, {64, 32}} {
		rows, rc := shape[0], shape[1]
		const threads = 128
		n := rows * rc / threads
		seen := make([]bool, rows*rc)
		for tid := 0; tid < threads; tid++ {
			for i := 0; i < n; i++ {
				r, c := CopyChunk(tid, i, threads, rc)
				if r >= rows || seen[r*rc+c] {
					t.Fatalf("%dx%d: thread %d copy %d -> (%d,%d) out of range or twice", rows, rc, tid, i, r, c)
				}
				seen[r*rc+c] = true
			}
		}
	}
}

// The generator's split address (BlockBase + LaneOffset) equals the swizzled
// offset of the row and chunk each Lane function names.
func TestLaneOffsets(t *testing.T) {
	modes := []struct {
		f       func(l, r0, c0 int) (int, int)
		pattern int
	}{{LaneA, PatternRowMajor}, {LaneBTrans, PatternRowMajor}, {LaneB, PatternColMajor}, {LaneATrans, PatternColMajor}}
	for mi, m := range modes {
		for _, rc := range []int{8, 16, 32} {
			for r0 := 0; r0 < 128; r0 += 16 {
				for c0 := 0; c0 < rc*8; c0 += 16 {
					for l := 0; l < 32; l++ {
						r, c := m.f(l, r0, c0)
						want := Offset(r, c, rc)
						got := BlockBase(r0, c0, rc) + LaneOffset(m.pattern, l, rc, BlockJ(c0))
						if got != want {
							t.Fatalf("mode %d rc %d block (%d,%d) lane %d: %d, want %d", mi, rc, r0, c0, l, got, want)
						}
					}
				}
			}
		}
	}
}
