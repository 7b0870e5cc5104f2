package main

// genPhilox8 emits philox8NEON: the Philox-4x32-10 outputs of the eight
// counters (c0+g, c1, c2, c3), g < 8, under key (k0, k1), stored as
// out[4g+r] = word r of counter g (see kernel.Philox8). Each word of the
// state is two vectors (counters 0-3, 4-7); mulhilo(M, x) is UMULL and
// UMULL2 (64-bit products of lanes 0-1 and 2-3) then UZP1/UZP2 (their low
// and high words). The ten rounds are unrolled and the state's registers
// renamed instead of moved; at the end each group of four counters is
// transposed (TRN1/TRN2) into out.
func genPhilox8(f *file) {
	f.text("philox8NEON", "func(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32)",
		"philox8NEON computes Philox-4x32-10 for the counters (c0+g, c1, c2, c3), g < 8,",
		"under key (k0, k1): out[4g+r] is word r of counter g.")
	f.ld("R0", "out", "")
	free := []V{}
	for v := V(14); v < 32; v++ {
		free = append(free, v)
	}
	get := func() V {
		v := free[0]
		free = free[1:]
		return v
	}
	put := func(vs ...V) { free = append(free, vs...) }
	const k0, k1, m0, m1, w0, w1 = 8, 9, 10, 11, 12, 13
	dupArg := func(v V, name string) {
		f.i("MOVWU %s, R1", f.arg(name, ""))
		f.w(dupW(v, 1))
	}
	dupConst := func(v V, c uint32) {
		f.i("MOVW $0x%08x, R1", c)
		f.w(dupW(v, 1))
	}
	var x [4][2]V
	for r, name := range []string{"c0", "c1", "c2", "c3"} {
		x[r] = [2]V{V(2 * r), V(2*r + 1)}
		dupArg(x[r][0], name)
		f.w(vmov(x[r][1], x[r][0]))
	}
	f.constBase("R2")
	t := get()
	f.constQ(t, "R2", "int0123")
	f.w(vadd(s4, x[0][0], x[0][0], t))
	f.constQ(t, "R2", "int4567")
	f.w(vadd(s4, x[0][1], x[0][1], t))
	put(t)
	dupArg(k0, "k0")
	dupArg(k1, "k1")
	dupConst(m0, 0xD2511F53)
	dupConst(m1, 0xCD9E8D57)
	dupConst(w0, 0x9E3779B9)
	dupConst(w1, 0xBB67AE85)
	// mulhilo returns the high and low words of m·v, lane by lane.
	mulhilo := func(m, v V) (hi, lo V) {
		p, q := get(), get()
		f.w(umull(p, v, m))
		f.w(umull2(q, v, m))
		hi, lo = get(), get()
		f.w(uzp2(s4, hi, p, q))
		f.w(uzp1(s4, lo, p, q))
		put(p, q)
		return hi, lo
	}
	for r := 0; r < 10; r++ {
		f.comment("Round %d.", r)
		if r > 0 {
			f.w(vadd(s4, k0, k0, w0))
			f.w(vadd(s4, k1, k1, w1))
		}
		for h := 0; h < 2; h++ {
			hi0, lo0 := mulhilo(m0, x[0][h])
			hi1, lo1 := mulhilo(m1, x[2][h])
			// (c0, c1, c2, c3) = (hi1^c1^k0, lo1, hi0^c3^k1, lo0)
			f.w(veor(hi1, hi1, x[1][h]))
			f.w(veor(hi1, hi1, k0))
			f.w(veor(hi0, hi0, x[3][h]))
			f.w(veor(hi0, hi0, k1))
			put(x[0][h], x[1][h], x[2][h], x[3][h])
			x[0][h], x[1][h], x[2][h], x[3][h] = hi1, lo1, hi0, lo0
		}
	}
	for h := 0; h < 2; h++ {
		rows := [4]V{x[0][h], x[1][h], x[2][h], x[3][h]}
		o := [4]V{get(), get(), get(), get()}
		tt := [4]V{get(), get(), get(), get()}
		f.transpose4x4S(rows, o, tt)
		for q := 0; q < 4; q++ {
			f.i("FMOVQ F%d, %d(R0)", o[q], 16*(4*h+q))
		}
		put(o[:]...)
		put(tt[:]...)
	}
	f.ret()
}
