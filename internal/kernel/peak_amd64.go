//go:build amd64 && !purego

package kernel

// fmaPeakLoopAVX512 and fmaPeakLoopAVX2 run the assembly peak loops and
// return their FLOPs per iteration: 12 chains of one FMA (2 FLOPs) on 16 or
// 8 lanes.
func fmaPeakLoopAVX512(iters int) int { FMAPeakAVX512(iters); return 12 * 16 * 2 }
func fmaPeakLoopAVX2(iters int) int   { FMAPeakAVX2(iters); return 12 * 8 * 2 }
