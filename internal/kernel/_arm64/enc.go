package main

import "fmt"

// The A64 encoder of the vector instructions the kernels use. Each
// function returns the instruction's GNU assembler text and its 32-bit
// encoding (Arm Architecture Reference Manual, section C7, "A64 Advanced
// SIMD and floating-point instruction descriptions"); enc_test.go checks
// every text the generator emits against GNU as.

// inst is one encoded instruction.
type inst struct {
	text string
	word uint32
}

// V is a vector register number, 0-31.
type V int

func (v V) chk() uint32 {
	if v < 0 || v > 31 {
		panic(fmt.Sprintf("vector register %d", v))
	}
	return uint32(v)
}

// arr is a vector arrangement: its GNU suffix, the Q bit and the size field.
type arr struct {
	name string
	q    uint32
	size uint32
}

var (
	s4  = arr{"4s", 1, 2}
	s2  = arr{"2s", 0, 2}
	h8  = arr{"8h", 1, 1}
	h4  = arr{"4h", 0, 1}
	b16 = arr{"16b", 1, 0}
	b8  = arr{"8b", 0, 0}
	d2  = arr{"2d", 1, 3}
)

// rrr encodes the three-register form base | Rm<<16 | Rn<<5 | Rd.
func rrr(base uint32, d, n, m V) uint32 {
	return base | m.chk()<<16 | n.chk()<<5 | d.chk()
}

func txt3(op string, a arr, d, n, m V) string {
	return fmt.Sprintf("%s v%d.%s, v%d.%s, v%d.%s", op, d, a.name, n, a.name, m, a.name)
}

// Floating-point three-same, four single-precision lanes.
func fp3(op string, base uint32) func(d, n, m V) inst {
	return func(d, n, m V) inst { return inst{txt3(op, s4, d, n, m), rrr(base, d, n, m)} }
}

var (
	fadd    = fp3("fadd", 0x4e20d400)
	fsub    = fp3("fsub", 0x4ea0d400)
	fmul    = fp3("fmul", 0x6e20dc00)
	fdiv    = fp3("fdiv", 0x6e20fc00)
	fmax    = fp3("fmax", 0x4e20f400)
	fmin    = fp3("fmin", 0x4ea0f400)
	fmaxnm  = fp3("fmaxnm", 0x4e20c400)
	fmla    = fp3("fmla", 0x4e20cc00) // d += n·m
	fmls    = fp3("fmls", 0x4ea0cc00) // d -= n·m
	fcmeq   = fp3("fcmeq", 0x4e20e400)
	fcmgt   = fp3("fcmgt", 0x6ea0e400)
	fcmge   = fp3("fcmge", 0x6e20e400)
	fabd    = fp3("fabd", 0x6ea0d400)
	faddp   = fp3("faddp", 0x6e20d400)
	fmaxnmp = fp3("fmaxnmp", 0x6e20c400)
)

// Integer three-same with an arrangement.
func int3(op string, base uint32) func(a arr, d, n, m V) inst {
	return func(a arr, d, n, m V) inst {
		return inst{txt3(op, a, d, n, m), rrr(base|a.q<<30|a.size<<22, d, n, m)}
	}
}

var (
	vadd = int3("add", 0x0e208400)
	vsub = int3("sub", 0x2e208400)
	cmeq = int3("cmeq", 0x2e208c00) // d = n == m ? all ones : 0, per lane
	zip1 = int3("zip1", 0x0e003800)
	zip2 = int3("zip2", 0x0e007800)
	uzp1 = int3("uzp1", 0x0e001800)
	uzp2 = int3("uzp2", 0x0e005800)
	trn1 = int3("trn1", 0x0e002800)
	trn2 = int3("trn2", 0x0e006800)
)

// Bitwise, on all 128 bits.
func bit3(op string, base uint32) func(d, n, m V) inst {
	return func(d, n, m V) inst { return inst{txt3(op, b16, d, n, m), rrr(base, d, n, m)} }
}

var (
	vand = bit3("and", 0x4e201c00)
	vbic = bit3("bic", 0x4e601c00) // d = n &^ m
	vorr = bit3("orr", 0x4ea01c00)
	veor = bit3("eor", 0x6e201c00)
	vbsl = bit3("bsl", 0x6e601c00) // d = d ? n : m, bit by bit
	vbit = bit3("bit", 0x6ea01c00) // d = m ? n : d
	vbif = bit3("bif", 0x6ee01c00) // d = m ? d : n
)

// vmov copies a whole register (orr d, n, n; GNU prints it as mov).
func vmov(d, n V) inst {
	return inst{fmt.Sprintf("mov v%d.16b, v%d.16b", d, n), rrr(0x4ea01c00, d, n, n)}
}

// ext: d = bytes imm.. of the concatenation n:m (n low).
func ext(d, n, m V, imm int) inst {
	return inst{fmt.Sprintf("ext v%d.16b, v%d.16b, v%d.16b, #%d", d, n, m, imm),
		rrr(0x6e000000|uint32(imm)<<11, d, n, m)}
}

// elemIdx splits a by-element index into the H, L, M bits for 32-bit
// elements (H:L; M is the top bit of Rm, which may be any of v0-v31).
func elemS(base uint32, d, n, m V, i int) uint32 {
	if i < 0 || i > 3 {
		panic("lane")
	}
	return base | uint32(i&1)<<21 | m.chk()<<16 | uint32(i>>1)<<11 | n.chk()<<5 | d.chk()
}

// byElem is a by-element instruction of fixed arrangements: text is its
// GNU form with the verbs of d, n, m and the lane i, enc its index field
// encoder (elemS or elemH).
func byElem(text string, base uint32, enc func(base uint32, d, n, m V, i int) uint32) func(d, n, m V, i int) inst {
	return func(d, n, m V, i int) inst { return inst{fmt.Sprintf(text, d, n, m, i), enc(base, d, n, m, i)} }
}

// fixed2 and fixed3 are two- and three-register instructions of fixed
// arrangements (rrr encodings): text is the GNU form with the verbs of d,
// n (and m).
func fixed2(text string, base uint32) func(d, n V) inst {
	return func(d, n V) inst { return inst{fmt.Sprintf(text, d, n), rrr(base, d, n, 0)} }
}

func fixed3(text string, base uint32) func(d, n, m V) inst {
	return func(d, n, m V) inst { return inst{fmt.Sprintf(text, d, n, m), rrr(base, d, n, m)} }
}

var (
	fmlaE = byElem("fmla v%d.4s, v%d.4s, v%d.s[%d]", 0x4f801000, elemS) // d += n·m[i] (single precision, by element)
	fmlsE = byElem("fmls v%d.4s, v%d.4s, v%d.s[%d]", 0x4f805000, elemS) // d -= n·m[i]
	fmulE = byElem("fmul v%d.4s, v%d.4s, v%d.s[%d]", 0x4f809000, elemS) // d = n·m[i]
	// bfdotE: d[l] += n.h[2l]·m.h[2i] + n.h[2l+1]·m.h[2i+1] (FEAT_BF16).
	bfdotE = byElem("bfdot v%d.4s, v%d.8h, v%d.2h[%d]", 0x4f40f000, elemS)
	// bfdot: the vector form (pairs of m lane by lane).
	bfdot = fixed3("bfdot v%d.4s, v%d.8h, v%d.8h", 0x6e40fc00)
)

// bfmmla: d (2×2, row-major) += n (2×4 bfloat16, row-major) · m (2×4,
// one row per column of the product)ᵀ (FEAT_BF16).
func bfmmla(d, n, m V) inst {
	return inst{fmt.Sprintf("bfmmla v%d.4s, v%d.8h, v%d.8h", d, n, m), rrr(0x6e40ec00, d, n, m)}
}

// elemH encodes a by-element index of 16-bit elements (H:L:M; m is v0-v15).
func elemH(base uint32, d, n, m V, i int) uint32 {
	if i < 0 || i > 7 || m > 15 {
		panic("fp16 lane or register")
	}
	return base | uint32(i&2>>1)<<21 | uint32(i&1)<<20 | m.chk()<<16 | uint32(i>>2)<<11 | n.chk()<<5 | d.chk()
}

var (
	// fmlalE: d[l] += widen(n.h[l])·widen(m.h[i]), l < 4 (FEAT_FHM);
	// fmlal2E uses n.h[4+l].
	fmlalE  = byElem("fmlal v%d.4s, v%d.4h, v%d.h[%d]", 0x4f800000, elemH)
	fmlal2E = byElem("fmlal2 v%d.4s, v%d.4h, v%d.h[%d]", 0x6f808000, elemH)
	// fmlal: the vector form (lanes 0-3 of n and m).
	fmlal = fixed3("fmlal v%d.4s, v%d.4h, v%d.4h", 0x4e20ec00)
)

// Two-register miscellaneous, four single-precision lanes.
func fp2(op string, base uint32) func(d, n V) inst {
	return func(d, n V) inst {
		return inst{fmt.Sprintf("%s v%d.4s, v%d.4s", op, d, n), rrr(base, d, n, 0)}
	}
}

var (
	frintn = fp2("frintn", 0x4e218800) // round to nearest, ties to even
	fcvtzs = fp2("fcvtzs", 0x4ea1b800)
	scvtf  = fp2("scvtf", 0x4e21d800)
	fabs   = fp2("fabs", 0x4ea0f800)
	fneg   = fp2("fneg", 0x6ea0f800)
)

var (
	// fcvtl widens the four fp16 lanes 0-3 of n; fcvtl2 lanes 4-7.
	fcvtl  = fixed2("fcvtl v%d.4s, v%d.4h", 0x0e217800)
	fcvtl2 = fixed2("fcvtl2 v%d.4s, v%d.8h", 0x4e217800)
	// fcvtn rounds n to fp16 into lanes 0-3 of d (zeroing the rest);
	// fcvtn2 into lanes 4-7, keeping 0-3.
	fcvtn  = fixed2("fcvtn v%d.4h, v%d.4s", 0x0e216800)
	fcvtn2 = fixed2("fcvtn2 v%d.8h, v%d.4s", 0x4e216800)
)

// Shifts by an immediate. immhb is the 7-bit immh:immb field.
func shiftImm(base uint32, d, n V, immhb int) uint32 {
	return base | uint32(immhb)<<16 | n.chk()<<5 | d.chk()
}

// esize is the element size in bits of an arrangement.
func esize(a arr) int { return 8 << a.size }

// shl: d = n << s.
func shl(a arr, d, n V, s int) inst {
	return inst{fmt.Sprintf("shl v%d.%s, v%d.%s, #%d", d, a.name, n, a.name, s),
		shiftImm(0x0f005400|a.q<<30, d, n, esize(a)+s)}
}

// Right shifts by an immediate s, 1 … esize(a).
func shiftRight(op string, base uint32) func(a arr, d, n V, s int) inst {
	return func(a arr, d, n V, s int) inst {
		return inst{fmt.Sprintf("%s v%d.%s, v%d.%s, #%d", op, d, a.name, n, a.name, s),
			shiftImm(base|a.q<<30, d, n, 2*esize(a)-s)}
	}
}

var (
	ushr = shiftRight("ushr", 0x2f000400) // d = n >> s (logical)
	sshr = shiftRight("sshr", 0x0f000400) // d = n >> s (arithmetic)
	usra = shiftRight("usra", 0x2f001400) // d += n >> s (logical)
)

// Widening shifts: from the narrow arrangement src (lower half; upper
// with the 2 forms) to elements twice as wide.
func widenShift(op string, base uint32, upper bool) func(src arr, d, n V, s int) inst {
	return func(src arr, d, n V, s int) inst {
		dst := map[string]string{"8b": "8h", "16b": "8h", "4h": "4s", "8h": "4s", "2s": "2d", "4s": "2d"}[src.name]
		if upper != (src.q == 1) || s < 0 || s >= esize(src) {
			panic("widening shift: wrong half or shift")
		}
		return inst{fmt.Sprintf("%s v%d.%s, v%d.%s, #%d", op, d, dst, n, src.name, s),
			shiftImm(base|src.q<<30, d, n, esize(src)+s)}
	}
}

var (
	ushll  = widenShift("ushll", 0x2f00a400, false)
	ushll2 = widenShift("ushll2", 0x2f00a400, true)
	sshll  = widenShift("sshll", 0x0f00a400, false)
	sshll2 = widenShift("sshll2", 0x0f00a400, true)
)

var (
	// shll widens the 16-bit lanes 0-3 of n to 32 bits shifted left by 16
	// (bfloat16 to float32); shll2 lanes 4-7.
	shll  = fixed2("shll v%d.4s, v%d.4h, #16", 0x2e613800)
	shll2 = fixed2("shll2 v%d.4s, v%d.8h, #16", 0x6e613800)
	// shllB widens the bytes 0-7 of n to 16 bits shifted left by 8 (fp8
	// e5m2 to fp16).
	shllB = fixed2("shll v%d.8h, v%d.8b, #8", 0x2e213800)
)

// bicH clears, in every 16-bit lane of d, the bits of imm8 << lsl (lsl 0
// or 8): bic vd.8h, #imm8, lsl #lsl.
func bicH(d V, imm8, lsl int) inst {
	abc, defgh := uint32(imm8)>>5&7, uint32(imm8)&31
	t := fmt.Sprintf("bic v%d.8h, #0x%x", d, imm8)
	if lsl > 0 {
		t += fmt.Sprintf(", lsl #%d", lsl)
	}
	return inst{t, 0x6f009400 | abc<<16 | uint32(lsl/8)<<13 | defgh<<5 | d.chk()}
}

// shrn narrows: d.4h = n.4s >> s (shrn2: into the upper half of d.8h).
func shrn(d, n V, s int) inst {
	return inst{fmt.Sprintf("shrn v%d.4h, v%d.4s, #%d", d, n, s), shiftImm(0x0f008400, d, n, 32-s)}
}

// movi0 zeroes a register (movi vd.2d, #0).
func movi0(d V) inst {
	return inst{fmt.Sprintf("movi v%d.2d, #0", d), 0x6f00e400 | d.chk()}
}

// movi sets every lane of arrangement a (4s or 8h) to imm8 << lsl.
func movi(a arr, d V, imm8, lsl int) inst {
	var cmode uint32
	switch {
	case a == s4 && lsl%8 == 0 && lsl <= 24:
		cmode = uint32(lsl/8) << 1
	case a == h8 && (lsl == 0 || lsl == 8):
		cmode = 0x8 | uint32(lsl/8)<<1
	default:
		panic("movi form")
	}
	t := fmt.Sprintf("movi v%d.%s, #0x%x", d, a.name, imm8)
	if lsl > 0 {
		t += fmt.Sprintf(", lsl #%d", lsl)
	}
	abc, defgh := uint32(imm8)>>5&7, uint32(imm8)&31
	return inst{t, 0x0f000400 | a.q<<30 | abc<<16 | cmode<<12 | defgh<<5 | d.chk()}
}

// moviB sets every byte of d to imm8 (movi vd.16b, #imm8).
func moviB(d V, imm8 int) inst {
	abc, defgh := uint32(imm8)>>5&7, uint32(imm8)&31
	return inst{fmt.Sprintf("movi v%d.16b, #0x%x", d, imm8), 0x4f00e400 | abc<<16 | defgh<<5 | d.chk()}
}

// dupE: every lane of d = n.s[i].
func dupE(d, n V, i int) inst {
	return inst{fmt.Sprintf("dup v%d.4s, v%d.s[%d]", d, n, i), 0x4e000400 | uint32(i<<3|4)<<16 | n.chk()<<5 | d.chk()}
}

// dupW: every 32-bit lane of d = w register r.
func dupW(d V, r int) inst {
	return inst{fmt.Sprintf("dup v%d.4s, w%d", d, r), 0x4e040c00 | uint32(r)<<5 | d.chk()}
}

var (
	// Reductions across the four lanes of n into lane 0 (scalar s
	// register) of d.
	fmaxnmv = fixed2("fmaxnmv s%d, v%d.4s", 0x6e30c800)
	addv    = fixed2("addv s%d, v%d.4s", 0x4eb1b800)
	// faddpS adds the two lanes 0 and 1 of n into scalar d.
	faddpS = fixed2("faddp s%d, v%d.2s", 0x7e30d800)
)

// Scalar single precision.
func fmaddS(d, n, m, a V) inst {
	return inst{fmt.Sprintf("fmadd s%d, s%d, s%d, s%d", d, n, m, a), 0x1f000000 | m.chk()<<16 | a.chk()<<10 | n.chk()<<5 | d.chk()}
}

var (
	faddS   = fixed3("fadd s%d, s%d, s%d", 0x1e202800)
	fmaxnmS = fixed3("fmaxnm s%d, s%d, s%d", 0x1e206800)
	// umull: d.2d = n.2s × m.2s (lanes 0, 1, unsigned 64-bit products);
	// umull2 the same of lanes 2, 3.
	umull  = fixed3("umull v%d.2d, v%d.2s, v%d.2s", 0x2ea0c000)
	umull2 = fixed3("umull2 v%d.2d, v%d.4s, v%d.4s", 0x6ea0c000)
)
