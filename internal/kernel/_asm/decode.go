package main

import (
	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The decode kernels (decode_amd64.s): attention products that read a KV
// cache in place, in its storage type, for a few query rows.
//
//	scores<T>M<mr><ISA>  S[r][j] = Σ_p Q[r][p]·K[j][p]     r < mr, j < n
//	accum<T>M<mr><ISA>   O[r][p] += Σ_j P[r][j]·V[j][p]    r < mr, p < d
//	readSum<ISA>         the wrapping sum of the uint32 words of a buffer
//
// T is the cache element type: F32 (float32), BF16 and F16 (uint16 words,
// widened in registers: bf16 by a zero-extension and a shift, fp16 by
// VCVTPH2PS) or Q8 (llama.cpp's q8_0: blocks of 32 values, an fp16 scale
// then 32 int8, widened by VPMOVSXBD and VCVTDQ2PS and multiplied by the
// scale, which is exact). Cache rows are read where they lie; Q, P and O
// are float32. The Go wrappers (decode_amd64.go) split any number of rows
// into these tiles and check every length precondition; the assembly
// trusts its arguments.
//
// Register tiles. With L float32 lanes per vector (16 for AVX-512, 8 for
// AVX2) a kernel for mr rows keeps mr·w = L accumulators, w = L/mr:
//
//	scores: w keys per block, read in groups of scoresGroup keys whose
//	rows are read side by side, each from start to end: per step of L
//	elements (one block for q8) each key vector is loaded and widened once
//	and multiplied into the mr rows of Q (loaded once per group). At the end of the
//	block its L accumulators are folded by a transposing tree (4 levels of
//	two shuffles and an add for 16 of them) into one vector whose lane
//	r·w+jj is S[r][j0+jj], stored row by row. Keys beyond a multiple of w
//	go one at a time (the same tree, fewer inputs).
//	accum: w vectors of O's columns. Keys are taken in blocks of
//	accumKeyBlock; for each block, O's columns are swept in chunks of w
//	vectors (then w/2, …, 1, then a masked tail), each chunk's mr×w tile of
//	O held in registers across all keys of the block, so the V block is
//	read from memory once and from L1 for the other chunks. The block of P
//	is first copied to the frame (see accumGen.pLoc).
//
// Tails of the head dimension d that are not a multiple of L: AVX-512 uses
// an opmask (masked loads do not fault on masked-out elements, so nothing
// past a row is touched); AVX2 has no 16-bit masked load, so it reads the
// window of the last 8 elements of the row, which lies inside it (d >= 8 is
// a precondition of every AVX2 kernel), and clears or skips the lanes that
// the full vectors already covered.

// decodeElem is a cache element type.
type decodeElem struct {
	Name   string // in the function names: F32, BF16, F16, Q8
	GoType string // element type of the cache slice
	Size   int    // bytes per element; 0 for q8_0
	BF16   bool   // bfloat16 (else fp16) when Size == 2
}

var decodeElems = []decodeElem{
	{Name: "F32", GoType: "float32", Size: 4},
	{Name: "BF16", GoType: "uint16", Size: 2, BF16: true},
	{Name: "F16", GoType: "uint16", Size: 2},
	{Name: "Q8", GoType: "byte"},
}

func (e decodeElem) q8() bool { return e.Size == 0 }

// The q8_0 block: an fp16 scale, then 32 int8 values.
const (
	q8Values = 32
	q8Bytes  = 34
)

// Software prefetching. The hardware prefetchers alone leave a core far
// below the memory bandwidth (the accum kernels sweep a block of rows
// column chunk by column chunk, which they do not follow at all), so the
// kernels prefetch into L2 (PREFETCHT1; into L1 it evicts the block in
// use): scores at the same offset of the row scoresPrefetchBytes/row
// bytes ahead (about 8 KiB of rows), accum the columns of the pass in the
// next block of accumKeyBlock rows. Measured on AMD Zen 4: up to twice the
// bandwidth of no prefetching or of PREFETCHT0.
const scoresPrefetchBytes = 8 << 10

// scoresPrefetchRows is the number of rows ahead the scores kernels
// prefetch for rows of the type e.
func scoresPrefetchRows(e decodeElem) int {
	rb := q8Bytes * 4 // q8_0 rows of d=128
	if !e.q8() {
		rb = 128 * e.Size
	}
	r := 1
	for 2*r*rb <= scoresPrefetchBytes {
		r *= 2
	}
	return r
}

// accumKeyBlock is the number of keys whose V rows one pass of an accum
// kernel keeps in L1 while it sweeps O's columns.
const accumKeyBlock = 32

// The masks of the head-dimension tails (see genDecode); package kernel's
// tests rebuild them and compare.
var decMask16, decMask8 Mem

func genDecode() {
	// decodemask16[t] = 2^t - 1: the opmask of the first t lanes.
	decMask16 = GLOBL("decodemask16", RODATA|NOPTR)
	for t := 0; t <= 16; t++ {
		DATA(2*t, U16(1<<t-1))
	}
	// Eight all-ones dwords, eight zeros, eight all-ones: loaded from
	// dword 8-t, the mask of the first t of 8 lanes; from dword 8+t, of the
	// last t.
	decMask8 = GLOBL("decodemask8", RODATA|NOPTR)
	for i := 0; i < 24; i++ {
		v := uint32(0xffffffff)
		if i >= 8 && i < 16 {
			v = 0
		}
		DATA(4*i, U32(v))
	}
	for _, s := range []isa{isaAVX512, isaAVX2} {
		for _, e := range decodeElems {
			for mr := 1; mr <= s.Lanes; mr *= 2 {
				genScores(s, e, mr)
			}
			for mr := 1; mr <= s.Lanes; mr *= 2 {
				genAccum(s, e, mr)
			}
		}
		genReadSum(s)
	}
}

// slot is the memory operand of a parameter (or part of one).
func slot(c gotypes.Component) Mem {
	b, err := c.Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// ldMem loads the quadword at m into a new register.
func ldMem(m Mem) GPVirtual {
	r := GP64()
	MOVQ(m, r)
	return r
}

// rowSet addresses rows 0..rows-1 of a matrix with row stride ld bytes:
// one base register per group of four rows and the strides ld and 3·ld in
// registers, so row 4g+t is [base_g], [base_g+ld], [base_g+2ld] or
// [base_g+ld3].
type rowSet struct {
	bases   []GPVirtual
	ld, ld3 GPVirtual
}

// newRowSet emits the loads of the bases from start; ld and ld3 are given
// (ld3 may be nil when rows <= 3).
func newRowSet(start Op, ld, ld3 GPVirtual, rows int) rowSet {
	rs := rowSet{ld: ld, ld3: ld3}
	for g := 0; g*4 < rows; g++ {
		b := GP64()
		if g == 0 {
			MOVQ(start, b)
		} else {
			LEAQ(Mem{Base: rs.bases[g-1], Index: ld, Scale: 4}, b)
		}
		rs.bases = append(rs.bases, b)
	}
	return rs
}

func (rs rowSet) mem(r, disp int) Mem {
	b := rs.bases[r/4]
	switch r % 4 {
	case 1:
		return Mem{Base: b, Index: rs.ld, Scale: 1, Disp: disp}
	case 2:
		return Mem{Base: b, Index: rs.ld, Scale: 2, Disp: disp}
	case 3:
		return Mem{Base: b, Index: rs.ld3, Scale: 1, Disp: disp}
	}
	return Mem{Base: b, Disp: disp}
}

func (rs rowSet) add(by Op) {
	for _, b := range rs.bases {
		ADDQ(by, b)
	}
}

func (rs rowSet) sub(by Op) {
	for _, b := range rs.bases {
		SUBQ(by, b)
	}
}

// strides loads the byte stride from m (given in elements of size bytes)
// and returns it with its triple (nil unless rows > 3).
func strides(m Mem, size, rows int) (ld, ld3 GPVirtual) {
	ld = GP64()
	MOVQ(m, ld)
	if size > 1 {
		SHLQ(Imm(uint64(log2(size))), ld)
	}
	if rows > 3 {
		ld3 = GP64()
		LEAQ(Mem{Base: ld, Index: ld, Scale: 2}, ld3)
	}
	return ld, ld3
}

// rowMems returns, for a store phase, a function giving the memory operand
// of row r (called with r = 0, 1, 2, … in order) of the matrix at base with
// stride ld, emitting the LEAQs it needs on the way.
func rowMems(base, ld Register) func(r int) Mem {
	gb := base
	return func(r int) Mem {
		if r > 0 && r%4 == 0 {
			nb := GP64()
			LEAQ(Mem{Base: gb, Index: ld, Scale: 4}, nb)
			gb = nb
		}
		switch r % 4 {
		case 1:
			return Mem{Base: gb, Index: ld, Scale: 1}
		case 2:
			return Mem{Base: gb, Index: ld, Scale: 2}
		case 3:
			t := GP64()
			LEAQ(Mem{Base: gb, Index: ld, Scale: 2}, t)
			return Mem{Base: t, Index: ld, Scale: 1}
		}
		return Mem{Base: gb}
	}
}

// half is the lower half of v as a register of half the width (ymm for a
// zmm, xmm for a ymm): the 16-bit source of a widening conversion into v.
func half(s isa, v VecVirtual) Register {
	if s.EVEX {
		return v.AsY()
	}
	return v.AsX()
}

// widen loads s.Lanes elements of type e (not q8) at m as float32 lanes
// of a new register; with k != nil the load is masked (AVX-512: lanes
// outside k are zero and their memory is not touched).
func widen(s isa, e decodeElem, m Mem, k Register) VecVirtual {
	v := s.Vec()
	switch {
	case e.Size == 4 && k != nil:
		VMOVUPS_Z(m, k, v)
	case e.Size == 4:
		VMOVUPS(m, v)
	case k != nil:
		VMOVDQU16_Z(m, k, half(s, v))
		if e.BF16 {
			VPMOVZXWD(half(s, v), v)
			VPSLLD(Imm(16), v, v)
		} else {
			VCVTPH2PS(half(s, v), v)
		}
	case e.BF16:
		VPMOVZXWD(m, v)
		VPSLLD(Imm(16), v, v)
	default:
		VCVTPH2PS(m, v)
	}
	return v
}

// q8Scale broadcasts the fp16 scale of the q8_0 block at m, as float32,
// into a new register.
func q8Scale(s isa, m Mem) VecVirtual {
	sc := s.Vec()
	VPBROADCASTW(m, half(s, sc))
	VCVTPH2PS(half(s, sc), sc)
	return sc
}

// q8Vec widens vector i (s.Lanes values) of the q8_0 block at m and
// multiplies it by the block's scale sc.
func q8Vec(s isa, m Mem, i int, sc VecVirtual) VecVirtual {
	v := q8Raw(s, m, i)
	VMULPS(sc, v, v)
	return v
}

// q8Raw widens vector i of the q8_0 block at m, unscaled (the int8
// values as float32).
func q8Raw(s isa, m Mem, i int) VecVirtual {
	v := s.Vec()
	VPMOVSXBD(m.Offset(2+i*s.Lanes), v)
	VCVTDQ2PS(v, v)
	return v
}

// ---------------------------------------------------------------------------
// Read bandwidth.

// genReadSum generates readSum<ISA>: the wrapping sum of the little-endian
// uint32 words of b, len(b) a multiple of 256, read with full-width loads
// into four independent accumulators.
func genReadSum(s isa) {
	name := "readSum" + s.Suffix
	TEXT(name, NOSPLIT, "func(b []byte) uint32")
	Pragma("noescape")
	Doc(name+" returns the wrapping sum of the little-endian uint32 words of b;",
		"len(b) is a multiple of 256.")
	bp := Load(Param("b").Base(), GP64())
	n := Load(Param("b").Len(), GP64())
	acc := make([]VecVirtual, 4)
	for i := range acc {
		acc[i] = s.Vec()
		zero(s, acc[i])
	}
	per := 256 / s.Bytes() / 4 // loads per accumulator per iteration
	Label("loop")
	CMPQ(n, U32(256))
	JL(LabelRef("done"))
	for u := 0; u < per; u++ {
		for i := range acc {
			VPADDD(Mem{Base: bp, Disp: (u*4 + i) * s.Bytes()}, acc[i], acc[i])
		}
	}
	ADDQ(U32(256), bp)
	SUBQ(U32(256), n)
	JMP(LabelRef("loop"))
	Label("done")
	VPADDD(acc[1], acc[0], acc[0])
	VPADDD(acc[3], acc[2], acc[2])
	VPADDD(acc[2], acc[0], acc[0])
	x := XMM()
	if s.EVEX {
		y := YMM()
		VEXTRACTI64X4(Imm(1), acc[0], y)
		VPADDD(y, acc[0].AsY(), y)
		VEXTRACTI32X4(Imm(1), y, x)
		VPADDD(x, y.AsX(), x)
	} else {
		VEXTRACTI128(Imm(1), acc[0], x)
		VPADDD(x, acc[0].AsX(), x)
	}
	t := XMM()
	VPSHUFD(Imm(0x4e), x, t)
	VPADDD(t, x, x)
	VPSHUFD(Imm(0xb1), x, t)
	VPADDD(t, x, x)
	r := GP32()
	VMOVD(x, r)
	Store(r, ReturnIndex(0))
	VZEROUPPER()
	RET()
}
