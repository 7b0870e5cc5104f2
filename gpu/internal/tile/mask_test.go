package tile

import "testing"

func masks() []Mask {
	var ms []Mask
	for _, sq := range []int{1, 7, 64, 65, 130} {
		for _, sk := range []int{1, 9, 64, 100, 200} {
			for _, lr := range [][2]int{{-1, -1}, {-1, 0}, {0, 0}, {5, 0}, {3, 7}, {-1, 20}, {40, -1}, {1000, 0}} {
				ms = append(ms, Mask{SeqQ: sq, SeqK: sk, Left: lr[0], Right: lr[1]})
			}
		}
	}
	return ms
}

// KeyBlocks visits every block holding a visible key of any row of the
// query block, and the blocks it skips hold none.
func TestKeyBlocks(t *testing.T) {
	for _, m := range masks() {
		for _, br := range []int{64, 128} {
			for _, bc := range []int{32, 64} {
				for m0 := 0; m0 < m.SeqQ; m0 += br {
					lo, hi := m.KeyBlocks(m0, br, bc)
					for j := 0; j < m.SeqK; j++ {
						vis := false
						for i := m0; i < min(m0+br, m.SeqQ); i++ {
							vis = vis || m.Visible(i, j)
						}
						in := j/bc >= lo && j/bc < hi
						if vis && !in {
							t.Fatalf("%+v rows %d+%d: key %d visible but block %d outside [%d,%d)", m, m0, br, j, j/bc, lo, hi)
						}
					}
					if lo < hi && (lo < 0 || hi > (m.SeqK+bc-1)/bc) {
						t.Fatalf("%+v: block range [%d,%d) outside the keys", m, lo, hi)
					}
				}
			}
		}
	}
}

// QueryBlocks visits every query block with a row that sees the key block.
func TestQueryBlocks(t *testing.T) {
	for _, m := range masks() {
		for _, bc := range []int{64} {
			for n0 := 0; n0 < m.SeqK; n0 += bc {
				lo, hi := m.QueryBlocks(n0, bc, 64)
				for i := 0; i < m.SeqQ; i++ {
					vis := false
					for j := n0; j < min(n0+bc, m.SeqK); j++ {
						vis = vis || m.Visible(i, j)
					}
					if vis && !(i/64 >= lo && i/64 < hi) {
						t.Fatalf("%+v keys %d+%d: row %d sees them but block %d outside [%d,%d)", m, n0, bc, i, i/64, lo, hi)
					}
				}
				if lo < hi && (lo < 0 || hi > (m.SeqQ+63)/64) {
					t.Fatalf("%+v: block range [%d,%d) outside the rows", m, lo, hi)
				}
			}
		}
	}
}

// A tile NeedsMask says needs no mask has only visible pairs.
func TestNeedsMask(t *testing.T) {
	for _, m := range masks() {
		for m0 := 0; m0 < m.SeqQ; m0 += 64 {
			for n0 := 0; n0 < m.SeqK; n0 += 32 {
				if m.NeedsMask(m0, 64, n0, 32) {
					continue
				}
				for i := m0; i < m0+64; i++ {
					for j := n0; j < n0+32; j++ {
						if !m.Visible(i, j) {
							t.Fatalf("%+v tile (%d,%d): pair (%d,%d) hidden but no mask", m, m0, n0, i, j)
						}
					}
				}
			}
		}
	}
}
