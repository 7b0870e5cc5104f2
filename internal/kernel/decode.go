package kernel

// Decode holds the kernels of attention decoding: products of a few query
// rows with a KV cache read in place, in the cache's storage type, so that
// each cache byte is read from memory once and widened to float32 in
// registers. Every function panics if its arguments break the
// preconditions below (a bug in the caller, not bad user input).
//
// Scores[f](s, lds, q, m, k, ldk, n, d) sets
//
//	s[r*lds+j] = Σ_{p<d} q[r*d+p]·K[j][p]    for r < m, j < n
//
// Q is m×d float32, contiguous; key j is the row of d values of format f
// at byte j*ldk of k, ldk >= f.RowBytes(d) (4d for float32, d/32·34 for
// q8_0, d for fp8); S is m×n float32 with row stride lds >= n. Accum[f](o, ldo, p,
// ldp, m, v, ldv, n, d) adds
//
//	o[r*ldo+c] += Σ_{j<n} p[r*ldp+j]·V[j][c]  for r < m, c < d
//
// with V's rows stored like K's, P m×n with row stride ldp >= n and O m×d
// with row stride ldo >= d. Any m, n, d >= 0 are accepted (for q8_0 and
// q4_0, d a multiple of 32); the assembly kernels take tiles of 1, 2, 4, 8 or 16
// rows (AVX2: up to 8) and split other counts (12 = 8+4) into tiles that
// share each block of cache rows while it is in L2. S or O must not
// overlap the other arguments. Sums are in float32, in an order that
// differs between implementations.
//
// Speed: every query row costs one FMA per cache element read, so a few
// rows make the kernels compute-bound (measured on one AMD Zen 4 core,
// which runs one zmm FMA, one zmm shuffle and one zmm conversion per
// cycle, about 1.5 zmm operations per cycle in all; ratios to ReadSum's
// bandwidth, caches of [keys, heads, dim] beyond L3). With one row per
// KV head the multi-head kernels (…Heads below) read float32, bf16 and
// fp16 caches at 0.8-1.0 of ReadSum's speed, q8_0 at about 0.5 and q4_0
// at about 0.35: a block takes about 7 zmm operations in either format
// (34 bytes of q8_0, 18 of q4_0), so both are bound by the core, not by
// memory;
// the one-head kernels on such a layout read each head with a stride and
// reach 0.6-0.8 for the 16- and 32-bit types. With 4 rows per KV head
// (GQA) the one-head kernels, head by head, reach about 0.8 in float32,
// 0.6-0.7 in bf16 and fp16, 0.3 in q8_0 and 0.15 in q4_0: the 4 FMAs per
// 16 values alone bound q8_0 to 0.75 and q4_0 to 0.4 of a core's memory
// bandwidth; a second core doubles the compute per byte. The grouped-query
// kernels (ScoresGroup, AccumGroup; see GroupFast for which) read the
// heads side by side in address order instead: whole decoding calls on 2
// loaded cores (32k keys, 8 KV heads of d = 128, ratios to the same run's
// read bandwidth) measured, with 4 rows per KV head, bf16 0.86 and fp16
// 0.85 against 0.70 and 0.73 head by head, float32 level with it
// (0.74 against 0.72), q8_0 0.42 against 0.31; with 2 rows, float32 1.00 and bf16
// 0.89 against 0.76 and 0.65; with 8 (AccumGroup, Q·Kᵀ by tiles of 64
// keys), fp16 0.45 against 0.26, float32 level (0.53 against 0.55). On AVX2, 4
// rows: float32 1.07, bf16 0.72, fp16 0.78 against 0.55, 0.63, 0.46.
// The AVX-512 scores tile of 16 rows for float32 (and fp16 calls of 1024
// keys or more) keeps the rows in the vector lanes and has no folds: 1.3-1.8× (fp16 1.2-1.45×) the row kernel's compute speed
// (decode_t_amd64.go); its float32 tile of 8 rows is two tiles of 4
// (decode_split_amd64.go). With m >= 8, give S a row stride lds that is
// not a multiple of 1024 (rows 4 KiB apart share an L1 set), such as
// n+16. The kernels prefetch ahead within a call, so calls should cover
// hundreds of keys or more.
//
// ReadSum returns the wrapping sum of the little-endian uint32 words of b
// (its bytes beyond a multiple of 4 ignored): a plain read of b at full
// vector width, the yardstick of the kernels' memory bandwidth.
type Decode struct {
	// Name is "avx512bf16", "avx512", "avx2", "neon" or "generic" (the
	// names of the family "decode" in FLASHATTN_KERNEL). "avx512bf16" is
	// "avx512" with native bfloat16 products for a bf16 cache and 8 or
	// more query rows, which round Q and P to bfloat16 first (see
	// decode_bf16_amd64.go).
	Name string

	// Scores[f] computes S = Q·Kᵀ for a key cache of format f, Accum[f]
	// adds P·V to O for a value cache of format f (see Format: float32,
	// bfloat16, fp16, q8_0, q4_0, fp8 e4m3fn and e5m2). The cache is
	// bytes, ldk and ldv in bytes (whole units of the format: multiples
	// of 4 for float32, 2 for the 16-bit formats), rows of
	// f.RowBytes(d) bytes, d a multiple of f.Block(). The fp8 kernels
	// read the stored values (no per-tensor scale: the caller folds it
	// into S and P).
	Scores [NumFormats]ScoresFunc
	Accum  [NumFormats]AccumFunc

	// ScoresHeads[f] and AccumHeads[f] are the multi-head forms of
	// Scores[f] and Accum[f] for one query row per KV head (multi-head
	// attention decoding): for h < heads,
	//
	//	s[h*lds+j] = Σ_{p<d} q[h*d+p]·K_h[j][p]              j < n
	//	o[h*ldo+c] += Σ_{j<n} p[h*ldp+j]·V_h[j][c]           c < d
	//
	// where K_h[j] (V_h[j]) is the row of d values at byte j*ldk+h*hs of
	// k (j*ldv+h*hs of v): hs is the head stride in bytes. The results
	// are bit for bit those of Scores[f](s[h*lds:], lds, q[h*d:], 1,
	// k[h*hs:], ldk, n, d) and Accum[f](o[h*ldo:], ldo, p[h*ldp:], ldp,
	// 1, v[h*hs:], ldv, n, d) for each h. When the heads of a key lie side
	// by side (ldk == heads·hs, the [seq, heads, dim] layout) and d is a
	// multiple of 16, the amd64 assembly reads the cache once in address
	// order, every head of a key before the next key, instead of one
	// strided pass per head, which reads a fraction of every DRAM page at
	// a time (measured on Zen 4, 8 heads of d = 64 in float32: 0.66 of
	// ReadSum's bandwidth by head, about 1 with the heads' rows
	// contiguous). Otherwise they call the one-head kernels head by head.
	// They allocate nothing.
	ScoresHeads [NumFormats]ScoresHeadsFunc
	AccumHeads  [NumFormats]AccumHeadsFunc

	// ScoresGroup[f] and AccumGroup[f] are the multi-head forms for m
	// query rows per KV head (grouped-query attention decoding): for
	// h < heads, r < m and i = h·m+r,
	//
	//	s[i*lds+j] = Σ_{p<d} q[i*d+p]·K_h[j][p]                  j < n
	//	o[i*ldo+c] += Σ_{j<n} p[i*ldp+j]·V_h[j][c]               c < d
	//
	// with K_h and V_h as for ScoresHeads. The results are bit for bit
	// those of Scores[f](s[h*m*lds:], lds, q[h*m*d:], m, k[h*hs:], ldk,
	// n, d) and Accum[f](o[h*m*ldo:], ldo, p[h*m*ldp:], ldp, m, v[h*hs:],
	// ldv, n, d) for each h. Where GroupFast(…, f, m, heads) holds, the
	// heads lie side by side (ldk == heads·hs) and d is a multiple of 16,
	// the assembly reads the cache once in address order, where the
	// one-head kernels read each head's rows a whole key row apart
	// (figures in the speed notes above); other calls go head by head,
	// Scores of 1 < m <= 8 rows with the heads side by side by tiles of
	// 64 keys, every head of a tile before the next. m = 1 is ScoresHeads
	// and AccumHeads (the same kernels). nil for the formats and
	// instruction sets without grouped-query assembly (call Scores and
	// Accum head by head instead). They allocate nothing.
	ScoresGroup [NumFormats]ScoresGroupFunc
	AccumGroup  [NumFormats]AccumGroupFunc

	// scoresRows[f] (accumRows[f]) has bit m set for each number m > 1
	// of rows per KV head that ScoresGroup[f] (AccumGroup[f]) takes in
	// one pass over the cache (see GroupFast).
	scoresRows, accumRows [NumFormats]uint32
	// groupBlock is the number of query rows of a block of the
	// grouped-query scores kernels (the float32 lanes of a vector): a
	// block takes groupBlock/m heads of one key.
	groupBlock int

	// ReadSum is the read-bandwidth yardstick (see above).
	ReadSum func(b []byte) uint32
}

// ScoresFunc is the signature of Decode.Scores (see Decode).
type ScoresFunc func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int)

// AccumFunc is the signature of Decode.Accum.
type AccumFunc func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int)

// ScoresHeadsFunc is the signature of Decode.ScoresHeads.
type ScoresHeadsFunc func(s []float32, lds int, q []float32, heads int, k []byte, ldk, hs, n, d int)

// AccumHeadsFunc is the signature of Decode.AccumHeads.
type AccumHeadsFunc func(o []float32, ldo int, p []float32, ldp, heads int, v []byte, ldv, hs, n, d int)

// ScoresGroupFunc is the signature of Decode.ScoresGroup.
type ScoresGroupFunc func(s []float32, lds int, q []float32, m, heads int, k []byte, ldk, hs, n, d int)

// AccumGroupFunc is the signature of Decode.AccumGroup.
type AccumGroupFunc func(o []float32, ldo int, p []float32, ldp, m, heads int, v []byte, ldv, hs, n, d int)

// GroupFast reports whether ScoresGroup[f] (scores) or AccumGroup[f]
// (!scores) of dk reads a cache of heads KV heads side by side in one
// pass for m > 1 query rows per KV head (given d a multiple of 16),
// rather than head by head: the AVX-512 and AVX2 float32, bf16 and fp16
// kernels and the AVX-512 q8_0 ones for m = 2 and 4, and on AVX-512 for
// Accum m = 8 (Scores of 8 rows goes head by head, by tiles of keys,
// which measured faster), and on avx512bf16 bf16's Scores of 8 to 15
// rows (its native one-head kernels, which round to bfloat16, by tiles of
// keys; not its Accum of 8 or more rows, head by head); heads a
// multiple of L/m, the KV heads of one scores block of L rows (the
// float32 lanes: 16 on AVX-512, 8 on AVX2).
func (dk *Decode) GroupFast(scores bool, f Format, m, heads int) bool {
	mask := dk.accumRows[f]
	if scores {
		mask = dk.scoresRows[f]
	}
	return m > 1 && m < 32 && mask>>m&1 != 0 && heads > 1 && heads%max(dk.groupBlock/m, 1) == 0
}

// checkHeads panics unless the arguments of a multi-head call of m rows
// per head are consistent: out is heads·m×outCols with stride ldOut, in
// heads·m×inCols with stride ldIn, and head h's n cache rows of rowLen
// units, ldc apart, start at h·hs in a slice of cacheLen units (n = 0
// reads nothing).
func checkHeads(name string, m, heads, n, d int, out []float32, outCols, ldOut int, in []float32, inCols, ldIn int, cacheLen, rowLen, ldc, hs int) {
	if m < 0 || heads < 0 || n < 0 || d < 0 || hs < 0 {
		bad(name + ": negative dimension")
	}
	checkMatrix(name+" out", len(out), heads*m, outCols, ldOut)
	checkMatrix(name+" in", len(in), heads*m, inCols, ldIn)
	if heads > 0 && n > 0 {
		last := (heads - 1) * hs
		if last > cacheLen {
			bad(name + " cache: slice too short")
		}
		checkMatrix(name+" cache", cacheLen-last, n, rowLen, ldc)
	}
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
