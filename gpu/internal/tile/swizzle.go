package tile

// Shared-memory tiles hold 16-bit elements, rows of Cols elements cut into
// 16-byte chunks of 8 elements. ldmatrix reads one chunk from each of 8
// consecutive rows; with rows a multiple of 128 bytes apart those chunks would
// all fall in the same 4 banks. The kernels therefore store chunk c of row r
// at chunk position c XOR (r mod 8) within the row (CUTLASS's Swizzle<3,3,3>),
// which spreads any 8 consecutive rows' chunk c over all 32 banks. A tile
// needs at least 8 chunks (64 elements) per row.

// ChunkBytes is the size of the unit of swizzling and of cp.async copies.
const ChunkBytes = 16

// Swizzle returns the chunk position in its row of chunk c of row r.
func Swizzle(r, c int) int { return c ^ (r & 7) }

// Offset returns the byte offset within a swizzled tile with rowChunks chunks
// per row of chunk c of row r.
func Offset(r, c, rowChunks int) int {
	return r*rowChunks*ChunkBytes + Swizzle(r, c)*ChunkBytes
}

// ElemOffset returns the byte offset of element (r, col) of a swizzled tile of
// 16-bit elements with rowChunks chunks per row.
func ElemOffset(r, col, rowChunks int) int {
	return Offset(r, col/8, rowChunks) + 2*(col%8)
}

// CopyChunk tells which chunk thread tid copies in its i-th copy of a tile of
// rows × rowChunks chunks with threads threads: consecutive threads take
// consecutive chunks of a row, so that a warp's global reads are contiguous.
func CopyChunk(tid, i, threads, rowChunks int) (row, chunk int) {
	id := tid + i*threads
	return id / rowChunks, id % rowChunks
}
