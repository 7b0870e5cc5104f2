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
	dot4TEntry(f)
	f.label("quad")
	f.i("CMP $4, %s", d4N)
	f.i("BLT single")
	dot4TGroup(f, 4, "quad")
	f.i("SUB $4, %s", d4N)
	f.i("B quad")
	f.label("single")
	f.i("CBZ %s, done", d4N)
	dot4TGroup(f, 1, "single")
	f.i("SUB $1, %s", d4N)
	f.i("B single")
	f.label("done")
	f.ret()
}

// General-purpose registers of dot4TNEON.
const (
	d4C   = "R0" // c at the current key
	d4Ldc = "R1" // ldc in bytes
	d4A   = "R2" // a
	d4B   = "R3" // b at the current key
	d4Ldb = "R4" // ldb in bytes
	d4N   = "R5" // keys left
	d4K   = "R6" // k
	d4Pc  = "R7" // k left
)

// d4ARows and d4BRows are the running pointers into A's four rows and the
// group's key rows.
var (
	d4ARows = []string{"R8", "R9", "R10", "R11"}
	d4BRows = []string{"R12", "R13", "R14", "R15"}
)

// dot4TAcc is the accumulator of key j, row r.
func dot4TAcc(j, r int) V { return V(16 + 4*j + r) }

// dot4TEntry starts the kernel: its signature and doc, and the arguments
// in their registers (strides in bytes).
func dot4TEntry(f *file) {
	f.text("dot4TNEON", "func(c []float32, ldc int, a []float32, b []float32, ldb, n, k int)",
		"dot4TNEON sets c[j*ldc+r] = Σ_p a[r*k+p]·b[j*ldb+p] for r < 4, j < n (see Impl.Dot4T).",
		"k is a positive multiple of 8, n >= 1, ldc >= 4; all accesses are in bounds.")
	f.ld(d4C, "c", "base")
	f.ldStride(d4Ldc, "ldc", 4)
	f.ld(d4A, "a", "base")
	f.ld(d4B, "b", "base")
	f.ldStride(d4Ldb, "ldb", 4)
	f.ld(d4N, "n", "")
	f.ld(d4K, "k", "")
}

// dot4TGroup emits the dot products of A's four rows with a group of keys
// (4 or 1), its loop labelled tag+"Dot": the accumulators zeroed, the
// loop over k, then each key's four sums folded and stored in its row of
// c.
func dot4TGroup(f *file, keys int, tag string) {
	for j := 0; j < keys; j++ {
		for r := 0; r < 4; r++ {
			f.w(movi0(dot4TAcc(j, r)))
		}
	}
	f.i("MOVD %s, %s", d4A, d4ARows[0])
	for r := 1; r < 4; r++ {
		f.i("ADD %s<<2, %s, %s", d4K, d4ARows[r-1], d4ARows[r])
	}
	f.i("MOVD %s, %s", d4B, d4BRows[0])
	for j := 1; j < keys; j++ {
		f.i("ADD %s, %s, %s", d4Ldb, d4BRows[j-1], d4BRows[j])
	}
	f.i("MOVD %s, %s", d4K, d4Pc)
	dot4TLoop(f, keys, tag)
	for j := 0; j < keys; j++ {
		f.w(faddp(dot4TAcc(j, 0), dot4TAcc(j, 0), dot4TAcc(j, 1)))
		f.w(faddp(dot4TAcc(j, 2), dot4TAcc(j, 2), dot4TAcc(j, 3)))
		f.w(faddp(dot4TAcc(j, 0), dot4TAcc(j, 0), dot4TAcc(j, 2)))
		f.i("FMOVQ F%d, (%s)", dot4TAcc(j, 0), d4C)
		f.i("ADD %s, %s", d4Ldc, d4C)
	}
	f.i("ADD %s<<%d, %s, %s", d4Ldb, map[int]int{1: 0, 4: 2}[keys], d4B, d4B)
}

// dot4TLoop emits the loop over k, 8 at a time: one LDP Q per A row
// (v0-v7) and per key (v8-v15), then the products.
func dot4TLoop(f *file, keys int, tag string) {
	f.label(tag + "Dot")
	for r := 0; r < 4; r++ {
		f.i("FLDPQ.P 32(%s), (F%d, F%d)", d4ARows[r], 2*r, 2*r+1)
	}
	for j := 0; j < keys; j++ {
		f.i("FLDPQ.P 32(%s), (F%d, F%d)", d4BRows[j], 8+2*j, 9+2*j)
	}
	for h := 0; h < 2; h++ {
		for j := 0; j < keys; j++ {
			for r := 0; r < 4; r++ {
				f.w(fmla(dot4TAcc(j, r), V(2*r+h), V(8+2*j+h)))
			}
		}
	}
	f.i("SUBS $8, %s, %s", d4Pc, d4Pc)
	f.i("BNE %sDot", tag)
}
