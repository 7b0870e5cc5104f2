//go:build !purego

package kernel

// The hooks through which arm64 registers its assembly (see the package
// doc, "Assembly, purego and architectures", and arch_amd64.go, its amd64
// twin): archImpls, archDecode and archHalf list the candidates this CPU
// supports, best first, before the self-check; archFMAPeak,
// archFMAPeakLoop and archPhilox8 run the assembly loops of FMAPeak,
// FMAPeakLoop and Philox8. Advanced SIMD is part of every arm64 CPU Go
// runs on (ARMv8-A), so the "neon" sets are always offered, subject to
// their start-up self-checks.

// archImpls returns the assembly implementations of this CPU, best first.
func archImpls() []Impl {
	im := Impl{
		Name:        "neon",
		MulABt:      wrapMulABt(mulABtNEON), // FMLA: at the FMA rate
		FusedScores: true,
		MulAddAB:    wrapMulAdd(false, mulAddABNEON),
		MulAB:       clearThen(wrapMulAdd(false, mulAddABNEON)),
		MulAddAtB:   wrapMulAdd(true, mulAddAtBNEON),
		ExpSum:      wrapExpSum(expSumNEON),
		Max:         wrapMax(maxNEON),
		Scale:       wrapScale(scaleNEON),
		DsFromDp:    wrapDsFromDp(dsFromDpNEON),
		Dot:         dotFused, // one element of MulABt's fused arithmetic
		Dot4T:       wrapDot4T(dot4TNEON),
		Softcap:     wrapSoftcap(softcapNEON),
		ALiBi:       wrapALiBi(alibiNEON),
	}
	setConvertersNEON(&im)
	im.ExpSumBF16 = expSumThenBF16(im.ExpSum, im.F32ToBF16)
	im.ScaleBF16 = scaleThenBF16(im.Scale, im.F32ToBF16)
	setPackersNEON(&im)
	return []Impl{im}
}

// archFMAPeak runs the NEON FMA peak loop.
func archFMAPeak(iters int) int { return fmaPeakLoopNEON(iters) }

// archDecode returns the NEON decode kernels (before the self-check):
// per format the row tiles of kernel_arm64.s (1, 2, 4 or 8 rows). There is
// no NEON multi-head kernel yet, so the multi-head entries call the
// one-head kernels head by head (bit for bit their results, as Decode's
// doc requires); with the heads of a key side by side ([seq, heads, dim])
// each head is then a strided pass over the cache, which on Zen 4 reached
// 0.66 of the read bandwidth against about 1 for the address-order
// multi-head kernel; on arm64 nothing has been measured.
func archDecode() []Decode {
	return []Decode{newDecode(decodeISA{name: "neon", minD: 1, lanes: 4}, &[NumFormats]decodeKernels{
		FormatF32:  kernelsOf([]scoresKern[float32]{scoresF32M1NEON, scoresF32M2NEON, scoresF32M4NEON, scoresF32M8NEON}, []accumKern[float32]{accumF32M1NEON, accumF32M2NEON, accumF32M4NEON, accumF32M8NEON}, nil, nil),
		FormatBF16: kernelsOf([]scoresKern[uint16]{scoresBF16M1NEON, scoresBF16M2NEON, scoresBF16M4NEON, scoresBF16M8NEON}, []accumKern[uint16]{accumBF16M1NEON, accumBF16M2NEON, accumBF16M4NEON, accumBF16M8NEON}, nil, nil),
		FormatF16:  kernelsOf([]scoresKern[uint16]{scoresF16M1NEON, scoresF16M2NEON, scoresF16M4NEON, scoresF16M8NEON}, []accumKern[uint16]{accumF16M1NEON, accumF16M2NEON, accumF16M4NEON, accumF16M8NEON}, nil, nil),
		FormatQ8:   kernelsOf([]scoresKern[byte]{scoresQ8M1NEON, scoresQ8M2NEON, scoresQ8M4NEON, scoresQ8M8NEON}, []accumKern[byte]{accumQ8M1NEON, accumQ8M2NEON, accumQ8M4NEON, accumQ8M8NEON}, nil, nil),
		FormatQ4:   kernelsOf([]scoresKern[byte]{scoresQ4M1NEON, scoresQ4M2NEON, scoresQ4M4NEON, scoresQ4M8NEON}, []accumKern[byte]{accumQ4M1NEON, accumQ4M2NEON, accumQ4M4NEON, accumQ4M8NEON}, nil, nil),
		FormatE4M3: kernelsOf([]scoresKern[byte]{scoresE4M3M1NEON, scoresE4M3M2NEON, scoresE4M3M4NEON, scoresE4M3M8NEON}, []accumKern[byte]{accumE4M3M1NEON, accumE4M3M2NEON, accumE4M3M4NEON, accumE4M3M8NEON}, nil, nil),
		FormatE5M2: kernelsOf([]scoresKern[byte]{scoresE5M2M1NEON, scoresE5M2M2NEON, scoresE5M2M4NEON, scoresE5M2M8NEON}, []accumKern[byte]{accumE5M2M1NEON, accumE5M2M2NEON, accumE5M2M4NEON, accumE5M2M8NEON}, nil, nil),
	}, readSumNEON)}
}

// archHalf returns the NEON 16-bit paths this CPU supports for e (before
// the self-check).
func archHalf(e Elem) []Half {
	switch {
	case e == BF16 && hasBF16:
		return []Half{{
			Name:   "neonbf16",
			Elem:   BF16,
			Mul:    wrapHalf("neonbf16 Mul", mulBF16NEON),
			MulAdd: wrapHalf("neonbf16 MulAdd", mulAddBF16NEON),
			Peak:   func(iters int) int { FMAPeakBF16NEON(iters); return 24 * 4 * 2 * 2 },
		}, {
			Name:   "neonbfmmla",
			Elem:   BF16,
			Mul:    wrapHalf("neonbfmmla Mul", withStripBuf(mulBF16MMLANEON, mmlaBufLen)),
			MulAdd: wrapHalf("neonbfmmla MulAdd", withStripBuf(mulAddBF16MMLANEON, mmlaBufLen)),
			Peak:   func(iters int) int { FMAPeakBFMMLANEON(iters); return 24 * 2 * 2 * 4 * 2 },
		}}
	case e == F16 && hasFHM:
		return []Half{{
			Name:   "neonfp16",
			Elem:   F16,
			Mul:    wrapHalf("neonfp16 Mul", withStripBuf(mulF16NEON, f16BufLen)),
			MulAdd: wrapHalf("neonfp16 MulAdd", withStripBuf(mulAddF16NEON, f16BufLen)),
			Peak:   func(iters int) int { FMAPeakF16NEON(iters); return 24 * 4 * 2 },
		}}
	}
	return nil
}

// archFMAPeakLoop returns the NEON peak loop for "neon".
func archFMAPeakLoop(name string) (func(iters int) int, bool) {
	if name == "neon" {
		return fmaPeakLoopNEON, true
	}
	return nil, false
}

// archPhilox8 runs the NEON Philox8 (Advanced SIMD is always there).
func archPhilox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) bool {
	philox8NEON(out, c0, c1, c2, c3, k0, k1)
	return true
}

// archCacheSizes: arm64 has no CPUID; Linux's sysfs answers first, and
// the caller falls back to defaults.
func archCacheSizes() (l1, l2, l3 int, ok bool) { return 0, 0, 0, false }
