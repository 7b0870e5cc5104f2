package main

// genDot4T emits dot4TNEON (see Impl.Dot4T): Sᵀ for four rows of A
// against n rows of B read in place. Keys go four at a time: 16
// accumulators (v16-v31, key j row r in v(16+4j+r)); per 8 k the four A
// rows and the four key rows are each read by one post-incremented LDP Q
// (v0-v7, v8-v15) and multiplied by 32 vector FMLAs. Each key's four
// accumulators are folded by three FADDP into [s0 s1 s2 s3], stored at
// c[j*ldc]. Leftover keys go one at a time (4 accumulators).
//
// Ceiling on Neoverse V2 / Apple M: per 8 k of four keys 8 LDP (16
// vectors, 5.3 cycles of loads) + 32 FMLA (8 cycles) + 2 loop
// instructions; 16 chains updated every 4 cycles, exactly latency ×
// pipes, so ≈ 0.85 of the FMA peak (estimated) while A and the keys are
// in L1.
func genDot4T(f *file) {
	f.text("dot4TNEON", "func(c []float32, ldc int, a []float32, b []float32, ldb, n, k int)",
		"dot4TNEON sets c[j*ldc+r] = Σ_p a[r*k+p]·b[j*ldb+p] for r < 4, j < n (see Impl.Dot4T).",
		"k is a positive multiple of 8, n >= 1, ldc >= 4; all accesses are in bounds.")
	const (
		cp, ldc, a, bp, ldb, n, k = "R0", "R1", "R2", "R3", "R4", "R5", "R6"
		pc                        = "R7"
	)
	aRow := []string{"R8", "R9", "R10", "R11"}
	bRow := []string{"R12", "R13", "R14", "R15"}
	f.ld(cp, "c", "base")
	f.ld(ldc, "ldc", "")
	f.i("LSL $2, %s", ldc)
	f.ld(a, "a", "base")
	f.ld(bp, "b", "base")
	f.ld(ldb, "ldb", "")
	f.i("LSL $2, %s", ldb)
	f.ld(n, "n", "")
	f.ld(k, "k", "")
	acc := func(j, r int) V { return V(16 + 4*j + r) }
	group := func(keys int, tag string) {
		for j := 0; j < keys; j++ {
			for r := 0; r < 4; r++ {
				f.w(movi0(acc(j, r)))
			}
		}
		f.i("MOVD %s, %s", a, aRow[0])
		for r := 1; r < 4; r++ {
			f.i("ADD %s<<2, %s, %s", k, aRow[r-1], aRow[r])
		}
		f.i("MOVD %s, %s", bp, bRow[0])
		for j := 1; j < keys; j++ {
			f.i("ADD %s, %s, %s", ldb, bRow[j-1], bRow[j])
		}
		f.i("MOVD %s, %s", k, pc)
		f.label(tag + "Dot")
		for r := 0; r < 4; r++ {
			f.i("FLDPQ.P 32(%s), (F%d, F%d)", aRow[r], 2*r, 2*r+1)
		}
		for j := 0; j < keys; j++ {
			f.i("FLDPQ.P 32(%s), (F%d, F%d)", bRow[j], 8+2*j, 9+2*j)
		}
		for h := 0; h < 2; h++ {
			for j := 0; j < keys; j++ {
				for r := 0; r < 4; r++ {
					f.w(fmla(acc(j, r), V(2*r+h), V(8+2*j+h)))
				}
			}
		}
		f.i("SUBS $8, %s, %s", pc, pc)
		f.i("BNE %sDot", tag)
		for j := 0; j < keys; j++ {
			f.w(faddp(acc(j, 0), acc(j, 0), acc(j, 1)))
			f.w(faddp(acc(j, 2), acc(j, 2), acc(j, 3)))
			f.w(faddp(acc(j, 0), acc(j, 0), acc(j, 2)))
			f.i("FMOVQ F%d, (%s)", acc(j, 0), cp)
			f.i("ADD %s, %s", ldc, cp)
		}
		f.i("ADD %s<<%d, %s, %s", ldb, map[int]int{1: 0, 4: 2}[keys], bp, bp)
	}
	f.label("quad")
	f.i("CMP $4, %s", n)
	f.i("BLT single")
	group(4, "quad")
	f.i("SUB $4, %s", n)
	f.i("B quad")
	f.label("single")
	f.i("CBZ %s, done", n)
	group(1, "single")
	f.i("SUB $1, %s", n)
	f.i("B single")
	f.label("done")
	f.ret()
}
