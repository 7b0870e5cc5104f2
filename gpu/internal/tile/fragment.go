package tile

// Fragment ownership of mma.sync.aligned.m16n8k16 with .f16/.bf16 inputs and
// .f32 accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
// floating point type"). A warp computes D = A·B + C with A 16×16 (row
// major), B 16×8 (column major) and C, D 16×8. With g = lane>>2 and
// t = lane&3:
//
//	A: four .b32 registers, each two 16-bit elements (low half first):
//	   reg 0 = A[g][2t..2t+1], reg 1 = A[g+8][2t..], reg 2 = A[g][2t+8..], reg 3 = A[g+8][2t+8..]
//	B: two .b32 registers: reg 0 = B[2t..2t+1][g], reg 1 = B[2t+8..2t+9][g]
//	C: four .f32 registers: C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]

// MmaA returns the (row, col) of A held by lane in register reg (0..3),
// half (0 = low 16 bits, 1 = high).
func MmaA(lane, reg, half int) (row, col int) {
	g, t := lane>>2, lane&3
	row = g + 8*(reg&1)
	col = 2*t + half + 8*(reg>>1)
	return row, col
}

// MmaB returns the (k, n) of B held by lane in register reg (0..1), half.
func MmaB(lane, reg, half int) (k, n int) {
	g, t := lane>>2, lane&3
	return 2*t + half + 8*reg, g
}

// MmaC returns the (row, col) of the accumulator element i (0..3) of lane.
func MmaC(lane, i int) (row, col int) {
	g, t := lane>>2, lane&3
	return g + 8*(i>>1), 2*t + (i & 1)
}

// ldmatrix.sync.aligned.m8n8.x4.b16: lanes 8m..8m+7 supply the shared-memory
// addresses of rows 0..7 of matrix m (16 bytes each); register m of every
// lane receives two 16-bit elements of matrix m. Without .trans, lane gets
// row lane>>2, columns 2(lane&3) and 2(lane&3)+1; with .trans it gets rows
// 2(lane&3) and 2(lane&3)+1 of column lane>>2 (the matrix as stored).

// LdmatrixElem returns the stored (row, col) within an 8×8 matrix of the
// element that lane receives in the given half of its register.
func LdmatrixElem(lane, half int, trans bool) (row, col int) {
	if trans {
		return 2*(lane&3) + half, lane >> 2
	}
	return lane >> 2, 2*(lane&3) + half
}

// The kernels load 16×16 blocks with one ldmatrix.x4 in four ways. Each
// function below returns, for a lane, which row of the stored tile and which
// 8-column chunk (8 elements = 16 bytes) it supplies the address of, given
// the block's origin (r0, c0) in the stored tile (c0 a multiple of 8). The
// registers received then form mma fragments as follows.

// LaneA is the address of lane for an A operand (16 rows × 16 k) stored
// row-major as [m][k] (Q in the forward pass): registers 0..3 become A's
// registers 0..3.
func LaneA(lane, r0, c0 int) (row, chunk int) {
	m := lane >> 3
	return r0 + lane&7 + 8*(m&1), c0/8 + m>>1
}

// LaneATrans is the address of lane for an A operand (16 m × 16 k) stored
// transposed as [k][m] (dSᵀ in the backward pass), loaded with .trans: the
// block origin (r0, c0) is (k0, m0) in the stored tile; registers 0..3 become
// A's registers 0..3.
func LaneATrans(lane, r0, c0 int) (row, chunk int) {
	m := lane >> 3
	return r0 + lane&7 + 8*(m>>1), c0/8 + m&1
}

// LaneB is the address of lane for two B operands (16 k × 8 n each, n-tiles
// n0 and n0+8) stored as [n][k] (K in S = Q·Kᵀ), loaded without .trans; the
// block origin (r0, c0) is (n0, k0). Registers 0, 1 become the B registers of
// the first n-tile and registers 2, 3 those of the second.
func LaneB(lane, r0, c0 int) (row, chunk int) {
	m := lane >> 3
	return r0 + lane&7 + 8*(m>>1), c0/8 + m&1
}

// LaneBTrans is the address of lane for two B operands stored as [k][n] (V in
// O = P·V), loaded with .trans; the block origin (r0, c0) is (k0, n0).
// Registers are arranged as for LaneB.
func LaneBTrans(lane, r0, c0 int) (row, chunk int) {
	m := lane >> 3
	return r0 + lane&7 + 8*(m&1), c0/8 + m>>1
}

// CToA tells where the A operand of k-step kk comes from when an accumulator
// S (16 rows × 8-column n-tiles) is reused as the A operand of the next
// product (P in O += P·V): register reg, half of A is element i of the
// accumulator n-tile 2·kk + nt. The two f32 values are packed low half first
// (cvt.rn.bf16x2.f32 d, hi, lo).
func CToA(reg, half int) (nt, i int) { return reg >> 1, 2*(reg&1) + half }

// The kernels compute ldmatrix addresses from per-lane offsets computed once.
// LaneA and LaneBTrans share one lane pattern (PatternRowMajor), LaneB and
// LaneATrans the other (PatternColMajor). For a block at (r0, c0), r0 and c0
// multiples of 16, in a swizzled tile with rowChunks >= 8 chunks per row, the
// byte offset a lane supplies is
//
//	BlockBase(r0, c0, rowChunks) + LaneOffset(pattern, lane, rowChunks, BlockJ(c0))
//
// where the lane term takes one of four values per lane (BlockJ = 0..3).
const (
	PatternRowMajor = iota // LaneA, LaneBTrans
	PatternColMajor        // LaneB, LaneATrans
)

// LaneOffset is the lane-dependent part of an ldmatrix address.
func LaneOffset(pattern, lane, rowChunks, j int) int {
	var lr, lc int
	if pattern == PatternRowMajor {
		lr, lc = lane&15, lane>>4
	} else {
		lr, lc = lane&7|(lane>>4)<<3, (lane>>3)&1
	}
	return lr*rowChunks*ChunkBytes + ((2*j+lc)^(lane&7))*ChunkBytes
}

// BlockBase is the lane-independent part of an ldmatrix address.
func BlockBase(r0, c0, rowChunks int) int {
	return r0*rowChunks*ChunkBytes + (c0/8)&^7*ChunkBytes
}

// BlockJ selects which of a lane's four offsets a block at column c0 uses.
func BlockJ(c0 int) int { return (c0 / 8 & 7) / 2 }
