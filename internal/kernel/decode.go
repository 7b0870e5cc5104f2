package kernel

// Decode holds the kernels of attention decoding: products of a few query
// rows with a KV cache read in place, in the cache's storage type, so that
// each cache byte is read from memory once and widened to float32 in
// registers. Every function panics if its arguments break the
// preconditions below (a bug in the caller, not bad user input).
//
// Scores<T>(s, lds, q, m, k, ldk, n, d) sets
//
//	s[r*lds+j] = Σ_{p<d} q[r*d+p]·K[j][p]    for r < m, j < n
//
// Q is m×d float32, contiguous; key j is the row of d values at k[j*ldk:],
// ldk >= d elements (for q8_0: d/32 blocks at k[j*ldk:], ldk >= d/32·34
// bytes); S is m×n float32 with row stride lds >= n. Accum<T>(o, ldo, p,
// ldp, m, v, ldv, n, d) adds
//
//	o[r*ldo+c] += Σ_{j<n} p[r*ldp+j]·V[j][c]  for r < m, c < d
//
// with V's rows stored like K's, P m×n with row stride ldp >= n and O m×d
// with row stride ldo >= d. Any m, n, d >= 0 are accepted (for q8_0, d a
// multiple of 32); the assembly kernels take tiles of 1, 2, 4, 8 or 16
// rows (AVX2: up to 8) and split other counts (12 = 8+4) into tiles that
// share each block of cache rows while it is in L2. S or O must not overlap the other arguments. Sums
// are in float32, in an order that differs between implementations.
//
// Speed: one query row (m = 1) is memory-bound, and the kernels read the
// cache at about the speed of ReadSum; every further row adds 2 FLOPs per
// cache element read, so that beyond a few rows they are compute-bound
// instead (measured on one AMD Zen 4 core: float32 near memory speed up to
// m = 8, bf16 and fp16 up to m = 4; q8_0, whose widening costs more per
// byte, needs two cores at m = 1). With m >= 8, give S a row stride lds that is not a
// multiple of 1024 (rows 4 KiB apart share an L1 set), such as n+16. The
// kernels prefetch ahead within a call, so calls should cover hundreds of
// keys or more.
//
// ReadSum returns the wrapping sum of the little-endian uint32 words of b
// (its bytes beyond a multiple of 4 ignored): a plain read of b at full
// vector width, the yardstick of the kernels' memory bandwidth.
type Decode struct {
	// Name is "avx512", "avx2" or "generic" (the names of the family
	// "decode" in FLASHATTN_KERNEL).
	Name string

	// ScoresF32 … ScoresQ8 compute S = Q·Kᵀ for a float32, bfloat16
	// (uint16 words), fp16 (uint16 words) or q8_0 (bytes) key cache.
	ScoresF32  func(s []float32, lds int, q []float32, m int, k []float32, ldk, n, d int)
	ScoresBF16 func(s []float32, lds int, q []float32, m int, k []uint16, ldk, n, d int)
	ScoresF16  func(s []float32, lds int, q []float32, m int, k []uint16, ldk, n, d int)
	ScoresQ8   func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int)

	// AccumF32 … AccumQ8 add P·V to O for a value cache of the same types.
	AccumF32  func(o []float32, ldo int, p []float32, ldp, m int, v []float32, ldv, n, d int)
	AccumBF16 func(o []float32, ldo int, p []float32, ldp, m int, v []uint16, ldv, n, d int)
	AccumF16  func(o []float32, ldo int, p []float32, ldp, m int, v []uint16, ldv, n, d int)
	AccumQ8   func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int)

	// ReadSum is the read-bandwidth yardstick (see above).
	ReadSum func(b []byte) uint32
}

// checkDecode panics unless the arguments of a Scores or Accum call are
// consistent: out is rows×cols with stride ldOut, in (P or Q) rows×inCols
// with stride ldIn, the cache n rows of rowLen units (elements or bytes)
// with stride ldc, in a slice of cacheLen units.
func checkDecode(name string, m, n, d int, out []float32, outCols, ldOut int, in []float32, inCols, ldIn int, cacheLen, rowLen, ldc int) {
	if m < 0 || n < 0 || d < 0 {
		bad(name + ": negative dimension")
	}
	checkMatrix(name+" out", len(out), m, outCols, ldOut)
	checkMatrix(name+" in", len(in), m, inCols, ldIn)
	checkMatrix(name+" cache", cacheLen, n, rowLen, ldc)
}

func checkScores(name string, s []float32, lds int, q []float32, m, cacheLen, ldk, n, d, rowLen int) {
	checkDecode(name, m, n, d, s, n, lds, q, d, d, cacheLen, rowLen, ldk)
}

func checkAccum(name string, o []float32, ldo int, p []float32, ldp, m, cacheLen, ldv, n, d, rowLen int) {
	checkDecode(name, m, n, d, o, d, ldo, p, n, ldp, cacheLen, rowLen, ldv)
}

func checkQ8Dim(name string, d int) {
	if d%Q8Block != 0 {
		bad(name + ": q8_0 head dimension not a multiple of 32")
	}
}
