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
	p := &philox{f: f}
	for v := V(14); v < 32; v++ {
		p.free = append(p.free, v)
	}
	p.counters()
	p.constants()
	for r := 0; r < 10; r++ {
		p.round(r)
	}
	p.store()
	f.ret()
}

// The loop-invariant registers of philox8NEON: the key (bumped each
// round), the multipliers and the key's increments (Weyl constants).
const phK0, phK1, phM0, phM1, phW0, phW1 V = 8, 9, 10, 11, 12, 13

// philox is philox8NEON being generated: the state x (word r of counters
// 0-3 in x[r][0], of counters 4-7 in x[r][1]) and the free registers,
// handed out first come first served.
type philox struct {
	f    *file
	x    [4][2]V
	free []V
}

// get takes a free register.
func (p *philox) get() V {
	v := p.free[0]
	p.free = p.free[1:]
	return v
}

// put frees registers.
func (p *philox) put(vs ...V) { p.free = append(p.free, vs...) }

// dupArg sets every lane of v to the uint32 argument name.
func (p *philox) dupArg(v V, name string) {
	p.f.i("MOVWU %s, R1", p.f.arg(name, ""))
	p.f.w(dupW(v, 1))
}

// dupConst sets every lane of v to c.
func (p *philox) dupConst(v V, c uint32) {
	p.f.i("MOVW $0x%08x, R1", c)
	p.f.w(dupW(v, 1))
}

// counters sets the state to the eight counters: (c0+g, c1, c2, c3).
func (p *philox) counters() {
	f := p.f
	for r, name := range []string{"c0", "c1", "c2", "c3"} {
		p.x[r] = [2]V{V(2 * r), V(2*r + 1)}
		p.dupArg(p.x[r][0], name)
		f.w(vmov(p.x[r][1], p.x[r][0]))
	}
	f.constBase("R2")
	t := p.get()
	f.constQ(t, "R2", "int0123")
	f.w(vadd(s4, p.x[0][0], p.x[0][0], t))
	f.constQ(t, "R2", "int4567")
	f.w(vadd(s4, p.x[0][1], p.x[0][1], t))
	p.put(t)
}

// constants loads the key, the multipliers and the Weyl increments.
func (p *philox) constants() {
	p.dupArg(phK0, "k0")
	p.dupArg(phK1, "k1")
	p.dupConst(phM0, 0xD2511F53)
	p.dupConst(phM1, 0xCD9E8D57)
	p.dupConst(phW0, 0x9E3779B9)
	p.dupConst(phW1, 0xBB67AE85)
}

// mulhilo returns the high and low words of m·v, lane by lane.
func (p *philox) mulhilo(m, v V) (hi, lo V) {
	a, b := p.get(), p.get()
	p.f.w(umull(a, v, m))
	p.f.w(umull2(b, v, m))
	hi, lo = p.get(), p.get()
	p.f.w(uzp2(s4, hi, a, b))
	p.f.w(uzp1(s4, lo, a, b))
	p.put(a, b)
	return hi, lo
}

// round emits round r: the key bumped (from round 1 on), then for each
// half of the counters the new state in new registers.
func (p *philox) round(r int) {
	f, x := p.f, &p.x
	f.comment("Round %d.", r)
	if r > 0 {
		f.w(vadd(s4, phK0, phK0, phW0))
		f.w(vadd(s4, phK1, phK1, phW1))
	}
	for h := 0; h < 2; h++ {
		hi0, lo0 := p.mulhilo(phM0, x[0][h])
		hi1, lo1 := p.mulhilo(phM1, x[2][h])
		// (c0, c1, c2, c3) = (hi1^c1^k0, lo1, hi0^c3^k1, lo0)
		f.w(veor(hi1, hi1, x[1][h]))
		f.w(veor(hi1, hi1, phK0))
		f.w(veor(hi0, hi0, x[3][h]))
		f.w(veor(hi0, hi0, phK1))
		p.put(x[0][h], x[1][h], x[2][h], x[3][h])
		x[0][h], x[1][h], x[2][h], x[3][h] = hi1, lo1, hi0, lo0
	}
}

// store transposes each group of four counters into counter order and
// stores it in out.
func (p *philox) store() {
	for h := 0; h < 2; h++ {
		rows := [4]V{p.x[0][h], p.x[1][h], p.x[2][h], p.x[3][h]}
		o := [4]V{p.get(), p.get(), p.get(), p.get()}
		tt := [4]V{p.get(), p.get(), p.get(), p.get()}
		p.f.transpose4x4S(rows, o, tt)
		for q := 0; q < 4; q++ {
			p.f.i("FMOVQ F%d, %d(R0)", o[q], 16*(4*h+q))
		}
		p.put(o[:]...)
		p.put(tt[:]...)
	}
}
