//go:build amd64 && !purego

package kernel

// The hooks through which amd64 registers its assembly (see the package
// doc, "Assembly, purego and architectures"): archImpls, archDecode and
// archHalf list the candidates this CPU supports, best first, before the
// self-check; archFMAPeak, archFMAPeakLoop and archPhilox8 run the
// assembly loops of FMAPeak, FMAPeakLoop and Philox8. arch_other.go holds
// the pure-Go versions (other architectures, and -tags purego).

// archImpls returns the assembly implementations this CPU supports, best first.
func archImpls() []Impl {
	var impls []Impl
	if hasAVX512 {
		im := Impl{
			Name:      "avx512",
			MulABt:    wrapMulABt(mulABtAVX512),
			MulAddAB:  wrapMulAddAB(mulAddABAVX512),
			MulAddAtB: wrapMulAddAtB(mulAddAtBAVX512),
			ExpSum:    wrapExpSum(expSumAVX512),
			Max:       wrapMax(maxAVX512),
			Scale:     wrapScale(scaleAVX512),
			DsFromDp:  wrapDsFromDp(dsFromDpAVX512),
			Dot:       dotGeneric,
			Dot4T:     wrapDot4T(dot4TAVX2),
			Softcap:   wrapSoftcap,
			ALiBi:     wrapALiBi,
		}
		setConverters(&im, true)
		setPackers(&im, true)
		impls = append(impls, im)
	}
	if hasAVX2 {
		im := Impl{
			Name:      "avx2",
			MulABt:    wrapMulABt(mulABtAVX2),
			MulAddAB:  wrapMulAddAB(mulAddABAVX2),
			MulAddAtB: wrapMulAddAtB(mulAddAtBAVX2),
			ExpSum:    wrapExpSum(expSumAVX2),
			Max:       wrapMax(maxAVX2),
			Scale:     wrapScale(scaleAVX2),
			DsFromDp:  wrapDsFromDp(dsFromDpAVX2),
			Dot:       dotGeneric,
			Dot4T:     wrapDot4T(dot4TAVX2),
			Softcap:   wrapSoftcap,
			ALiBi:     wrapALiBi,
		}
		setConverters(&im, false)
		setPackers(&im, false)
		impls = append(impls, im)
	}
	return impls
}

// archDecode returns the assembly decode kernel sets this CPU supports,
// best first (before the self-check).
func archDecode() []Decode {
	var ds []Decode
	if hasAVX512BW {
		isa := decodeISA{name: "avx512", minD: 1}
		ds = append(ds, Decode{
			Name:       isa.name,
			ScoresF32:  wrapScores(isa, "ScoresF32", formatElem, GenericDecode.ScoresF32, scoresF32M1AVX512, scoresF32M2AVX512, scoresF32M4AVX512, scoresF32M8AVX512, scoresF32M16AVX512),
			ScoresBF16: wrapScores(isa, "ScoresBF16", formatElem, GenericDecode.ScoresBF16, scoresBF16M1AVX512, scoresBF16M2AVX512, scoresBF16M4AVX512, scoresBF16M8AVX512, scoresBF16M16AVX512),
			ScoresF16:  wrapScores(isa, "ScoresF16", formatElem, GenericDecode.ScoresF16, scoresF16M1AVX512, scoresF16M2AVX512, scoresF16M4AVX512, scoresF16M8AVX512, scoresF16M16AVX512),
			ScoresQ8:   wrapScores(isa, "ScoresQ8", formatQ8, GenericDecode.ScoresQ8, scoresQ8M1AVX512, scoresQ8M2AVX512, scoresQ8M4AVX512, scoresQ8M8AVX512, scoresQ8M16AVX512),
			ScoresQ4:   wrapScores(isa, "ScoresQ4", formatQ4, GenericDecode.ScoresQ4, scoresQ4M1AVX512, scoresQ4M2AVX512, scoresQ4M4AVX512, scoresQ4M8AVX512, scoresQ4M16AVX512),
			AccumF32:   wrapAccum(isa, "AccumF32", formatElem, GenericDecode.AccumF32, accumF32M1AVX512, accumF32M2AVX512, accumF32M4AVX512, accumF32M8AVX512, accumF32M16AVX512),
			AccumBF16:  wrapAccum(isa, "AccumBF16", formatElem, GenericDecode.AccumBF16, accumBF16M1AVX512, accumBF16M2AVX512, accumBF16M4AVX512, accumBF16M8AVX512, accumBF16M16AVX512),
			AccumF16:   wrapAccum(isa, "AccumF16", formatElem, GenericDecode.AccumF16, accumF16M1AVX512, accumF16M2AVX512, accumF16M4AVX512, accumF16M8AVX512, accumF16M16AVX512),
			AccumQ8:    wrapAccum(isa, "AccumQ8", formatQ8, GenericDecode.AccumQ8, accumQ8M1AVX512, accumQ8M2AVX512, accumQ8M4AVX512, accumQ8M8AVX512, accumQ8M16AVX512),
			AccumQ4:    wrapAccum(isa, "AccumQ4", formatQ4, GenericDecode.AccumQ4, accumQ4M1AVX512, accumQ4M2AVX512, accumQ4M4AVX512, accumQ4M8AVX512, accumQ4M16AVX512),
			ReadSum:    wrapReadSum(readSumAVX512),
		})
		setHeads(&ds[len(ds)-1], isa, [5]any{scoresHeadsF32AVX512, scoresHeadsBF16AVX512, scoresHeadsF16AVX512, scoresHeadsQ8AVX512, scoresHeadsQ4AVX512},
			[5]any{accumHeadsF32AVX512, accumHeadsBF16AVX512, accumHeadsF16AVX512, accumHeadsQ8AVX512, accumHeadsQ4AVX512})
	}
	if hasAVX2 && hasF16C {
		isa := decodeISA{name: "avx2", minD: 8}
		ds = append(ds, Decode{
			Name:       isa.name,
			ScoresF32:  wrapScores(isa, "ScoresF32", formatElem, GenericDecode.ScoresF32, scoresF32M1AVX2, scoresF32M2AVX2, scoresF32M4AVX2, scoresF32M8AVX2),
			ScoresBF16: wrapScores(isa, "ScoresBF16", formatElem, GenericDecode.ScoresBF16, scoresBF16M1AVX2, scoresBF16M2AVX2, scoresBF16M4AVX2, scoresBF16M8AVX2),
			ScoresF16:  wrapScores(isa, "ScoresF16", formatElem, GenericDecode.ScoresF16, scoresF16M1AVX2, scoresF16M2AVX2, scoresF16M4AVX2, scoresF16M8AVX2),
			ScoresQ8:   wrapScores(isa, "ScoresQ8", formatQ8, GenericDecode.ScoresQ8, scoresQ8M1AVX2, scoresQ8M2AVX2, scoresQ8M4AVX2, scoresQ8M8AVX2),
			ScoresQ4:   wrapScores(isa, "ScoresQ4", formatQ4, GenericDecode.ScoresQ4, scoresQ4M1AVX2, scoresQ4M2AVX2, scoresQ4M4AVX2, scoresQ4M8AVX2),
			AccumF32:   wrapAccum(isa, "AccumF32", formatElem, GenericDecode.AccumF32, accumF32M1AVX2, accumF32M2AVX2, accumF32M4AVX2, accumF32M8AVX2),
			AccumBF16:  wrapAccum(isa, "AccumBF16", formatElem, GenericDecode.AccumBF16, accumBF16M1AVX2, accumBF16M2AVX2, accumBF16M4AVX2, accumBF16M8AVX2),
			AccumF16:   wrapAccum(isa, "AccumF16", formatElem, GenericDecode.AccumF16, accumF16M1AVX2, accumF16M2AVX2, accumF16M4AVX2, accumF16M8AVX2),
			AccumQ8:    wrapAccum(isa, "AccumQ8", formatQ8, GenericDecode.AccumQ8, accumQ8M1AVX2, accumQ8M2AVX2, accumQ8M4AVX2, accumQ8M8AVX2),
			AccumQ4:    wrapAccum(isa, "AccumQ4", formatQ4, GenericDecode.AccumQ4, accumQ4M1AVX2, accumQ4M2AVX2, accumQ4M4AVX2, accumQ4M8AVX2),
			ReadSum:    wrapReadSum(readSumAVX2),
		})
		setHeads(&ds[len(ds)-1], isa, [5]any{scoresHeadsF32AVX2, scoresHeadsBF16AVX2, scoresHeadsF16AVX2, scoresHeadsQ8AVX2, scoresHeadsQ4AVX2},
			[5]any{accumHeadsF32AVX2, accumHeadsBF16AVX2, accumHeadsF16AVX2, accumHeadsQ8AVX2, accumHeadsQ4AVX2})
	}
	return ds
}

// setHeads sets the multi-head kernels of dk from the assembly ones of
// the types f32, bf16, f16, q8_0, q4_0 (in that order), falling back to
// dk's one-head kernels where the layout does not suit them.
func setHeads(dk *Decode, isa decodeISA, scores, accum [5]any) {
	dk.ScoresF32Heads = wrapScoresHeads(isa, "ScoresF32Heads", formatElem, dk.ScoresF32, scores[0].(func(s []float32, lds int, q []float32, heads int, k []float32, hs, n, d int)))
	dk.ScoresBF16Heads = wrapScoresHeads(isa, "ScoresBF16Heads", formatElem, dk.ScoresBF16, scores[1].(func(s []float32, lds int, q []float32, heads int, k []uint16, hs, n, d int)))
	dk.ScoresF16Heads = wrapScoresHeads(isa, "ScoresF16Heads", formatElem, dk.ScoresF16, scores[2].(func(s []float32, lds int, q []float32, heads int, k []uint16, hs, n, d int)))
	dk.ScoresQ8Heads = wrapScoresHeads(isa, "ScoresQ8Heads", formatQ8, dk.ScoresQ8, scores[3].(func(s []float32, lds int, q []float32, heads int, k []byte, hs, n, d int)))
	dk.ScoresQ4Heads = wrapScoresHeads(isa, "ScoresQ4Heads", formatQ4, dk.ScoresQ4, scores[4].(func(s []float32, lds int, q []float32, heads int, k []byte, hs, n, d int)))
	dk.AccumF32Heads = wrapAccumHeads(isa, "AccumF32Heads", formatElem, dk.AccumF32, accum[0].(func(o []float32, ldo int, p []float32, ldp, heads int, v []float32, hs, n, d int)))
	dk.AccumBF16Heads = wrapAccumHeads(isa, "AccumBF16Heads", formatElem, dk.AccumBF16, accum[1].(func(o []float32, ldo int, p []float32, ldp, heads int, v []uint16, hs, n, d int)))
	dk.AccumF16Heads = wrapAccumHeads(isa, "AccumF16Heads", formatElem, dk.AccumF16, accum[2].(func(o []float32, ldo int, p []float32, ldp, heads int, v []uint16, hs, n, d int)))
	dk.AccumQ8Heads = wrapAccumHeads(isa, "AccumQ8Heads", formatQ8, dk.AccumQ8, accum[3].(func(o []float32, ldo int, p []float32, ldp, heads int, v []byte, hs, n, d int)))
	dk.AccumQ4Heads = wrapAccumHeads(isa, "AccumQ4Heads", formatQ4, dk.AccumQ4, accum[4].(func(o []float32, ldo int, p []float32, ldp, heads int, v []byte, hs, n, d int)))
}

// archHalf returns the assembly half-precision paths this CPU supports for
// e (before the self-check), fastest expected first.
func archHalf(e Elem) []Half {
	var hs []Half
	if amxUsable(e) {
		hs = append(hs, amxHalf(e))
	}
	if e == BF16 && hasAVX512BF16 {
		hs = append(hs, Half{
			Name:   "avx512bf16",
			Elem:   BF16,
			Mul:    wrapHalf("avx512bf16 Mul", mulBF16AVX512BF16),
			MulAdd: wrapHalf("avx512bf16 MulAdd", mulAddBF16AVX512BF16),
			Peak: func(iters int) int {
				FMAPeakBF16AVX512(iters)
				return 12 * 16 * 2 * 2
			},
		})
	}
	return hs
}

// archFMAPeak runs the best FMA peak loop and returns its FLOPs per iteration.
func archFMAPeak(iters int) int {
	switch {
	case hasAVX512:
		return fmaPeakLoopAVX512(iters)
	case hasAVX2:
		return fmaPeakLoopAVX2(iters)
	}
	return fmaPeakGeneric(iters)
}

// archFMAPeakLoop returns the assembly peak loop for name, if this CPU
// runs it.
func archFMAPeakLoop(name string) (func(iters int) int, bool) {
	switch {
	case name == "avx512" && hasAVX512:
		return fmaPeakLoopAVX512, true
	case name == "avx2" && hasAVX2:
		return fmaPeakLoopAVX2, true
	}
	return nil, false
}

// archPhilox8 runs the AVX2 Philox8 if the CPU has AVX2.
func archPhilox8(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32) bool {
	if !hasAVX2 {
		return false
	}
	philox8AVX2(out, c0, c1, c2, c3, k0, k1)
	return true
}

// archCacheSizes reads the cache sizes with CPUID.
func archCacheSizes() (l1, l2, l3 int, ok bool) { return cacheSizesCPUID() }
