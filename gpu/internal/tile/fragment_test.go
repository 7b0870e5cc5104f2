package tile

import (
	"math/rand/v2"
	"testing"
)

// The documented positions of a few lanes (PTX ISA figures for m16n8k16).
func TestMmaLayoutsMatchISA(t *testing.T) {
	for _, c := range []struct {
		lane, reg, half, row, col int
	}{
		{0, 0, 0, 0, 0}, {0, 0, 1, 0, 1}, {1, 0, 0, 0, 2}, {4, 0, 0, 1, 0},
		{5, 3, 1, 9, 11}, {31, 1, 0, 15, 6}, {31, 2, 1, 7, 15}, {2, 2, 0, 0, 12},
	} {
		if r, k := MmaA(c.lane, c.reg, c.half); r != c.row || k != c.col {
			t.Errorf("MmaA(%d,%d,%d) = (%d,%d), want (%d,%d)", c.lane, c.reg, c.half, r, k, c.row, c.col)
		}
	}
	for _, c := range []struct{ lane, reg, half, k, n int }{
		{0, 0, 0, 0, 0}, {0, 1, 1, 9, 0}, {3, 0, 1, 7, 0}, {4, 0, 0, 0, 1}, {30, 1, 0, 12, 7},
	} {
		if k, n := MmaB(c.lane, c.reg, c.half); k != c.k || n != c.n {
			t.Errorf("MmaB(%d,%d,%d) = (%d,%d), want (%d,%d)", c.lane, c.reg, c.half, k, n, c.k, c.n)
		}
	}
	for _, c := range []struct{ lane, i, row, col int }{
		{0, 0, 0, 0}, {0, 3, 8, 1}, {7, 1, 1, 7}, {29, 2, 15, 2},
	} {
		if r, k := MmaC(c.lane, c.i); r != c.row || k != c.col {
			t.Errorf("MmaC(%d,%d) = (%d,%d), want (%d,%d)", c.lane, c.i, r, k, c.row, c.col)
		}
	}
}

// Every element of A, B and C is held by exactly one (lane, register, half).
func TestMmaLayoutsArePartitions(t *testing.T) {
	var a [16][16]int
	var b [16][8]int
	var c [16][8]int
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			for h := 0; h < 2; h++ {
				i, j := MmaA(l, r, h)
				a[i][j]++
			}
			i, j := MmaC(l, r)
			c[i][j]++
		}
		for r := 0; r < 2; r++ {
			for h := 0; h < 2; h++ {
				k, n := MmaB(l, r, h)
				b[k][n]++
			}
		}
	}
	for i := range 16 {
		for j := range 16 {
			if a[i][j] != 1 {
				t.Fatalf("A[%d][%d] held %d times", i, j, a[i][j])
			}
		}
		for j := range 8 {
			if b[i][j] != 1 || c[i][j] != 1 {
				t.Fatalf("B[%d][%d] held %d times, C %d times", i, j, b[i][j], c[i][j])
			}
		}
	}
}

// An accumulator reused as an A operand (CToA) lands where A expects it.
func TestCToA(t *testing.T) {
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			for h := 0; h < 2; h++ {
				nt, i := CToA(r, h)
				cr, cc := MmaC(l, i)
				ar, ac := MmaA(l, r, h)
				if cr != ar || cc+8*nt != ac {
					t.Fatalf("lane %d reg %d half %d: C gives (%d,%d), A wants (%d,%d)", l, r, h, cr, cc+8*nt, ar, ac)
				}
			}
		}
	}
}

// smem simulates shared memory holding 16-bit elements (as float64 values).
type smem []float64

func (s smem) at(off int) float64 { return s[off/2] }

// storeTile writes m (rows × cols) into a swizzled tile at byte offset base.
func (s smem) storeTile(base int, m [][]float64) {
	rc := len(m[0]) / 8
	for r := range m {
		for c := range m[r] {
			s[(base+ElemOffset(r, c, rc))/2] = m[r][c]
		}
	}
}

// ldmatrix simulates ldmatrix.sync.aligned.m8n8.x4(.trans).b16: addr[l] is
// the byte address lane l supplies.
func (s smem) ldmatrix(addr [32]int, trans bool) (reg [32][4][2]float64) {
	for l := 0; l < 32; l++ {
		for m := 0; m < 4; m++ {
			for h := 0; h < 2; h++ {
				r, c := LdmatrixElem(l, h, trans)
				reg[l][m][h] = s.at(addr[8*m+r] + 2*c)
			}
		}
	}
	return reg
}

// lanes gathers the addresses of one ldmatrix.x4 in a swizzled tile.
func lanes(base, rowChunks int, f func(lane int) (row, chunk int)) (addr [32]int) {
	for l := range addr {
		r, c := f(l)
		addr[l] = base + Offset(r, c, rowChunks)
	}
	return addr
}

// mma simulates mma.sync.aligned.m16n8k16.row.col.f32: it rebuilds A and B
// from the fragments as the ISA documents them and accumulates into c.
func mma(a [32][4][2]float64, b [32][2][2]float64, c *[32][4]float64) {
	var A [16][16]float64
	var B [16][8]float64
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			for h := 0; h < 2; h++ {
				i, j := MmaA(l, r, h)
				A[i][j] = a[l][r][h]
			}
		}
		for r := 0; r < 2; r++ {
			for h := 0; h < 2; h++ {
				k, n := MmaB(l, r, h)
				B[k][n] = b[l][r][h]
			}
		}
	}
	for l := 0; l < 32; l++ {
		for i := 0; i < 4; i++ {
			row, col := MmaC(l, i)
			for k := 0; k < 16; k++ {
				c[l][i] += A[row][k] * B[k][col]
			}
		}
	}
}

// bPair splits the registers of an ldmatrix.x4 for two n-tiles (LaneB,
// LaneBTrans): registers 0, 1 feed n-tile 0 and 2, 3 n-tile 1.
func bPair(reg [32][4][2]float64) (b0, b1 [32][2][2]float64) {
	for l := range reg {
		b0[l] = [2][2]float64{reg[l][0], reg[l][1]}
		b1[l] = [2][2]float64{reg[l][2], reg[l][3]}
	}
	return b0, b1
}

// aFromC packs accumulator n-tiles 2kk, 2kk+1 into an A fragment (CToA).
func aFromC(acc [][32][4]float64, kk int) (a [32][4][2]float64) {
	for l := 0; l < 32; l++ {
		for r := 0; r < 4; r++ {
			for h := 0; h < 2; h++ {
				nt, i := CToA(r, h)
				a[l][r][h] = acc[2*kk+nt][l][i]
			}
		}
	}
	return a
}

func randMat(rng *rand.Rand, rows, cols int) [][]float64 {
	m := make([][]float64, rows)
	for i := range m {
		m[i] = make([]float64, cols)
		for j := range m[i] {
			m[i][j] = float64(rng.IntN(17) - 8) // small integers: exact products
		}
	}
	return m
}

// warpGemmNT computes, the way the kernels do, the 16 × n product
// X[r0:r0+16, :k] · Y[:n, :k]ᵀ of two tiles stored row-major (swizzled) at
// xBase and yBase, with A via LaneA and B via LaneB (S = Q·Kᵀ).
func warpGemmNT(s smem, xBase, xChunks, r0, yBase, yChunks, n, k int) [][32][4]float64 {
	acc := make([][32][4]float64, n/8)
	for nt2 := 0; nt2 < n/16; nt2++ {
		for ks := 0; ks < k/16; ks++ {
			a := s.ldmatrix(lanes(xBase, xChunks, func(l int) (int, int) { return LaneA(l, r0, ks*16) }), false)
			b0, b1 := bPair(s.ldmatrix(lanes(yBase, yChunks, func(l int) (int, int) { return LaneB(l, nt2*16, ks*16) }), false))
			mma(a, b0, &acc[2*nt2])
			mma(a, b1, &acc[2*nt2+1])
		}
	}
	return acc
}

// warpGemmNN computes A · Y[:k, :n] where A's fragments for k-step kk come
// from afrag(kk) and Y is stored row-major [k][n] at yBase (B via
// LaneBTrans: O = P·V).
func warpGemmNN(s smem, afrag func(kk int) [32][4][2]float64, yBase, yChunks, n, k int) [][32][4]float64 {
	acc := make([][32][4]float64, n/8)
	for kk := 0; kk < k/16; kk++ {
		a := afrag(kk)
		for nt2 := 0; nt2 < n/16; nt2++ {
			b0, b1 := bPair(s.ldmatrix(lanes(yBase, yChunks, func(l int) (int, int) { return LaneBTrans(l, kk*16, nt2*16) }), true))
			mma(a, b0, &acc[2*nt2])
			mma(a, b1, &acc[2*nt2+1])
		}
	}
	return acc
}

// warpGemmNNCols is warpGemmNN for the n columns [c0, c0+n) of Y.
func warpGemmNNCols(s smem, afrag func(kk int) [32][4][2]float64, yBase, yChunks, c0, n, k int) [][32][4]float64 {
	acc := make([][32][4]float64, n/8)
	for kk := 0; kk < k/16; kk++ {
		a := afrag(kk)
		for nt2 := 0; nt2 < n/16; nt2++ {
			b0, b1 := bPair(s.ldmatrix(lanes(yBase, yChunks, func(l int) (int, int) { return LaneBTrans(l, kk*16, c0+nt2*16) }), true))
			mma(a, b0, &acc[2*nt2])
			mma(a, b1, &acc[2*nt2+1])
		}
	}
	return acc
}

// checkAcc compares warp accumulators (16 rows starting at r0 of want) with want.
func checkAcc(t *testing.T, what string, acc [][32][4]float64, want [][]float64, r0 int) {
	t.Helper()
	for nt := range acc {
		for l := 0; l < 32; l++ {
			for i := 0; i < 4; i++ {
				row, col := MmaC(l, i)
				if g, w := acc[nt][l][i], want[r0+row][8*nt+col]; g != w {
					t.Fatalf("%s: row %d col %d: got %v, want %v", what, r0+row, 8*nt+col, g, w)
				}
			}
		}
	}
}

func matmulNT(x, y [][]float64) [][]float64 { // x · yᵀ
	out := make([][]float64, len(x))
	for i := range x {
		out[i] = make([]float64, len(y))
		for j := range y {
			for k := range x[i] {
				out[i][j] += x[i][k] * y[j][k]
			}
		}
	}
	return out
}

func transpose(x [][]float64) [][]float64 {
	out := make([][]float64, len(x[0]))
	for j := range out {
		out[j] = make([]float64, len(x))
		for i := range x {
			out[j][i] = x[i][j]
		}
	}
	return out
}

// The forward pass: S = Q·Kᵀ through LaneA/LaneB, then O = S·V with S reused
// in registers (CToA) and V through LaneBTrans, for every warp of the block,
// in the forward and the split-KV configurations.
func TestForwardFragments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var configs []Fwd
	for _, d := range HeadDims {
		configs = append(configs, FwdConfig(d), FwdSplitConfig(d))
	}
	for _, c := range configs {
		d := c.D
		if err := c.Check(); err != nil {
			t.Fatal(err)
		}
		q, k, v := randMat(rng, c.Br(), d), randMat(rng, c.Bc, d), randMat(rng, c.Bc, d)
		s := make(smem, c.SmemBytes()/2)
		s.storeTile(c.QOff(), q)
		s.storeTile(c.KOff(), k)
		s.storeTile(c.VOff(), v)
		S := matmulNT(q, k)
		O := matmulNT(S, transpose(v))
		for w := 0; w < c.Warps; w++ {
			for mt := 0; mt < c.MT; mt++ {
				r0 := (w*c.MT + mt) * 16
				acc := warpGemmNT(s, c.QOff(), c.RowChunks(), r0, c.KOff(), c.RowChunks(), c.Bc, d)
				checkAcc(t, "S", acc, S, r0)
				o := warpGemmNN(s, func(kk int) [32][4][2]float64 { return aFromC(acc, kk) }, c.VOff(), c.RowChunks(), d, c.Bc)
				checkAcc(t, "O", o, O, r0)
			}
		}
	}
}

// The backward dK/dV kernel, flash-attn 2's warp layouts (Bwd): warp
// (kg, h) = (w % KeyGroups, w / KeyGroups) computes, per 16-key m-tile of
// its 32 keys r0 = 32kg + 16mt,
//
//	Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ over the queries of half h (LaneA on K and V,
//	LaneB on Q and dO), stored to the Pᵀ and dSᵀ tiles from the
//	accumulators;
//	dV = Pᵀ·dO and dK = dSᵀ·Q over the D/2 columns of half h (LaneA on the
//	stored Pᵀ and dSᵀ, LaneBTrans on dO and Q);
//
// and dQ = dS·K with dS through LaneATrans and K through LaneBTrans, warp w
// computing rows 32·(w % DQRowGroups) and DQCols columns.
func TestBackwardFragments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range []int{64, 128} {
		c := BwdConfig(d)
		if err := c.Check(); err != nil {
			t.Fatal(err)
		}
		bc, br, rc := c.Bc(), c.Br, c.RowChunks()
		q, k, v, do := randMat(rng, br, d), randMat(rng, bc, d), randMat(rng, bc, d), randMat(rng, br, d)
		s := make(smem, c.SmemBytes()/2)
		s.storeTile(c.KOff(), k)
		s.storeTile(c.VOff(), v)
		s.storeTile(c.QOff(1), q)
		s.storeTile(c.DOOff(1), do)
		ST := matmulNT(k, q)               // [bc][br]
		dVw := matmulNT(ST, transpose(do)) // Sᵀ·dO: [bc][d]
		dPT := matmulNT(v, do)             // [bc][br]
		dKw := matmulNT(dPT, transpose(q)) // dPᵀ·Q with dPᵀ as the stand-in for dSᵀ
		dQw := matmulNT(transpose(dPT), transpose(k))
		store := func(off, r0, c0 int, acc [][32][4]float64) {
			for nt := range acc {
				for l := 0; l < 32; l++ {
					for i := 0; i < 4; i += 2 {
						row, col := MmaC(l, i)
						o := off + ElemOffset(r0+row, c0+8*nt+col, br/8)
						s[o/2], s[o/2+1] = acc[nt][l][i], acc[nt][l][i+1]
					}
				}
			}
		}
		for w := 0; w < c.Warps; w++ {
			kg, h := w%c.KeyGroups(), w/c.KeyGroups()
			q0 := h * br / 2
			for mt := range 2 {
				r0 := 32*kg + 16*mt
				st := warpGemmNT(s, c.KOff(), rc, r0, c.QOff(1)+q0*rc*ChunkBytes, rc, br/2, d)
				checkAcc(t, "Sᵀ", st, cols(ST, q0), r0)
				dpt := warpGemmNT(s, c.VOff(), rc, r0, c.DOOff(1)+q0*rc*ChunkBytes, rc, br/2, d)
				checkAcc(t, "dPᵀ", dpt, cols(dPT, q0), r0)
				store(c.PTOff(), r0, q0, st)
				store(c.DSOff(), r0, q0, dpt)
			}
		}
		for w := 0; w < c.Warps; w++ {
			kg, h := w%c.KeyGroups(), w/c.KeyGroups()
			c0 := h * d / 2
			for mt := range 2 {
				r0 := 32*kg + 16*mt
				afrag := func(off int) func(kk int) [32][4][2]float64 {
					return func(kk int) [32][4][2]float64 {
						return s.ldmatrix(lanes(off, br/8, func(l int) (int, int) { return LaneA(l, r0, kk*16) }), false)
					}
				}
				dv := warpGemmNNCols(s, afrag(c.PTOff()), c.DOOff(1), rc, c0, d/2, br)
				checkAcc(t, "dV", dv, cols(dVw, c0), r0)
				dk := warpGemmNNCols(s, afrag(c.DSOff()), c.QOff(1), rc, c0, d/2, br)
				checkAcc(t, "dK", dk, cols(dKw, c0), r0)
			}
		}
		for w := 0; w < c.Warps; w++ {
			c0 := (w / c.DQRowGroups()) * c.DQCols()
			for mt := range 2 {
				m0 := 32*(w%c.DQRowGroups()) + 16*mt
				afrag := func(kk int) [32][4][2]float64 {
					return s.ldmatrix(lanes(c.DSOff(), br/8, func(l int) (int, int) { return LaneATrans(l, kk*16, m0) }), true)
				}
				dq := warpGemmNNCols(s, afrag, c.KOff(), rc, c0, c.DQCols(), bc)
				checkAcc(t, "dQ", dq, cols(dQw, c0), m0)
			}
		}
	}
}

// cols returns m's columns from c0 on.
func cols(m [][]float64, c0 int) [][]float64 {
	out := make([][]float64, len(m))
	for i, r := range m {
		out[i] = r[c0:]
	}
	return out
}

// The deterministic dQ kernel: S = Q·Kᵀ and dP = dO·Vᵀ (LaneA, LaneB), then
// dQ = dS·K with dS reused in registers and K through LaneBTrans.
func TestDQFragments(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range []int{64, 128} {
		c := DQConfig(d)
		if err := c.Check(); err != nil {
			t.Fatal(err)
		}
		rc := c.RowChunks()
		q, do, k, v := randMat(rng, c.Br(), d), randMat(rng, c.Br(), d), randMat(rng, c.Bc, d), randMat(rng, c.Bc, d)
		s := make(smem, c.SmemBytes()/2)
		s.storeTile(c.QOff(), q)
		s.storeTile(c.DOOff(), do)
		s.storeTile(c.KOff(1), k)
		s.storeTile(c.VOff(), v)
		S, dP := matmulNT(q, k), matmulNT(do, v)
		dQ := matmulNT(dP, transpose(k))
		for w := 0; w < c.Warps; w++ {
			r0 := 16 * w
			checkAcc(t, "S", warpGemmNT(s, c.QOff(), rc, r0, c.KOff(1), rc, c.Bc, d), S, r0)
			dp := warpGemmNT(s, c.DOOff(), rc, r0, c.VOff(), rc, c.Bc, d)
			checkAcc(t, "dP", dp, dP, r0)
			dq := warpGemmNN(s, func(kk int) [32][4][2]float64 { return aFromC(dp, kk) }, c.KOff(1), rc, d, c.Bc)
			checkAcc(t, "dQ", dq, dQ, r0)
		}
	}
}
