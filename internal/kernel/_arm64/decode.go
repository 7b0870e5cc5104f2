package main

import "fmt"

// The decode kernels: attention products that read a KV cache in place, in
// its storage type, for a few query rows (see kernel.Decode).
//
//	scores<T>M<mr>NEON  S[r][j] = Σ_p Q[r][p]·K[j][p]     r < mr, j < n
//	accum<T>M<mr>NEON   O[r][c] += Σ_j P[r][j]·V[j][c]    r < mr, c < d
//	readSumNEON         the wrapping sum of the uint32 words of a buffer
//
// T is F32, BF16 and F16 (widened in registers by SHLL #16 and FCVTL), E4M3
// and E5M2 (OCP fp8 bytes, widened through fp16: see widenFP8), Q8
// (q8_0 blocks: an fp16 scale then 32 int8, widened by SSHLL twice and
// SCVTF and multiplied by the scale, exactly) or Q4 (q4_0 blocks: an fp16
// scale then 16 bytes of two 4-bit codes, value j in the low nibble of
// byte j and value j+16 in the high one: the nibbles taken apart by AND
// 0x0f or USHR #4, 8 subtracted from all 16 bytes at once by SUB, then
// widened as q8_0's int8: (code − 8)·scale, exactly). mr is 1, 2, 4 or 8; the Go
// wrappers (decode_asm.go) split other row counts into these tiles and
// check every precondition. No kernel reads outside the rows it is given:
// the head dimension's tail (d mod 8) is read four elements, then one
// element at a time.
//
// scores: keys in groups of w (4; 2 for mr = 8) read side by side, eight
// elements per step (one LDP Q of float32, one LDR Q of 16-bit values, one
// LDR D of int8 per key), Q's rows loaded per step (LDP Q, post-indexed)
// and multiplied into mr·w accumulators (two per pair for mr <= 2, so
// that every tile has 16 independent chains except mr = 1, which has 8),
// folded by FADDP trees at the end of the group into [S[r][j0..j0+w)].
// Per step of a 4-row tile: 4 key loads (+8 widening instructions for
// 16-bit caches, +28 for q8_0, +36 for q4_0), 4 Q loads, 32 FMLA.
//
// accum: keys in blocks of 32; for each block, O's columns in chunks of cw
// vectors (8 for mr <= 2, 4 for mr = 4, 2 for mr = 8; then halves, then
// single columns), each chunk's mr×cw tile of O held in 16 (mr = 1: 8)
// accumulators across the block's keys, so the block of V rows is read
// from memory once and from L1 for the other chunks. P is read four keys
// at a time (one LDR Q per row) and used by element. Per key of a 4-row
// tile: one load of 16 cache values (+ widening), 16 FMLA by element.
//
// Ceilings (Neoverse V2 / Apple M, estimated): one query row is bound by
// memory bandwidth for float32 and 16-bit caches (the loop issues one
// FMLA per 4 cached values, far above DRAM speed); from 4 rows on the
// float32 kernels are FMA-bound at ≈ 0.8 of the peak (16 chains, one load
// per two FMLA), the 16-bit ones ≈ 0.7 (one widening instruction per FMLA
// pair), q8_0 ≈ 0.4 (int8 to float32 costs 3.5 instructions per vector),
// q4_0 a little less in the scores kernels (4.5 per vector: two more per 8
// values) and as much in the accum ones with 8 columns a chunk (the
// nibbles of 32 values apart by 4 instructions); it reads 4.5 bits per
// value against 8.5, which helps one row, the memory-bound case.
//
// This file holds what both families share (element types, widening
// loads) and readSumNEON; the kernels are in decode_scores.go and
// decode_accum.go.

type delem struct {
	name   string
	goType string
	size   int // bytes per element; 0 for the block formats
	bf16   bool
	bits   int // bits per code of a block format (q8_0: 8, q4_0: 4); 0 otherwise
	e5m2   bool
}

var delems = []delem{
	{"F32", "float32", 4, false, 0, false},
	{"BF16", "uint16", 2, true, 0, false},
	{"F16", "uint16", 2, false, 0, false},
	{"Q8", "byte", 0, false, 8, false},
	{"Q4", "byte", 0, false, 4, false},
	{"E4M3", "byte", 1, false, 0, false},
	{"E5M2", "byte", 1, false, 0, true},
}

// fp8Regs are the registers widenFP8 uses besides its destinations: a
// scratch register t and the constants of e4m3fn (fp8Consts).
type fp8Regs struct{ t, nan, k256 V }

// fp8Consts sets the constants of e4m3fn's widening: 0x7f00 in every
// 16-bit lane of nan, 256.0 (128 + 128) in every lane of k256.
func (f *file) fp8Consts(r fp8Regs) {
	f.w(movi(h8, r.nan, 0x7f, 8))
	f.w(movi(s4, r.k256, 0x43, 24))
	f.w(fadd(r.k256, r.k256, r.k256))
}

// widenFP8 widens the fp8 bytes in the low cnt (4 or 8) bytes of dst[0]
// into float32 lanes of dst[0] (and, for 8, dst[1]), through fp16:
//
//	e5m2:   the byte is the top byte of an fp16 of the same value: SHLL #8.
//	e4m3fn: S.EEEE.MMM becomes the fp16 S.0EEEE.MMM0000000, the value over
//	        2⁸ (subnormals too): SSHLL #7 (the sign in bits 15 and 14),
//	        BIC bit 14; the NaN codes S.1111.111 (which would read ±480),
//	        whose lanes shifted left by one are 0x7f00, set to all ones (an
//	        fp16 NaN) by SHL, CMEQ and ORR; after FCVTL, FMUL by 256.
func (f *file) widenFP8(e delem, dst []V, cnt int) {
	r, d := f.fp8, dst[0]
	if e.e5m2 {
		f.w(shllB(d, d))
	} else {
		f.w(sshll(b8, d, d, 7))
		f.w(bicH(d, 0x40, 8))
		f.w(shl(h8, r.t, d, 1))
		f.w(cmeq(h8, r.t, r.t, r.nan))
		f.w(vorr(d, d, r.t))
	}
	if cnt == 8 {
		f.w(fcvtl2(dst[1], d))
	}
	f.w(fcvtl(d, d))
	if !e.e5m2 {
		if cnt == 8 {
			f.w(fmulE(dst[1], dst[1], r.k256, 0))
		}
		f.w(fmulE(d, d, r.k256, 0))
	}
}

// quant reports a block format (q8_0 or q4_0): rows of blocks of 32
// values, each an fp16 scale and the codes.
func (e delem) quant() bool { return e.bits != 0 }

// blockBytes is the size of a block of a block format: 34 (q8_0) or 18
// (q4_0).
func (e delem) blockBytes() int { return 2 + qValues*e.bits/8 }

// qValues is the number of values in a block of either block format.
const qValues = 32

// widen16 widens the 16-bit values in the low (upper: high) four lanes of
// n into d as float32.
func (f *file) widen16(e delem, d, n V, upper bool) {
	switch {
	case e.bf16 && upper:
		f.w(shll2(d, n))
	case e.bf16:
		f.w(shll(d, n))
	case upper:
		f.w(fcvtl2(d, n))
	default:
		f.w(fcvtl(d, n))
	}
}

// loadElems loads cnt (1, 4 or 8) consecutive elements of a float32,
// 16-bit or fp8 row at addr (a Go memory operand; post is the post-increment in
// bytes or 0) as float32 into dst[0] (and dst[1] for 8). One element
// leaves lanes 1-3 zero. tmp is a scratch general register.
func (f *file) loadElems(e delem, dst []V, base string, off, post int, cnt int, tmp string) {
	mem := fmt.Sprintf("%d(%s)", off, base)
	suffix := ""
	if post != 0 {
		suffix = ".P"
		mem = fmt.Sprintf("%d(%s)", post, base)
	}
	switch {
	case e.size == 4 && cnt == 8:
		f.i("FLDPQ%s %s, (F%d, F%d)", suffix, mem, dst[0], dst[1])
	case e.size == 4 && cnt == 4:
		f.i("FMOVQ%s %s, F%d", suffix, mem, dst[0])
	case e.size == 4:
		f.i("FMOVS%s %s, F%d", suffix, mem, dst[0])
	case e.size == 1 && cnt == 8:
		f.i("FMOVD%s %s, F%d", suffix, mem, dst[0])
		f.widenFP8(e, dst, 8)
	case e.size == 1 && cnt == 4:
		f.i("FMOVS%s %s, F%d", suffix, mem, dst[0])
		f.widenFP8(e, dst, 4)
	case e.size == 1:
		f.i("MOVBU%s %s, %s", suffix, mem, tmp)
		f.i("FMOVS %s, F%d", tmp, dst[0])
		f.widenFP8(e, dst, 4)
	case cnt == 8:
		f.i("FMOVQ%s %s, F%d", suffix, mem, dst[0])
		f.widen16(e, dst[1], dst[0], true)
		f.widen16(e, dst[0], dst[0], false)
	case cnt == 4:
		f.i("FMOVD%s %s, F%d", suffix, mem, dst[0])
		f.widen16(e, dst[0], dst[0], false)
	default:
		f.i("MOVHU%s %s, %s", suffix, mem, tmp)
		f.i("FMOVS %s, F%d", tmp, dst[0])
		f.widen16(e, dst[0], dst[0], false)
	}
}

// widenQ8 widens the int8 values in the low 4·cnt bytes of dst[0] (cnt
// 1 or 2: 4 or 8 bytes) or, for cnt 4, of dst[2] (16 bytes) into cnt
// float32 vectors dst[0..cnt) multiplied by lane 0 of sc.
func (f *file) widenQ8(dst []V, cnt int, sc V) {
	switch cnt {
	case 1:
		f.w(sshll(b8, dst[0], dst[0], 0))
		f.w(sshll(h4, dst[0], dst[0], 0))
	case 2:
		f.w(sshll(b8, dst[0], dst[0], 0))
		f.w(sshll2(h8, dst[1], dst[0], 0))
		f.w(sshll(h4, dst[0], dst[0], 0))
	case 4:
		f.w(sshll(b8, dst[0], dst[2], 0))
		f.w(sshll2(b16, dst[2], dst[2], 0))
		f.w(sshll2(h8, dst[1], dst[0], 0))
		f.w(sshll(h4, dst[0], dst[0], 0))
		f.w(sshll2(h8, dst[3], dst[2], 0))
		f.w(sshll(h4, dst[2], dst[2], 0))
	default:
		panic("widenQ8")
	}
	for _, v := range dst[:cnt] {
		f.w(scvtf(v, v))
	}
	for _, v := range dst[:cnt] {
		f.w(fmulE(v, v, sc, 0))
	}
}

// q4Codes turns the 16 bytes of n into the signed codes − 8 (−8..7) of
// one nibble each, into d: the low nibbles (high: the high ones). mask
// holds 0x0f and eight 8 in every byte. widenQ8 then takes them as int8.
func (f *file) q4Codes(d, n V, high bool, mask, eight V) {
	if high {
		f.w(ushr(b16, d, n, 4))
	} else {
		f.w(vand(d, n, mask))
	}
	f.w(vsub(b16, d, d, eight))
}

// q4Consts sets the registers of q4Codes' constants.
func (f *file) q4Consts(mask, eight V) {
	f.w(moviB(mask, 0x0f))
	f.w(moviB(eight, 8))
}

// loadQ8Scale loads the fp16 scale at addr into lane 0 of sc as float32
// (the scale of a q8_0 or q4_0 block).
func (f *file) loadQ8Scale(sc V, mem, tmp string) {
	f.i("MOVHU %s, %s", mem, tmp)
	f.i("FMOVS %s, F%d", tmp, sc)
	f.w(fcvtl(sc, sc))
}

// cacheDoc is the second doc line of a scores or accum kernel.
func cacheDoc(e delem, ld, row string) string {
	if e.quant() {
		return fmt.Sprintf("%s is the %s row stride in bytes (rows of d/32 blocks of %d bytes); d is a positive multiple of 32, n >= 1; all accesses are in bounds.", ld, row, e.blockBytes())
	}
	return ld + " is the " + row + " row stride in elements; d, n >= 1; all accesses are in bounds."
}

// genReadSum emits readSumNEON: the wrapping sum of the uint32 words of b
// (len a positive multiple of 256): 128 bytes per step (two LD1 of four
// registers) into eight accumulators.
func genReadSum(f *file) {
	f.text("readSumNEON", "func(b []byte) uint32",
		"readSumNEON returns the wrapping sum of the little-endian uint32 words of b;",
		"len(b) is a positive multiple of 256.")
	f.ld("R0", "b", "base")
	f.ld("R1", "b", "len")
	for v := V(16); v < 24; v++ {
		f.w(movi0(v))
	}
	f.label("loop")
	f.i("VLD1.P 64(R0), [V0.S4, V1.S4, V2.S4, V3.S4]")
	f.i("VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]")
	for v := V(0); v < 8; v++ {
		f.w(vadd(s4, 16+v, 16+v, v))
	}
	f.i("SUBS $128, R1, R1")
	f.i("BNE loop")
	for v := V(0); v < 4; v++ {
		f.w(vadd(s4, 16+v, 16+v, 20+v))
	}
	f.w(vadd(s4, 16, 16, 17))
	f.w(vadd(s4, 18, 18, 19))
	f.w(vadd(s4, 16, 16, 18))
	f.w(addv(16, 16))
	f.i("FMOVS F16, R2")
	f.i("MOVW R2, %s", f.arg("ret", ""))
	f.ret()
}

func genDecode(f *file) {
	for _, e := range delems {
		for mr := 1; mr <= 8; mr *= 2 {
			genScores(f, e, mr)
		}
		for mr := 1; mr <= 8; mr *= 2 {
			genAccum(f, e, mr)
		}
	}
	genReadSum(f)
}
