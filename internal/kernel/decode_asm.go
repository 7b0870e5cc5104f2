//go:build (amd64 || arm64) && !purego

package kernel

import "math/bits"

// The decode kernels' tiling, shared by both architectures' wrappers.

// tileRows is the number of rows of the next tile when left rows remain:
// the largest power of two up to min(left, maxRows) (maxRows a power of
// two). Taking tiles of tileRows until no rows are left gives as many of
// maxRows as fit, then the binary digits of the rest, largest first.
func tileRows(left, maxRows int) int {
	return min(maxRows, 1<<(bits.Len(uint(left))-1))
}

// decodeBlockBytes is the size of the block of cache rows that all row
// tiles share before the next block is read (well inside L2).
const decodeBlockBytes = 64 << 10

// keysPerBlock is the number of cache rows of rowBytes bytes per block: a
// multiple of 16, at least 16.
func keysPerBlock(rowBytes int) int {
	return max(16, decodeBlockBytes/max(rowBytes, 1)&^15)
}

// elemSize is the size in bytes of one unit of a cache slice's length.
func elemSize[T any]() int {
	var z T
	switch any(z).(type) {
	case float32:
		return 4
	case uint16:
		return 2
	}
	return 1
}
