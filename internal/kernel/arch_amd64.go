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
			Name:        "avx512",
			MulABt:      wrapMulABt(mulABtAVX512), // VFMADD231PS: at the FMA rate
			FusedScores: true,
			MulAddAB:    wrapMulAdd(false, mulAddABAVX512),
			MulAB:       wrapMulAB(mulABAVX512),
			MulAddAtB:   wrapMulAdd(true, mulAddAtBAVX512),
			ExpSum:      wrapExpSum(expSumAVX512),
			Max:         wrapMax(maxAVX512),
			Scale:       wrapScale(scaleAVX512),
			DsFromDp:    wrapDsFromDp(dsFromDpAVX512),
			Dot:         dotFused, // one element of MulABt's fused arithmetic
			Dot4T:       wrapDot4T(dot4TAVX2),
			Softcap:     wrapSoftcap(softcapAVX2),
			ALiBi:       wrapALiBi(alibiAVX2),
		}
		setConverters(&im, true)
		setExpSumBF16(&im, true)
		setPackers(&im, true)
		impls = append(impls, im)
	}
	if hasAVX2 {
		im := Impl{
			Name:        "avx2",
			MulABt:      wrapMulABt(mulABtAVX2), // VFMADD231PS: at the FMA rate
			FusedScores: true,
			MulAddAB:    wrapMulAdd(false, mulAddABAVX2),
			MulAB:       wrapMulAB(mulABAVX2),
			MulAddAtB:   wrapMulAdd(true, mulAddAtBAVX2),
			ExpSum:      wrapExpSum(expSumAVX2),
			Max:         wrapMax(maxAVX2),
			Scale:       wrapScale(scaleAVX2),
			DsFromDp:    wrapDsFromDp(dsFromDpAVX2),
			Dot:         dotFused, // one element of MulABt's fused arithmetic
			Dot4T:       wrapDot4T(dot4TAVX2),
			Softcap:     wrapSoftcap(softcapAVX2),
			ALiBi:       wrapALiBi(alibiAVX2),
		}
		setConverters(&im, false)
		setExpSumBF16(&im, false)
		setPackers(&im, false)
		impls = append(impls, im)
	}
	return impls
}

// archDecode returns the assembly decode kernel sets this CPU supports,
// best first (before the self-check): per format the row tiles of
// decode_amd64.s and its multi-head kernels.
func archDecode() []Decode {
	var ds []Decode
	if hasAVX512BW {
		ds = append(ds, newDecode(decodeISA{name: "avx512", minD: 1, lanes: 16}, &[NumFormats]decodeKernels{
			FormatF32:  withGroup(withScoresT(FormatF32, withScoresSplit8(kernelsOf([]scoresKern[float32]{scoresF32M1AVX512, scoresF32M2AVX512, scoresF32M4AVX512, scoresF32M16AVX512}, []accumKern[float32]{accumF32M1AVX512, accumF32M2AVX512, accumF32M4AVX512, accumF32M8AVX512, accumF32M16AVX512}, scoresHeadsF32AVX512, accumHeadsF32AVX512))), []scoresHeadsKern[float32]{scoresGroupF32M2AVX512, scoresGroupF32M4AVX512, nil}, []accumHeadsKern[float32]{accumGroupF32M2AVX512, accumGroupF32M4AVX512, accumGroupF32M8AVX512}),
			FormatBF16: withGroup(kernelsOf([]scoresKern[uint16]{scoresBF16M1AVX512, scoresBF16M2AVX512, scoresBF16M4AVX512, scoresBF16M8AVX512, scoresBF16M16AVX512}, []accumKern[uint16]{accumBF16M1AVX512, accumBF16M2AVX512, accumBF16M4AVX512, accumBF16M8AVX512, accumBF16M16AVX512}, scoresHeadsBF16AVX512, accumHeadsBF16AVX512), []scoresHeadsKern[uint16]{scoresGroupBF16M2AVX512, scoresGroupBF16M4AVX512, nil}, []accumHeadsKern[uint16]{accumGroupBF16M2AVX512, accumGroupBF16M4AVX512, accumGroupBF16M8AVX512}),
			FormatF16:  withGroup(withScoresT(FormatF16, kernelsOf([]scoresKern[uint16]{scoresF16M1AVX512, scoresF16M2AVX512, scoresF16M4AVX512, scoresF16M8AVX512, scoresF16M16AVX512}, []accumKern[uint16]{accumF16M1AVX512, accumF16M2AVX512, accumF16M4AVX512, accumF16M8AVX512, accumF16M16AVX512}, scoresHeadsF16AVX512, accumHeadsF16AVX512)), []scoresHeadsKern[uint16]{scoresGroupF16M2AVX512, scoresGroupF16M4AVX512, nil}, []accumHeadsKern[uint16]{accumGroupF16M2AVX512, accumGroupF16M4AVX512, accumGroupF16M8AVX512}),
			FormatQ8:   withGroup(kernelsOf([]scoresKern[byte]{scoresQ8M1AVX512, scoresQ8M2AVX512, scoresQ8M4AVX512, scoresQ8M8AVX512, scoresQ8M16AVX512}, []accumKern[byte]{accumQ8M1AVX512, accumQ8M2AVX512, accumQ8M4AVX512, accumQ8M8AVX512, accumQ8M16AVX512}, scoresHeadsQ8AVX512, accumHeadsQ8AVX512), []scoresHeadsKern[byte]{scoresGroupQ8M2AVX512, scoresGroupQ8M4AVX512, nil}, []accumHeadsKern[byte]{accumGroupQ8M2AVX512, accumGroupQ8M4AVX512, accumGroupQ8M8AVX512}),
			FormatQ4:   kernelsOf([]scoresKern[byte]{scoresQ4M1AVX512, scoresQ4M2AVX512, scoresQ4M4AVX512, scoresQ4M8AVX512, scoresQ4M16AVX512}, []accumKern[byte]{accumQ4M1AVX512, accumQ4M2AVX512, accumQ4M4AVX512, accumQ4M8AVX512, accumQ4M16AVX512}, scoresHeadsQ4AVX512, accumHeadsQ4AVX512),
			FormatE4M3: kernelsOf([]scoresKern[byte]{scoresE4M3M1AVX512, scoresE4M3M2AVX512, scoresE4M3M4AVX512, scoresE4M3M8AVX512, scoresE4M3M16AVX512}, []accumKern[byte]{accumE4M3M1AVX512, accumE4M3M2AVX512, accumE4M3M4AVX512, accumE4M3M8AVX512, accumE4M3M16AVX512}, scoresHeadsE4M3AVX512, accumHeadsE4M3AVX512),
			FormatE5M2: kernelsOf([]scoresKern[byte]{scoresE5M2M1AVX512, scoresE5M2M2AVX512, scoresE5M2M4AVX512, scoresE5M2M8AVX512, scoresE5M2M16AVX512}, []accumKern[byte]{accumE5M2M1AVX512, accumE5M2M2AVX512, accumE5M2M4AVX512, accumE5M2M8AVX512, accumE5M2M16AVX512}, scoresHeadsE5M2AVX512, accumHeadsE5M2AVX512),
		}, readSumAVX512))
	}
	if hasAVX2 && hasF16C {
		ds = append(ds, newDecode(decodeISA{name: "avx2", minD: 8, lanes: 8}, &[NumFormats]decodeKernels{
			FormatF32:  withGroup(kernelsOf([]scoresKern[float32]{scoresF32M1AVX2, scoresF32M2AVX2, scoresF32M4AVX2, scoresF32M8AVX2}, []accumKern[float32]{accumF32M1AVX2, accumF32M2AVX2, accumF32M4AVX2, accumF32M8AVX2}, scoresHeadsF32AVX2, accumHeadsF32AVX2), []scoresHeadsKern[float32]{scoresGroupF32M2AVX2, scoresGroupF32M4AVX2}, []accumHeadsKern[float32]{accumGroupF32M2AVX2, accumGroupF32M4AVX2}),
			FormatBF16: withGroup(kernelsOf([]scoresKern[uint16]{scoresBF16M1AVX2, scoresBF16M2AVX2, scoresBF16M4AVX2, scoresBF16M8AVX2}, []accumKern[uint16]{accumBF16M1AVX2, accumBF16M2AVX2, accumBF16M4AVX2, accumBF16M8AVX2}, scoresHeadsBF16AVX2, accumHeadsBF16AVX2), []scoresHeadsKern[uint16]{scoresGroupBF16M2AVX2, scoresGroupBF16M4AVX2}, []accumHeadsKern[uint16]{accumGroupBF16M2AVX2, accumGroupBF16M4AVX2}),
			FormatF16:  withGroup(kernelsOf([]scoresKern[uint16]{scoresF16M1AVX2, scoresF16M2AVX2, scoresF16M4AVX2, scoresF16M8AVX2}, []accumKern[uint16]{accumF16M1AVX2, accumF16M2AVX2, accumF16M4AVX2, accumF16M8AVX2}, scoresHeadsF16AVX2, accumHeadsF16AVX2), []scoresHeadsKern[uint16]{scoresGroupF16M2AVX2, scoresGroupF16M4AVX2}, []accumHeadsKern[uint16]{accumGroupF16M2AVX2, accumGroupF16M4AVX2}),
			FormatQ8:   kernelsOf([]scoresKern[byte]{scoresQ8M1AVX2, scoresQ8M2AVX2, scoresQ8M4AVX2, scoresQ8M8AVX2}, []accumKern[byte]{accumQ8M1AVX2, accumQ8M2AVX2, accumQ8M4AVX2, accumQ8M8AVX2}, scoresHeadsQ8AVX2, accumHeadsQ8AVX2),
			FormatQ4:   kernelsOf([]scoresKern[byte]{scoresQ4M1AVX2, scoresQ4M2AVX2, scoresQ4M4AVX2, scoresQ4M8AVX2}, []accumKern[byte]{accumQ4M1AVX2, accumQ4M2AVX2, accumQ4M4AVX2, accumQ4M8AVX2}, scoresHeadsQ4AVX2, accumHeadsQ4AVX2),
			FormatE4M3: kernelsOf([]scoresKern[byte]{scoresE4M3M1AVX2, scoresE4M3M2AVX2, scoresE4M3M4AVX2, scoresE4M3M8AVX2}, []accumKern[byte]{accumE4M3M1AVX2, accumE4M3M2AVX2, accumE4M3M4AVX2, accumE4M3M8AVX2}, scoresHeadsE4M3AVX2, accumHeadsE4M3AVX2),
			FormatE5M2: kernelsOf([]scoresKern[byte]{scoresE5M2M1AVX2, scoresE5M2M2AVX2, scoresE5M2M4AVX2, scoresE5M2M8AVX2}, []accumKern[byte]{accumE5M2M1AVX2, accumE5M2M2AVX2, accumE5M2M4AVX2, accumE5M2M8AVX2}, scoresHeadsE5M2AVX2, accumHeadsE5M2AVX2),
		}, readSumAVX2))
	}
	return withNativeBF16(ds)
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
