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
//   - "neonbfmmla" (FEAT_BF16, which has BFMMLA): 2×4·4×2 blocks per
//     instruction, 6×16 tiles of 2×2 blocks on the same pair layout, the
//     2×4 operands built in registers (ZIP1 .2D of two A rows, ZIP1/ZIP2
//     .4S of two pair rows of B; see the generator's mmla.go). Each
//     output sums the pairs of k in order from zero; under Arm's original
//     definition of BFMMLA (each pair by BFDOT's rule), which qemu
//     implements, its results equal neonbf16's bit for bit (checked under
//     qemu -cpu max for k = 2 … 512); Arm now leaves BFMMLA's
//     intermediate rounding implementation-defined, so on hardware it is
//     held to TestHalfMul's float32 bound and the self-check like "f32".
//     Predicted by llvm-mca 19 (the mca-kit; not measured), whole calls
//     at the forward's shapes (48×512×64 … 48×128×512): 2.33-2.68× the
//     float32 FMA peak on Neoverse V2 and 2.27-2.67× on N2, against
//     BFDOT's 1.85-1.98×; the loop runs at 68% of the BFMMLA peak (8.8
//     cycles per 24 BFMMLA against 6.0), the 11 ZIPs per 24 BFMMLA
//     sharing its vector pipes. A layout of 2×4 blocks (B's column
//     pairs, A's row pairs packed) would drop the ZIPs: ≈ 3.5× predicted,
//     but it is a second packed layout through the attention core.
//     Arm's tables give BFMMLA at most BFDOT's multiply rate on Neoverse
//     V1/V2, so which path is faster is measured (the default set takes
//     the fastest); FMAPeakBFMMLANEON and BenchmarkBFMMLAPeak measure its
//     bound.
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
