//go:build !purego

package kernel

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
//     fp16 twin's arithmetic, so the two agree bit for bit.
//
// BFMMLA (a 2×4·4×2 product per instruction) is not used yet: its
// operands are 2×4 blocks, which the pair layout would have to be shuffled
// into (a ZIP per two B operands, two per two rows of A) and its results
// out of. Arm's tables give it at most BFDOT's multiply rate on Neoverse
// V1/V2; llvm-mca 19 predicts twice it (4× the float32 FMA peak on V1, V2
// and N2), and, for a 4×16 tile, 2.46× the float32 peak on the pair layout
// and 3.55× on a layout of 2×4 blocks, against BFDOT's 2.0×.
// FMAPeakBFMMLANEON (its peak loop) and BenchmarkBFMMLAPeak measure which
// holds on a given CPU.
// FMLA on .8h (FEAT_FP16) is not used either: it accumulates in fp16,
// which would break the float32 sums Half promises.
//
// A feature that is not detected means the path is not offered (the
// "f32" and "generic" paths always are).

var (
	hasBF16 = detectBF16()
	hasFHM  = detectFHM()
)
