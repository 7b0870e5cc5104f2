package main

// softcapNEON (see Impl.Softcap), the algorithm of the amd64 softcapAVX2:
// y = x·(1/c); tanh y by Cephes' polynomial where |y| <= 0.625, else
// 1 − 2/(e^{2|y|} + 1) with the sign of y (e^{2|y|} by expCore on
// min(2|y|, 88)); x = c·tanh y and g = 1 − tanh² (one fused FMLS). Two
// vectors (8 floats) per step; with g == nil (len 0) a second loop skips
// g.

// softcapExp are the exponential's constants in softcapNEON.
var softcapExp = expRegs{ka: 31, kb: 30, kc: 29, one: 28, shift: 16}

// The other loop-invariant registers of softcapNEON.
const (
	capC    V = 27 // c
	capInv  V = 26 // 1/c
	capTwo  V = 25 // 2
	cap88   V = 24 // 88, the bound of 2|y| (e^88 is finite)
	cap0625 V = 23 // 0.625, the bound of the polynomial
	capSign V = 22 // the sign bit
	capTA   V = 21 // lanes: T0 T1 T2 T3
	capTB   V = 20 // lane 0: T4
)

// genSoftcap emits softcapNEON: the constants, then the loop with g or
// the one without.
func genSoftcap(f *file) {
	softcapEntry(f)
	f.i("CBZ R3, noG")
	softcapLoop(f, true, "withG")
	softcapLoop(f, false, "noG")
	f.fn = nil
}

// softcapEntry starts the kernel: its signature and doc, the arguments
// (x in R0, R1; g in R2, R3) and the loop-invariant registers.
func softcapEntry(f *file) {
	f.text("softcapNEON", "func(x, g []float32, c float32)",
		"softcapNEON sets x[j] = c·tanh(x[j]/c) and, if len(g) > 0, g[j] = 1 − tanh²",
		"(see Impl.Softcap); len(x) is a multiple of 8; len(g) is 0 or len(x).")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	f.ld("R2", "g", "base")
	f.ld("R3", "g", "len")
	k := softcapExp
	k.load(f)
	f.constQ(capTwo, "R9", "two")
	f.constQ(cap88, "R9", "c88")
	f.constQ(cap0625, "R9", "c0625")
	f.constQ(capSign, "R9", "sign")
	f.constQ(capTA, "R9", "tanhA")
	f.constQ(capTB, "R9", "tanhB")
	f.i("FMOVS %s, F%d", f.arg("c", ""), capC)
	f.w(dupE(capC, capC, 0))
	f.w(fdiv(capInv, k.one, capC)) // 1/c
}

// softcapLoop emits the loop over the steps of 8 floats (withG: also
// storing g), its labels prefixed by tag, ending in RET.
func softcapLoop(f *file, withG bool, tag string) {
	s := newSoftcapStep(f)
	f.label(tag)
	f.i("CBZ R1, %sDone", tag)
	f.i("FLDPQ (R0), (F0, F1)")
	s.each(func(i int) { f.w(fmul(s.ys[i], s.ys[i], capInv)) })
	s.large()
	t := s.small()
	s.blend(t)
	f.i("FSTPQ (F0, F1), (R0)")
	f.i("ADD $32, R0")
	if withG {
		s.gradient(t)
	}
	f.i("SUBS $8, R1, R1")
	f.i("BNE %s", tag)
	f.label(tag + "Done")
	f.i("RET")
}

// softcapStep is one step of softcapNEON, two vectors: y (x at the load,
// the result at the store), a (|y|, then the blend mask), u (the large
// branch), n, p, q (expCore's scratch; p also the polynomial's), t (the
// small branch) and z (y², then g).
type softcapStep struct {
	f                              *file
	ys, as, us, ns, ps, qs, ts, zs []V
}

// newSoftcapStep assigns the step's registers, v0-v15.
func newSoftcapStep(f *file) softcapStep {
	return softcapStep{f: f,
		ys: []V{0, 1}, as: []V{2, 3}, us: []V{4, 5},
		ns: []V{6, 7}, ps: []V{8, 9}, qs: []V{10, 11},
		ts: []V{12, 13}, zs: []V{14, 15}}
}

// each emits g(i) for each vector of the step.
func (s softcapStep) each(g func(i int)) { eachV(s.ys, g) }

// large sets a = |y| and u = 1 − 2/(e^{2|y|} + 1) with the sign of y
// (2|y| clamped to 88).
func (s softcapStep) large() {
	f, k := s.f, softcapExp
	s.each(func(i int) { f.w(fabs(s.as[i], s.ys[i])) })
	s.each(func(i int) { f.w(fadd(s.us[i], s.as[i], s.as[i])) })
	s.each(func(i int) { f.w(fmin(s.us[i], s.us[i], cap88)) })
	f.expCore(k, s.us, s.ns, s.ps, s.qs) // e^{2|y|}
	s.each(func(i int) { f.w(fadd(s.us[i], s.us[i], k.one)) })
	s.each(func(i int) { f.w(fdiv(s.us[i], capTwo, s.us[i])) })
	s.each(func(i int) { f.w(fsub(s.us[i], k.one, s.us[i])) })   // 1 − 2/(e+1)
	s.each(func(i int) { f.w(vbit(s.us[i], s.ys[i], capSign)) }) // with the sign of y
}

// small computes y + y·z·T(z), z = y², by Horner's rule in the two
// register sets t and p, and returns the set that holds it.
func (s softcapStep) small() []V {
	f := s.f
	zs := s.zs
	s.each(func(i int) { f.w(fmul(zs[i], s.ys[i], s.ys[i])) })
	s.each(func(i int) { f.w(dupE(s.ts[i], capTA, 1)) })
	s.each(func(i int) { f.w(fmlaE(s.ts[i], zs[i], capTA, 0)) })
	a, b := s.ts, s.ps
	for _, c := range []struct {
		k    V
		lane int
	}{{capTA, 2}, {capTA, 3}, {capTB, 0}} {
		s.each(func(i int) { f.w(dupE(b[i], c.k, c.lane)) })
		s.each(func(i int) { f.w(fmla(b[i], a[i], zs[i])) })
		a, b = b, a
	}
	// a holds T(z).
	s.each(func(i int) { f.w(fmul(a[i], a[i], zs[i])) })
	s.each(func(i int) { f.w(vmov(b[i], s.ys[i])) })
	s.each(func(i int) { f.w(fmla(b[i], a[i], s.ys[i])) }) // y + y·z·T
	return b
}

// blend sets t to the large branch where |y| > 0.625 (false for NaN), and
// y = c·t.
func (s softcapStep) blend(t []V) {
	f := s.f
	s.each(func(i int) { f.w(fcmgt(s.as[i], s.as[i], cap0625)) })
	s.each(func(i int) { f.w(vbit(t[i], s.us[i], s.as[i])) })
	s.each(func(i int) { f.w(fmul(s.ys[i], t[i], capC)) })
}

// gradient stores g = 1 − t² and advances g.
func (s softcapStep) gradient(t []V) {
	f, zs := s.f, s.zs
	s.each(func(i int) { f.w(vmov(zs[i], softcapExp.one)) })
	s.each(func(i int) { f.w(fmls(zs[i], t[i], t[i])) }) // 1 − t²
	f.i("FSTPQ (F%d, F%d), (R2)", zs[0], zs[1])
	f.i("ADD $32, R2")
}
