package main

// Conversions between float32 and the 16-bit types, bit for bit those of
// halfconv.go: fp16 by FCVTL/FCVTN (IEEE, round to nearest even under
// Go's FPCR, subnormals kept, NaNs quieted with their top payload bits as
// F32ToF16 does), bfloat16 by integer arithmetic (the rounding of
// F32ToBF16, which needs no FEAT_BF16). Each converts 16 elements per step;
// the Go wrappers convert the tail.

// bf16Regs are the constants of the bfloat16 rounding.
type bf16Regs struct{ k7fff, one, quiet8h V }

// loadBF16Regs loads the constants of r from the table at base.
func (f *file) loadBF16Regs(r bf16Regs, base string) {
	f.constQ(r.k7fff, base, "k7fff")
	f.constQ(r.one, base, "int1")
	if r.quiet8h >= 0 {
		f.constQ(r.quiet8h, base, "quiet8h")
	}
}

// roundBF16Bits sets t = x + 0x7fff + (x>>16 & 1) for each 32-bit lane:
// the float32 bits whose top half is x rounded to bfloat16 (nearest even;
// a carry into the exponent is right, up to Inf). NaNs are fixed by the
// caller.
func (f *file) roundBF16Bits(r bf16Regs, t, x V) {
	f.w(ushr(s4, t, x, 16))
	f.w(vand(t, t, r.one))
	f.w(vadd(s4, t, t, x))
	f.w(vadd(s4, t, t, r.k7fff))
}

// narrowBF16 sets d (8 bfloat16 lanes) to x0, x1 (4 float32 lanes each)
// rounded as F32ToBF16, using t0, t1, m0, m1 as scratch.
func (f *file) narrowBF16(r bf16Regs, d, x0, x1, t0, t1, m0, m1 V) {
	f.roundBF16Bits(r, t0, x0)
	f.roundBF16Bits(r, t1, x1)
	f.w(uzp2(h8, d, t0, t1)) // the top halves
	// NaN lanes: the top half with the quiet bit set.
	f.w(fcmeq(m0, x0, x0))
	f.w(fcmeq(m1, x1, x1))
	f.w(uzp1(h8, m0, m0, m1)) // all ones where not NaN
	f.w(uzp2(h8, t0, x0, x1))
	f.w(vorr(t0, t0, r.quiet8h))
	f.w(vbif(d, t0, m0)) // d = m0 ? d : t0
}

// convLoop emits a loop over the 16-element blocks of n (a register, a
// count of elements, a multiple of 16): body converts one block.
func (f *file) convLoop(n string, body func()) {
	f.i("CBZ %s, done", n)
	f.label("loop")
	body()
	f.i("SUBS $16, %s, %s", n, n)
	f.i("BNE loop")
	f.label("done")
	f.ret()
}

// genConvert emits the converters: the widenings to float32, the
// narrowings from it, and the round trips in place.
func genConvert(f *file) {
	genWiden(f, "bf16ToF32NEON", "bf16ToF32NEON widens len(src) bfloat16 (a multiple of 16) into dst (SHLL #16).",
		shll, shll2)
	genWiden(f, "f16ToF32NEON", "f16ToF32NEON widens len(src) fp16 (a multiple of 16) into dst (FCVTL).",
		fcvtl, fcvtl2)
	genF32ToF16(f)
	genF32ToBF16(f)
	genRoundBF16(f)
	genRoundF16(f)
}

// convEntry starts a converter name(dst, src) with the Go signature sig
// and doc: dst in R0, src in R1, the count len(src) in R2.
func convEntry(f *file, name, sig string, doc ...string) {
	f.text(name, sig, doc...)
	f.ld("R0", "dst", "base")
	f.ld("R1", "src", "base")
	f.ld("R2", "src", "len")
}

// genWiden emits a widening of 16-bit values to float32, lo and hi
// widening the low and the high four lanes of a vector.
func genWiden(f *file, name, doc string, lo, hi func(d, n V) inst) {
	convEntry(f, name, "func(dst []float32, src []uint16)", doc)
	f.convLoop("R2", func() {
		f.i("FLDPQ.P 32(R1), (F0, F1)")
		f.w(lo(2, 0))
		f.w(hi(3, 0))
		f.w(lo(4, 1))
		f.w(hi(5, 1))
		f.i("FSTPQ.P (F2, F3), 32(R0)")
		f.i("FSTPQ.P (F4, F5), 32(R0)")
	})
}

// genF32ToF16 emits f32ToF16NEON (FCVTN, FCVTN2).
func genF32ToF16(f *file) {
	convEntry(f, "f32ToF16NEON", "func(dst []uint16, src []float32)",
		"f32ToF16NEON rounds len(src) float32 (a multiple of 16) to fp16 into dst (FCVTN).")
	f.convLoop("R2", func() {
		f.i("FLDPQ.P 32(R1), (F0, F1)")
		f.i("FLDPQ.P 32(R1), (F2, F3)")
		f.w(fcvtn(4, 0))
		f.w(fcvtn2(4, 1))
		f.w(fcvtn(5, 2))
		f.w(fcvtn2(5, 3))
		f.i("FSTPQ.P (F4, F5), 32(R0)")
	})
}

// genF32ToBF16 emits f32ToBF16NEON (narrowBF16).
func genF32ToBF16(f *file) {
	convEntry(f, "f32ToBF16NEON", "func(dst []uint16, src []float32)",
		"f32ToBF16NEON rounds len(src) float32 (a multiple of 16) to bfloat16 into dst",
		"as F32ToBF16 does (integer rounding; NaNs quieted).")
	r := bf16Regs{k7fff: 31, one: 30, quiet8h: 29}
	f.constBase("R9")
	f.loadBF16Regs(r, "R9")
	f.convLoop("R2", func() {
		f.i("FLDPQ.P 32(R1), (F0, F1)")
		f.i("FLDPQ.P 32(R1), (F2, F3)")
		f.narrowBF16(r, 4, 0, 1, 8, 9, 10, 11)
		f.narrowBF16(r, 5, 2, 3, 12, 13, 14, 15)
		f.i("FSTPQ.P (F4, F5), 32(R0)")
	})
}

// genRoundBF16 emits roundBF16NEON, RoundF32 of bfloat16: x =
// e.ToF32(e.FromF32(x)) in place: the rounded bits (a NaN's own bits with
// the quiet bit set), their low half cleared.
func genRoundBF16(f *file) {
	f.text("roundBF16NEON", "func(x []float32)",
		"roundBF16NEON rounds each element of x (len a multiple of 16) to bfloat16 and",
		"back, in place (see Impl.RoundF32).")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	rr := bf16Regs{k7fff: 31, one: 30, quiet8h: -1}
	f.constBase("R9")
	f.loadBF16Regs(rr, "R9")
	const vQuiet, vHi = 29, 28
	f.constQ(vQuiet, "R9", "quiet32")
	f.constQ(vHi, "R9", "hi16")
	f.elem16("R1", []string{"R0"}, [][4]V{{0, 1, 2, 3}}, func() {
		for v := V(0); v < 4; v++ {
			t, m := v+4, v+8
			f.roundBF16Bits(rr, t, v)
			f.w(fcmeq(m, v, v))
			f.w(vorr(v, v, vQuiet)) // NaN: quiet
			f.w(vbit(v, t, m))      // rounded where not NaN
			f.w(vand(v, v, vHi))
		}
	}, true)
	f.ret()
}

// genRoundF16 emits roundF16NEON, RoundF32 of fp16 in place (FCVTN then
// FCVTL).
func genRoundF16(f *file) {
	f.text("roundF16NEON", "func(x []float32)",
		"roundF16NEON rounds each element of x (len a multiple of 16) to fp16 and back,",
		"in place (see Impl.RoundF32).")
	f.ld("R0", "x", "base")
	f.ld("R1", "x", "len")
	f.elem16("R1", []string{"R0"}, [][4]V{{0, 1, 2, 3}}, func() {
		for v := V(0); v < 4; v++ {
			f.w(fcvtn(v, v))
			f.w(fcvtl(v, v))
		}
	}, true)
	f.ret()
}
