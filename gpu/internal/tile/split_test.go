package tile

import "testing"

// The parts of SplitRange cover a block's key tiles exactly once, in order,
// none longer than ceil(tiles/n), and an empty range gives empty parts.
func TestSplitRange(t *testing.T) {
	for nlo := 0; nlo < 5; nlo++ {
		for nhi := nlo - 2; nhi < nlo+40; nhi++ {
			for n := 1; n <= 45; n++ {
				next := nlo
				for s := range n {
					lo, hi := SplitRange(nlo, nhi, s, n)
					if lo >= hi {
						continue
					}
					if lo != next || hi-lo > ceilDiv(nhi-nlo, n) {
						t.Fatalf("[%d,%d) in %d: part %d is [%d,%d), want it from %d", nlo, nhi, n, s, lo, hi, next)
					}
					next = hi
				}
				if want := max(nlo, nhi); next != want {
					t.Fatalf("[%d,%d) in %d parts: covered up to %d", nlo, nhi, n, next)
				}
			}
		}
	}
}

// NumSplits follows flash-attn's rule: its own example (48 blocks, 108
// slots: 2 splits, 89% of a wave, rather than 3), the gate on slots,
// limits, and counts that only add empty splits skipped.
func TestNumSplits(t *testing.T) {
	cases := []struct {
		name                        string
		blocks, slots, tiles, limit int
		want                        int
	}{
		{"flash-attn's example", 48, 108, 1000, 128, 2},
		{"one block per slot already", 132, 132, 1000, 128, 1},
		{"one tile", 2, 264, 1, 128, 1},
		{"two tiles", 2, 264, 2, 128, 2},
		// 3 tiles: 3 splits fill 6/264 of a wave, 2 give 4/264; 85% of
		// 6 is 5.1, so 3.
		{"three tiles", 2, 264, 3, 128, 3},
		// 5 tiles: 4 splits give 2 tiles per split like 3, so 3 or 5:
		// 3 fills 6/10 of 5's; 5.
		{"ineligible counts", 2, 264, 5, 128, 5},
		{"limit", 1, 1000, 1000, 4, 4},
		{"no slots", 4, 0, 100, 128, 1},
		// 128 tiles: 65 to 127 splits give 2 tiles per split as 64 does,
		// and 128 is the best fill.
		{"capped at MaxSplits", 1, 10000, 128, 1000, MaxSplits},
		// 10000 tiles: 128 splits give 79 tiles each like 127, the best;
		// 108 is the fewest within 85% of 127.
		{"one block, 10000 tiles", 1, 10000, 10000, 1000, 108},
	}
	for _, c := range cases {
		if got := NumSplits(c.blocks, c.slots, c.tiles, c.limit); got != c.want {
			t.Errorf("%s: NumSplits(%d, %d, %d, %d) = %d, want %d", c.name, c.blocks, c.slots, c.tiles, c.limit, got, c.want)
		}
	}
}

// The split configurations are valid, fit sm_80's shared memory at their
// blocks per SM, and name their kernels apart from the forward's.
func TestFwdSplitConfig(t *testing.T) {
	for _, d := range HeadDims {
		c := FwdSplitConfig(d)
		if err := c.Check(); err != nil {
			t.Errorf("d%d: %v", d, err)
		}
		if !c.Split || c.Name("bf16") == FwdConfig(d).Name("bf16") {
			t.Errorf("d%d: %+v named %s", d, c, c.Name("bf16"))
		}
		if c.BlocksPerSM()*(c.SmemBytes()+1024) > 164<<10 {
			t.Errorf("d%d: %d blocks of %d bytes exceed sm_80's shared memory", d, c.BlocksPerSM(), c.SmemBytes())
		}
		if SmemBytes(c.Name("f16"), d) != c.SmemBytes() || Threads(c.Name("f16"), d) != c.Threads() {
			t.Errorf("d%d: SmemBytes/Threads by name disagree with the configuration", d)
		}
		if SmemBytes(CombineName("f16", d), d) != 0 || Threads(CombineName("f16", d), d) != ElemThreads {
			t.Errorf("d%d: combine kernel's launch geometry", d)
		}
	}
}
