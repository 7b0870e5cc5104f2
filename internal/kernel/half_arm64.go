//go:build !purego

package kernel

import "sync"

// The 16-bit product paths of arm64 (see the generator's gemm.go):
//
//   - "neonbf16" (FEAT_BF16): BFDOT by element, 6×16 tiles like the
//     float32 products. BFDOT's arithmetic is the Arm BFloat16 one: the
//     two products of a pair are added with round-to-odd, then added to
//     the accumulator, with subnormal inputs and results flushed to zero
//     (FPCR.EBF = 0, the only mode Go leaves). So, like VDPBF16PS, it
//     reads subnormal bfloat16 as ±0 and flushes subnormal sums, and it
//     differs from the generic twin by float32 rounding only.
//   - "neonfp16" (FEAT_FHM): FMLAL/FMLAL2 by element, widening fp16
//     products into float32 accumulators in 5×16 tiles, odd then even k
//     of each pair, one fused rounding per product: exactly the generic
//     fp16 twin's arithmetic, so the two agree bit for bit. Each strip
//     of B is first repacked into a pooled buffer (withStripBuf) with
//     the even and odd k of each pair row apart (UZP1/UZP2 once per
//     strip), so the loop is 2 LDP Q + 40 FMLAL(2) per pair with no
//     unzip: predicted (llvm-mca 19, not measured) 94-97% of the float32
//     FMA peak on Neoverse V2 and N2 at the forward's shapes, against
//     87-90% with 4 UZP per pair in every row tile.
//   - "neonbfmmla" (FEAT_BF16, which has BFMMLA): 2×4·4×2 blocks per
//     instruction, 6×16 tiles of 2×2 blocks. It takes the pair layout
//     too: each strip of B is repacked into 2×4 blocks (ZIP1/ZIP2 .4S of
//     two pair rows) once, into a buffer from a pool (withStripBuf), for
//     all its row tiles, and A into its row pairs (ZIP1/ZIP2 .2D of two
//     rows) once per call after them, so the loop is 1 LD1 + 4 LDP Q +
//     24 BFMMLA per 4 k (see the generator's mmla.go). Each output sums the
//     pairs of k in order from zero; under Arm's original definition of
//     BFMMLA (each pair by BFDOT's rule), which qemu implements, its
//     results equal neonbf16's bit for bit (checked under qemu -cpu max
//     for k = 2 … 512). Arm now leaves BFMMLA's intermediate rounding
//     implementation-defined, so on hardware it is held to TestHalfMul's
//     float32 bound, the self-check and the attention rule tests (which
//     run every path). Predicted by llvm-mca 19 (the mca-kit; not
//     measured): the loop at the BFMMLA peak on Neoverse V2 and N2 (6.0
//     cycles per 24 BFMMLA; 4.0× the float32 FMA peak), whole calls at
//     the forward's shapes, with both repackings and the code around
//     the loop, 3.16× (48×512×64), 3.39× (48×512×128), 3.35× (48×64×512)
//     and 3.48× (48×128×512) the float32 FMA peak on V2 (3.07-3.50× on
//     N2), against BFDOT's 1.85-1.98×; with A's pairs built in the loop
//     (6 LDR D + 3 ZIP more per 4 k, and a k tail) they were 2.76-3.22×
//     (2.69-3.21× on N2), with B's blocks built in every tile too
//     2.33-2.68×. Arm's tables give BFMMLA at most BFDOT's multiply rate
//     on Neoverse V1/V2, so which path is faster is measured (the default
//     set takes the fastest); FMAPeakBFMMLANEON and BenchmarkBFMMLAPeak
//     measure its bound.
//
// FMLA on .8h (FEAT_FP16) is not used: it accumulates in fp16,
// which would break the float32 sums Half promises.
//
// A feature that is not detected means the path is not offered (the
// "f32" and "generic" paths always are).

var (
	hasBF16 = detectBF16()
	hasFHM  = detectFHM()
)

// stripBufs holds the strip buffers of the BFMMLA and FMLAL kernels
// (*[]uint16), one per call in flight.
var stripBufs sync.Pool

// f16BufLen is the length of mulF16NEON's buf: one strip of B, 16
// elements per k rounded up to 4.
func f16BufLen(m, k int) int { return W * (k + k%4) }

// mmlaBufLen is the length of mulBF16MMLANEON's buf: one strip of B's
// blocks (16 elements per k rounded up to 4), then A packed in row pairs,
// 6 rows per tile, the last tile's rows rounded up to 6.
func mmlaBufLen(m, k int) int { return (W + 6*((m+5)/6)) * (k + k%4) }

// withStripBuf gives a kernel that repacks each strip of B (BFMMLA's 2×4
// blocks, FMLAL's even and odd k apart), and BFMMLA's A, its buffer:
// bufLen(m, k) elements from stripBufs. The kernel writes the whole
// buffer it is given and nothing past it: the buffer is sliced to exactly
// bufLen elements, which the kernels' guard-page test holds them to.
func withStripBuf(kern func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int, buf []uint16), bufLen func(m, k int) int) func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
	return func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
		need := bufLen(m, k)
		bp, _ := stripBufs.Get().(*[]uint16)
		if bp == nil || cap(*bp) < need {
			s := make([]uint16, need)
			bp = &s
		}
		kern(c, ldc, a, lda, b, ldb, m, n, k, (*bp)[:need])
		stripBufs.Put(bp)
	}
}
