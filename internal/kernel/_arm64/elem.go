package main

import (
	"fmt"
	"math"

	"github.com/flashattn/flashattn/internal/kernel/_kconst"
)

// ---------------------------------------------------------------------------
// The constant table. Every entry is one 16-byte row: either one value in
// all four lanes (a vector operand) or four different values (the lanes
// of a by-element operand).

// generic holds package kernel's constants (generic.go): the exponential's
// Exp… and tanh's polynomial tanhT0 … tanhT4 (Cephes' tanhf for
// |y| <= 0.625: tanh y = y + y·z·T(z), z = y²), the values of the table.
var generic = kconst.MustRead("../generic.go")

func f32(x float64) uint32 { return math.Float32bits(float32(x)) }

// gf32 is f32 of generic's constant name.
func gf32(name string) uint32 { return f32(generic.F64(name)) }

func splat(x uint32) [4]uint32 { return [4]uint32{x, x, x, x} }

var constRows = []struct {
	name string
	v    [4]uint32
}{
	{"expA", [4]uint32{gf32("ExpLog2e"), gf32("ExpLn2Hi"), gf32("ExpLn2Lo"), gf32("ExpP0")}},
	{"expB", [4]uint32{gf32("ExpP1"), gf32("ExpP2"), gf32("ExpP3"), gf32("ExpP4")}},
	{"expC", [4]uint32{gf32("ExpP5"), f32(0.625), 0, 0}},
	{"one", splat(f32(1))},
	{"expShift", splat(f32(expShift))},
	{"expMin", splat(gf32("ExpMin"))},
	{"expMax", splat(gf32("ExpMax"))},
	{"inf", splat(f32(math.Inf(1)))},
	{"tanhA", [4]uint32{gf32("tanhT0"), gf32("tanhT1"), gf32("tanhT2"), gf32("tanhT3")}},
	{"tanhB", [4]uint32{gf32("tanhT4"), 0, 0, 0}},
	{"two", splat(f32(2))},
	{"c88", splat(f32(88))},
	{"c0625", splat(f32(0.625))},
	{"sign", splat(0x80000000)},
	{"lanes0", [4]uint32{f32(0), f32(1), f32(2), f32(3)}},
	{"lanes4", [4]uint32{f32(4), f32(5), f32(6), f32(7)}},
	{"lanes8", [4]uint32{f32(8), f32(9), f32(10), f32(11)}},
	{"lanes12", [4]uint32{f32(12), f32(13), f32(14), f32(15)}},
	{"sixteen", splat(f32(16))},
	{"k7fff", splat(0x7fff)},
	{"int1", splat(1)},
	{"quiet8h", splat(0x00400040)},
	{"quiet32", splat(0x00400000)},
	{"hi16", splat(0xffff0000)},
	{"int0123", [4]uint32{0, 1, 2, 3}},
	{"int4567", [4]uint32{4, 5, 6, 7}},
}

// genConsts emits the table.
func genConsts(f *file) {
	var vals []uint32
	for _, r := range constRows {
		vals = append(vals, r.v[:]...)
	}
	f.constTable("neonconsts", vals)
}

// constOff is the byte offset of row name.
func constOff(name string) int {
	for i, r := range constRows {
		if r.name == name {
			return 16 * i
		}
	}
	panic("no constant " + name)
}

// constBase loads the table's address into r.
func (f *file) constBase(r string) { f.i("MOVD $neonconsts<>(SB), %s", r) }

// constQ loads row name into vector register v (base: the table's
// address, from constBase).
func (f *file) constQ(v V, base, name string) { f.i("FMOVQ %d(%s), F%d", constOff(name), base, v) }

// ---------------------------------------------------------------------------
// Peak FMA throughput.

// genPeak emits FMAPeakNEON: 24 independent FMLA chains (v8-v31 += v0·v1,
// all zero): one iteration is 24·4·2 = 192 FLOPs. 24 chains over 4 pipes
// of latency 4 leave 1.5× the parallelism the pipes need.
func genPeak(f *file) {
	f.text("FMAPeakNEON", "func(iters int)",
		"FMAPeakNEON runs iters iterations of 24 independent register-only FMLA",
		"chains on 4-lane vectors: 192 float32 FLOPs per iteration (the peak).")
	peakLoop(f, func(d V) inst { return fmla(d, 0, 1) })
}

// peakLoop emits the body of a peak loop func(iters int): v0, v1 and the
// chains v8-v31 zeroed, then iters iterations of op(d) for each chain d
// (op reads v0 and v1).
func peakLoop(f *file, op func(d V) inst) {
	f.ld("R0", "iters", "")
	for v := V(0); v < 32; v++ {
		if v < 2 || v >= 8 {
			f.w(movi0(v))
		}
	}
	f.i("CMP $0, R0")
	f.i("BLE done")
	f.label("loop")
	for v := V(8); v < 32; v++ {
		f.w(op(v))
	}
	f.i("SUBS $1, R0, R0")
	f.i("BNE loop")
	f.label("done")
	f.ret()
}

// ---------------------------------------------------------------------------
// Elementwise kernels over a multiple of 16 floats: four vectors per step.

// elem16 emits the loop over n (a register holding a count of floats, a
// multiple of 16) with body(regs) working on the four vectors of the
// step loaded (from the pointers in loads) into groups of registers.
// Each load pointer p is read as four vectors into the given registers;
// store writes the first group back to the first pointer.
func (f *file) elem16(n string, ptrs []string, regs [][4]V, body func(), store bool) {
	f.i("CBZ %s, done", n)
	f.label("loop")
	for i, p := range ptrs {
		r := regs[i]
		f.i("FLDPQ (%s), (F%d, F%d)", p, r[0], r[1])
		f.i("FLDPQ 32(%s), (F%d, F%d)", p, r[2], r[3])
	}
	body()
	if store {
		r := regs[0]
		f.i("FSTPQ (F%d, F%d), (%s)", r[0], r[1], ptrs[0])
		f.i("FSTPQ (F%d, F%d), 32(%s)", r[2], r[3], ptrs[0])
	}
	for _, p := range ptrs {
		f.i("ADD $64, %s", p)
	}
	f.i("SUBS $16, %s, %s", n, n)
	f.i("BNE loop")
	f.label("done")
}

func genScale(f *file) {
	f.text("scaleNEON", "func(x []float32, a float32)",
		"scaleNEON multiplies x by a in place (see Impl.Scale); len(x) is a multiple of 16.")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	f.i("FMOVS %s, F31", f.arg("a", ""))
	f.elem16("R1", []string{"R0"}, [][4]V{{0, 1, 2, 3}}, func() {
		for v := V(0); v < 4; v++ {
			f.w(fmulE(v, v, 31, 0))
		}
	}, true)
	f.ret()
}

func genDsFromDp(f *file) {
	f.text("dsFromDpNEON", "func(dp, p []float32, d float32)",
		"dsFromDpNEON sets dp[j] = p[j]·(dp[j] − d) (see Impl.DsFromDp); len(dp) is a",
		"multiple of 16 and len(p) >= len(dp).")
	f.ld("R0", "dp", "base")
	f.ld("R1", "p", "base")
	f.ld("R2", "dp", "len")
	f.i("FMOVS %s, F31", f.arg("d", ""))
	f.w(dupE(31, 31, 0))
	f.elem16("R2", []string{"R0", "R1"}, [][4]V{{0, 1, 2, 3}, {4, 5, 6, 7}}, func() {
		for v := V(0); v < 4; v++ {
			f.w(fsub(v, v, 31))
			f.w(fmul(v, v+4, v))
		}
	}, true)
	f.ret()
}

// genMax emits maxNEON: four FMAXNM chains (FMAXNM, like the generic
// loop's v > m, passes over quiet NaNs), folded at the end.
func genMax(f *file) {
	f.text("maxNEON", "func(x []float32) float32",
		"maxNEON returns the largest element of x (see Impl.Max); len(x) is a positive multiple of 16.")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	f.i("FLDPQ (R0), (F4, F5)")
	f.i("FLDPQ 32(R0), (F6, F7)")
	f.elem16("R1", []string{"R0"}, [][4]V{{0, 1, 2, 3}}, func() {
		for v := V(0); v < 4; v++ {
			f.w(fmaxnm(v+4, v+4, v))
		}
	}, false)
	f.w(fmaxnm(4, 4, 5))
	f.w(fmaxnm(6, 6, 7))
	f.w(fmaxnm(4, 4, 6))
	f.w(fmaxnmv(0, 4))
	f.i("FMOVS F0, %s", f.arg("ret", ""))
	f.ret()
}

// genALiBi emits alibiNEON: x[j] −= float32(slope·|pos − j|) with j
// carried as four float vectors {0..3}+16·step … {12..15}+16·step (exact
// below 2^24), the distance by FABD (|pos − j| rounded once, as the
// generic code's subtraction and absolute value), the product by FMUL and
// the subtraction by FSUB: rounded twice, as alibiGeneric and the plain
// algorithm do (Impl.ALiBi: bit for bit), not one fused FMLS. One vector
// instruction more per 4 values than the fused form.
func genALiBi(f *file) {
	f.text("alibiNEON", "func(x []float32, slope, pos float32)",
		"alibiNEON sets x[j] −= float32(slope·|pos − j|) (see Impl.ALiBi): the product rounded,",
		"then subtracted, bit for bit alibiGeneric; len(x) is a multiple of 16.")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	f.i("FMOVS %s, F31", f.arg("slope", ""))
	f.i("FMOVS %s, F30", f.arg("pos", ""))
	f.w(dupE(30, 30, 0))
	f.constBase("R9")
	for i, name := range []string{"lanes0", "lanes4", "lanes8", "lanes12"} {
		f.constQ(V(8+i), "R9", name)
	}
	f.constQ(29, "R9", "sixteen")
	f.elem16("R1", []string{"R0"}, [][4]V{{0, 1, 2, 3}}, func() {
		for v := V(0); v < 4; v++ {
			f.w(fabd(v+4, 30, v+8))
			f.w(fmulE(v+4, v+4, 31, 0)) // slope·|pos − j|, rounded
			f.w(fsub(v, v, v+4))
			f.w(fadd(v+8, v+8, 29))
		}
	}, true)
	f.ret()
}

// ---------------------------------------------------------------------------
// Exponential.

// expRegs are the loop-invariant registers of the exponential.
type expRegs struct {
	ka, kb, kc V // lanes: [log2e ln2hi ln2lo P0] [P1 P2 P3 P4] [P5 …]
	one        V // 1.0 in every lane
	shift      V // expShift in every lane
}

// load points R9 at the constant table (constBase) and loads the
// exponential's registers from it.
func (k expRegs) load(f *file) {
	f.constBase("R9")
	f.constQ(k.ka, "R9", "expA")
	f.constQ(k.kb, "R9", "expB")
	f.constQ(k.kc, "R9", "expC")
	f.constQ(k.one, "R9", "one")
	f.constQ(k.shift, "R9", "expShift")
}

// expShift is 0x1.8p23 + 127: added to v = c·log2 e (|v| < 2^22) it gives
// a float32 in [2^23, 2^24), whose unit is 1, so the addition rounds v to
// an integer n (to nearest; at a tie to even shift + n, so odd n, where
// FRINTN gave even n: |r| = ln2/2 either way) and the low bits of
// the sum are 0x40007f + n, in two's complement: the sum minus expShift is
// n exactly, and the sum shifted left by 23 is (n + 127) << 23, the bits
// of 2^n (the 0x4b4 above them leave the word).
const expShift = 0x1.8p23 + 127

// eachV calls g(i) for each index i of vs: one step emitted for each of
// several vectors before the next step, so that their chains interleave.
func eachV(vs []V, g func(i int)) {
	for i := range vs {
		g(i)
	}
}

// expCore emits e^c for the vectors cs (in [ExpMin, ExpMax]; NaN gives
// NaN; below ExpMin, anything: the callers replace those lanes), each with two scratch registers ns and ps and a third qs. The
// result replaces c. The steps of all vectors are interleaved.
//
//	z = c·log2 e + expShift        (FMUL, FADD: rounds c·log2 e to n)
//	n = z − expShift               (FSUB, exact)
//	r = c − n·ln2hi − n·ln2lo      (two fused FMLS: n·ln2hi is exact)
//	p = ((((P0·r + P1)·r + P2)·r + P3)·r + P4)·r + P5   (fused, Horner)
//	e^r = p·r² + r + 1, times 2^n = the bits z << 23 (SHL)
//
// the generic Exp's reduction and polynomial with fused multiply-adds, so
// at least as accurate (TestExpULP: within 2 ulp of the correctly rounded
// value over the whole range). The shift (expShift) takes the place of a
// FRINTN, an FCVTZS and the ADD of 2^n's exponent bias: one instruction
// fewer per vector, and none of the conversions, which issue on two of
// the four vector pipes of a Neoverse V2.
func (f *file) expCore(k expRegs, cs, ns, ps, qs []V) {
	each := func(g func(i int)) { eachV(cs, g) }
	each(func(i int) { f.w(fmulE(ns[i], cs[i], k.ka, 0)) })
	each(func(i int) { f.w(fadd(ns[i], ns[i], k.shift)) }) // z
	each(func(i int) { f.w(fsub(qs[i], ns[i], k.shift)) }) // n
	each(func(i int) { f.w(fmlsE(cs[i], qs[i], k.ka, 1)) })
	each(func(i int) { f.w(fmlsE(cs[i], qs[i], k.ka, 2)) }) // c = r
	each(func(i int) { f.w(dupE(ps[i], k.kb, 0)) })
	each(func(i int) { f.w(fmlaE(ps[i], cs[i], k.ka, 3)) }) // P1 + r·P0
	steps := []struct {
		k    V
		lane int
	}{{k.kb, 1}, {k.kb, 2}, {k.kb, 3}, {k.kc, 0}}
	for s, st := range steps {
		a, b := ps, qs // b = coefficient + a·r
		if s%2 == 1 {
			a, b = qs, ps
		}
		each(func(i int) { f.w(dupE(b[i], st.k, st.lane)) })
		each(func(i int) { f.w(fmla(b[i], a[i], cs[i])) })
	}
	// After four steps the polynomial is in ps.
	each(func(i int) { f.w(fmul(qs[i], cs[i], cs[i])) }) // r²
	each(func(i int) { f.w(fmla(cs[i], ps[i], qs[i])) }) // r + p·r²
	each(func(i int) { f.w(fadd(cs[i], cs[i], k.one)) })
	each(func(i int) { f.w(shl(s4, ns[i], ns[i], 23)) }) // 2^n
	each(func(i int) { f.w(fmul(cs[i], cs[i], ns[i])) })
}

// genExpSum emits expSumNEON. Per step of four vectors (16 floats): the
// argument t = round(scale·x) − sub by an FMUL then an FADD of −sub (the
// product rounded before the subtraction, as the plain algorithm rounds
// the score before subtracting the row maximum; see Impl.ExpSum: t is
// Generic's float32 exactly; as many instructions as the fused form's
// MOV + FMLA had), clamped to at most ExpMax, expCore, then the lanes
// below ExpMin (−Inf included) set to 0 and those above ExpMax to +Inf
// (NaN compares false and stays NaN), stored and summed into two
// accumulators. The lanes below ExpMin are not clamped: expCore makes
// garbage of them (2^n out of range, or NaN from −Inf), which the mask
// clears; the others are what a clamp to [ExpMin, ExpMax] gave, bit for
// bit. 28 vector instructions per vector of 4 results, all independent
// across the four vectors of a step: bound by the vector pipes (llvm-mca,
// Neoverse V2: ≈ 29 cycles per 16 results; 33 with a FRINTN, an FCVTZS,
// the bias ADD and the lower clamp).
func genExpSum(f *file) {
	f.text("expSumNEON", "func(x []float32, scale, sub float32) float32",
		"expSumNEON sets x[j] = exp(t), t = float32(scale·x[j]) − sub (the product rounded,",
		"then sub subtracted), and returns their sum (see Impl.ExpSum); len(x) is a multiple of 16.")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	expSumInvariants(f)
	f.elem16("R1", []string{"R0"}, [][4]V{{0, 1, 2, 3}}, func() { expSumStep(f) }, true)
	f.w(fadd(22, 22, 21))
	f.w(faddp(22, 22, 22))
	f.w(faddpS(0, 22))
	f.i("FMOVS F0, %s", f.arg("ret", ""))
	f.ret()
}

// The loop-invariant registers of expSumNEON: v31-v29 the exponential's
// lanes, v28 1.0 and v20 expShift (expSumExp), the bounds, +Inf, −sub (all lanes) and
// scale (lane 0); v22/v21 are the sums.
var expSumExp = expRegs{ka: 31, kb: 30, kc: 29, one: 28, shift: 20}

const esMin, esMax, esInf, esNegSub, esScale V = 27, 26, 25, 24, 23

// expSumInvariants loads the loop-invariant registers and zeroes the sums.
func expSumInvariants(f *file) {
	expSumExp.load(f)
	f.constQ(esMin, "R9", "expMin")
	f.constQ(esMax, "R9", "expMax")
	f.constQ(esInf, "R9", "inf")
	f.i("FMOVS %s, F%d", f.arg("sub", ""), esNegSub)
	f.w(fneg(esNegSub, esNegSub))
	f.w(dupE(esNegSub, esNegSub, 0))
	f.i("FMOVS %s, F%d", f.arg("scale", ""), esScale)
	f.w(movi0(22))
	f.w(movi0(21))
}

// expSumStep emits the work on the four vectors of a step, x in v0-v3:
// the argument, clamped, its exponential, the out-of-range lanes fixed,
// and the sums.
func expSumStep(f *file) {
	xs := []V{0, 1, 2, 3}   // loaded x, then the argument c = min(t, ExpMax)
	ts := []V{4, 5, 6, 7}   // the argument t
	ns := []V{8, 9, 10, 11} // n, 2^n, masks
	ps := []V{12, 13, 14, 15}
	qs := []V{16, 17, 18, 19}
	each := func(g func(i int)) { eachV(xs, g) }
	each(func(i int) { f.w(fmulE(ts[i], xs[i], esScale, 0)) }) // round(x·scale)
	each(func(i int) { f.w(fadd(ts[i], ts[i], esNegSub)) })    // t = round(x·scale) − sub
	each(func(i int) { f.w(fmin(xs[i], ts[i], esMax)) })       // c; below ExpMin the mask clears
	f.expCore(expSumExp, xs, ns, ps, qs)
	each(func(i int) { f.w(fcmgt(ns[i], esMin, ts[i])) }) // t < ExpMin
	each(func(i int) { f.w(vbic(xs[i], xs[i], ns[i])) })
	each(func(i int) { f.w(fcmgt(ns[i], ts[i], esMax)) }) // t > ExpMax
	each(func(i int) { f.w(vbit(xs[i], esInf, ns[i])) })
	each(func(i int) { f.w(fadd(V(22-i%2), V(22-i%2), xs[i])) })
}

// genHalfPeaks emits the peak loops of the 16-bit paths, shaped like
// FMAPeakNEON: FMAPeakBF16NEON (24 chains of BFDOT: 24·4·2·2 = 384 FLOPs
// per iteration) and FMAPeakF16NEON (24 chains of FMLAL: 192 FLOPs), and
// FMAPeakBFMMLANEON (24 chains of BFMMLA, 2×2 outputs of 4 products each:
// 24·2·2·4·2 = 768 FLOPs), the bound of the neonbfmmla path, for
// measuring it beside BFDOT (BenchmarkBFMMLAPeak).
func genHalfPeaks(f *file) {
	for _, p := range []struct {
		name, what, of string
		flops          int
		op             func(d, n, m V, i int) inst
	}{
		{"FMAPeakBF16NEON", "BFDOT", "the peak of the 16-bit path", 384, bfdotE},
		{"FMAPeakF16NEON", "FMLAL", "the peak of the 16-bit path", 192, fmlalE},
		{"FMAPeakBFMMLANEON", "BFMMLA", "the peak of the neonbfmmla path", 768, func(d, n, m V, _ int) inst { return bfmmla(d, n, m) }},
	} {
		f.text(p.name, "func(iters int)",
			fmt.Sprintf("%s runs iters iterations of 24 independent register-only %s chains:", p.name, p.what),
			fmt.Sprintf("%d float32 FLOPs per iteration (%s).", p.flops, p.of))
		peakLoop(f, func(d V) inst { return p.op(d, 0, 1, 0) })
	}
}
