package main

import (
	"math"

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
// VCVTPH2PS), Q8 (llama.cpp's q8_0: blocks of 32 values, an fp16 scale
// then 32 int8, widened by VPMOVSXBD and VCVTDQ2PS and multiplied by the
// scale, which is exact) or Q4 (llama.cpp's q4_0: blocks of 32 values, an
// fp16 scale then 16 bytes of 4-bit codes; see quantBlock.vec), E4M3 and
// E5M2 (OCP fp8 bytes, widened through fp16; see widenFP8). Cache rows are read where they lie; Q, P and O
// are float32. The Go wrappers (decode_asm.go) split any number of rows
// into these tiles and check every length precondition; the assembly
// trusts its arguments.
//
// Register tiles. With L float32 lanes per vector (16 for AVX-512, 8 for
// AVX2) a kernel for mr rows keeps mr·w = L accumulators, w = L/mr:
//
//	scores: w keys per block, read in groups of scoresGroup keys whose
//	rows are read side by side, each from start to end: per step of L
//	elements (one block for q8_0 and q4_0) each key vector is loaded and widened once
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
	Name   string // in the function names: F32, BF16, F16, Q8, Q4, E4M3, E5M2
	GoType string // element type of the cache slice
	Size   int    // bytes per element; 0 for the block formats q8_0 and q4_0
	BF16   bool   // bfloat16 (else fp16) when Size == 2
	Bits   int    // q8_0: 8, q4_0: 4 (Size == 0)
	E5M2   bool   // fp8 e5m2 (else e4m3fn) when Size == 1
}

var decodeElems = []decodeElem{
	{Name: "F32", GoType: "float32", Size: 4},
	{Name: "BF16", GoType: "uint16", Size: 2, BF16: true},
	{Name: "F16", GoType: "uint16", Size: 2},
	{Name: "Q8", GoType: "byte", Bits: 8},
	{Name: "Q4", GoType: "byte", Bits: 4},
	{Name: "E4M3", GoType: "byte", Size: 1},
	{Name: "E5M2", GoType: "byte", Size: 1, E5M2: true},
}

// quant reports whether e is a block format (llama.cpp's q8_0 or q4_0):
// rows of blocks of quantValues values, an fp16 scale then the codes.
func (e decodeElem) quant() bool { return e.Size == 0 }

// The q8_0 block: an fp16 scale, then 32 int8 values. The q4_0 block: an
// fp16 scale, then 16 bytes whose low nibbles are the codes of values
// 0-15 and high nibbles those of values 16-31 (value = (code − 8)·scale).
const (
	quantValues = 32
	q8Bytes     = 34
	q4Bytes     = 18
)

// blockBytes is the size of one block of a block format.
func (e decodeElem) blockBytes() int {
	if e.Bits == 4 {
		return q4Bytes
	}
	return q8Bytes
}

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
	rb := e.blockBytes() * 4 // q8_0 or q4_0 rows of d=128
	if !e.quant() {
		rb = 128 * e.Size
	}
	r := 1
	for 2*r*rb <= scoresPrefetchBytes {
		r *= 2
	}
	return r
}

// groupRows are the rows per KV head (mr > 1) of the grouped-query
// kernels (genScoresGroup, genAccumGroup) below L, the float32 lanes (mr =
// L would be one head per block: the one-head kernel's tile): AVX-512 2,
// 4 and 8, AVX2 2 and 4.
var groupRows = []int{2, 4, 8}

// groupElem reports whether the grouped-query kernels (genScoresGroup
// and genAccumGroup for mr > 1) are made for the cache elements e on s:
// float32, bf16 and fp16 on AVX-512 and AVX2, and q8_0 on AVX-512 (a
// step of one block per key; on AVX2 a block is 4 vectors a key, more
// than its 16 registers hold for the 4 keys of a step).
func groupElem(s isa, e decodeElem) bool {
	return e.Size > 1 || (s.EVEX && e.quant() && e.Bits == 8)
}

// groupScoresMaxRows is the most rows per KV head of the grouped-query
// scores kernels. genScoresGroup makes mr = 8 too (two heads a block),
// but it lost to the one-head kernel of 8 rows, which keeps its 8 Q
// vectors in registers for two keys where the group form loads one per
// FMA and streams every head's Q rows through L1 at each key (64 rows of
// d = 128, 32 KiB, for 8 KV heads): on Zen 4, bf16 and fp16, 8 KV heads,
// 2.2-3.1 against 3.8-7.6 GB/s, about even on 2 and 4 KV heads (measured
// under load). The accum kernel of 8 rows holds its own (P by broadcast,
// O per 4 keys).
const groupScoresMaxRows = 4

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
	genQ4Table()
	genFP8Table()
	for _, s := range []isa{isaAVX512, isaAVX2} {
		for _, e := range decodeElems {
			for mr := 1; mr <= s.Lanes; mr *= 2 {
				if s.EVEX && e.Name == "F32" && mr == 8 {
					continue // two tiles of 4 rows instead (withScoresSplit8)
				}
				genScores(s, e, mr)
			}
			for mr := 1; mr <= s.Lanes; mr *= 2 {
				genAccum(s, e, mr)
			}
			genScoresGroup(s, e, 1)
			genAccumHeads(s, e)
			if groupElem(s, e) {
				for _, mr := range groupRows {
					if mr >= s.Lanes {
						continue // AVX2: one head a block, the one-head tile
					}
					if mr <= groupScoresMaxRows {
						genScoresGroup(s, e, mr)
					}
					genAccumGroup(s, e, mr)
				}
			}
		}
		genReadSum(s)
	}
	genScoresT()
}

// slot is the memory operand of a parameter (or part of one).
func slot(c gotypes.Component) Mem {
	b, err := c.Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// keyBlock emits the head of an accum kernel's loop over blocks of keys:
// a jump to "done" when no keys are left (nLeft), else jn = min(nLeft,
// keys), the keys of this block, which it also returns in a new register.
func keyBlock(nLeft, jn Mem, keys int) GPVirtual {
	n := GP64()
	MOVQ(nLeft, n)
	TESTQ(n, n)
	JZ(LabelRef("done"))
	jb := GP64()
	MOVQ(U32(keys), jb)
	CMPQ(n, jb)
	CMOVQGT(jb, n)
	MOVQ(n, jn)
	return n
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

// widen loads s.Lanes elements of type e (not a block format) at m as float32 lanes
// of a new register; with k != nil the load is masked (AVX-512: lanes
// outside k are zero and their memory is not touched).
func widen(s isa, e decodeElem, m Mem, k Register) VecVirtual {
	v := s.Vec()
	switch {
	case e.Size == 1:
		widenFP8(s, e, m, k, v)
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

// quantScale broadcasts the fp16 scale of the block at m, as float32,
// into a new register.
func quantScale(s isa, m Mem) VecVirtual {
	sc := s.Vec()
	VPBROADCASTW(m, half(s, sc))
	VCVTPH2PS(half(s, sc), sc)
	return sc
}

// quantBlock widens the vectors of one block of a block format at m (the
// vectors per block: quantValues/s.Lanes), computing what they share
// once: the scale and, for q4_0 on AVX-512, the block's table of the 16
// values (code − 8)·scale and the codes zero-extended to dwords.
//
// On AVX-512 with a frame slot (quantSlots), the scale is not broadcast
// into a register: VCVTPH2PS converts it in an xmm register (with the six
// bytes after it, ignored) and VMOVSS stores it to the slot, from which
// the instructions that use it read it with an embedded broadcast. This
// takes the zmm VPBROADCASTW and VCVTPH2PS off the shuffle and conversion
// units, which the widening saturates (measured on Zen 4: one zmm shuffle,
// one zmm conversion and one zmm FMA per cycle, about 1.5 zmm operations
// per cycle in all): the same values bit for bit, and with one query row
// 9-22% more blocks per second from L2 (BenchmarkDecodeL2, q8_0 and q4_0).
type quantBlock struct {
	s    isa
	e    decodeElem
	m    Mem
	sc   VecVirtual // the scale
	slot *Mem       // AVX-512: the frame slot of the scale as float32
	scm  bool       // the scale has been stored to slot
	tabc VecVirtual // q4_0, AVX-512: the table code − 8, loaded once per function
	tab  VecVirtual // q4_0, AVX-512: (code − 8)·scale for code 0..15
	m8   VecVirtual // q4_0, AVX2: −8·scale
	x    VecVirtual // q4_0, AVX-512: the 16 code bytes as dwords
}

// quantConsts holds what the blocks of one function share: the frame
// slots of their scales (AVX-512) and the q4_0 table in a register
// (AVX-512).
type quantConsts struct {
	slots    Mem // 4 bytes per slot
	useSlots bool
	tabc     VecVirtual
}

// newQuantConsts allocates n scale slots and loads the q4_0 table, for
// the AVX-512 kernels of a block format with mr query rows (nil
// otherwise). From 8 rows on the FMAs dominate and the slots do not pay:
// the scale stays in a register (measured on Zen 4: 3-5% slower with
// slots at 16 rows, 2-7% faster at 4, 9-22% at 1).
func newQuantConsts(s isa, e decodeElem, mr, n int) *quantConsts {
	if !s.EVEX || !e.quant() {
		return nil
	}
	c := &quantConsts{}
	if mr <= 4 {
		c.slots, c.useSlots = AllocLocal((4*n+7)&^7), true
	}
	if e.Bits == 4 {
		c.tabc = s.Vec()
		VMOVUPS(q4Tab, c.tabc)
	}
	return c
}

// newQuantBlock returns the block at m; with c set (AVX-512) its scale
// goes through slot number slot of c.
func newQuantBlock(s isa, e decodeElem, m Mem, c *quantConsts, slot int) *quantBlock {
	b := &quantBlock{s: s, e: e, m: m}
	if c != nil {
		b.tabc = c.tabc
		if c.useSlots {
			sl := c.slots.Offset(4 * slot)
			b.slot = &sl
		}
	}
	return b
}

// scale returns the block's scale (broadcast), loading it at the first call.
func (b *quantBlock) scale() VecVirtual {
	if b.sc == nil {
		b.sc = quantScale(b.s, b.m)
	}
	return b.sc
}

// scaleMem stores the block's scale as float32 in its slot (at the first
// call) and returns the slot, to be read with an embedded broadcast.
func (b *quantBlock) scaleMem() Mem {
	if !b.scm {
		x := XMM()
		VCVTPH2PS(b.m, x) // 4 fp16 from the block's first 8 bytes; lane 0 is the scale
		VMOVSS(x, *b.slot)
		b.scm = true
	}
	return *b.slot
}

// mulScale emits dst = v·scale (dst may be v).
func (b *quantBlock) mulScale(v, dst VecVirtual) {
	if b.slot != nil {
		VMULPS_BCST(b.scaleMem(), v, dst)
		return
	}
	VMULPS(b.scale(), v, dst)
}

// fmaScale emits acc += scale·t.
func (b *quantBlock) fmaScale(t, acc VecVirtual) {
	if b.slot != nil {
		VFMADD231PS_BCST(b.scaleMem(), t, acc)
		return
	}
	VFMADD231PS(b.scale(), t, acc)
}

// vec returns vector i of the block, scaled: the values exactly (a code
// times an fp16 scale has at most 15 significant bits).
//
//	q8_0: VPMOVSXBD, VCVTDQ2PS, VMULPS by the scale.
//	q4_0, AVX-512: one VPMOVZXBD of the 16 code bytes per block; vector 0
//	    (values 0-15, the low nibbles) is VPERMPS of the block's table,
//	    which reads only the low 4 bits of each index, vector 1 (the high
//	    nibbles) the same after VPSRLD by 4. The table costs one VMULPS per
//	    block; no per-value arithmetic at all.
//	q4_0, AVX2: VPMOVZXBD of 8 code bytes (values 8(i%2)…, low nibbles for
//	    i < 2, high for i >= 2), VPAND 15 or VPSRLD 4, VCVTDQ2PS, then
//	    code·scale − 8·scale in one FMA (exact: the result is representable).
//
// Not taken for q8_0 on AVX-512 (issue 29; the group kernels of 4 rows,
// 32/8 heads, are bound by the FMA pipes: per block 8 FMAs and the 2
// VMULPS, 40 of 40 cycles per 4 blocks on FP0 and FP1 in llvm-mca
// znver4), both slower on Zen 4 even without the scalar part of their
// per-block set-up (BenchmarkDecode group-scores and group-accum, m = 4,
// 8 KV heads, 32k keys, one thread, 7 alternated rounds under load,
// medians of GB/s):
//
//	magic number: VPADDD of 1.5·2²³'s bits to the VPMOVSXBD result, then
//	    one FMA d·(1.5·2²³ + k) − d·1.5·2²³ (exact for fp16 d and int8 k:
//	    d·k has at most 19 significant bits) instead of VCVTDQ2PS and
//	    VMULPS. The FMA is still on FP0/FP1, the VPADDD may go there too,
//	    and d·1.5·2²³ costs a VMULSS and a broadcast per block: 0.92× the
//	    scores, 0.96× the accumulate. It also differs from d·k for an
//	    infinite d (NaN for every k) and in the sign of a zero product.
//	integer scale: VPMADDWD of k by the scale's signed 11-bit
//	    significand md, VPADDD of the bits of a float M = 1.5·2²³·2^e (e
//	    the exponent of md's last bit), VSUBPS M: d·k exactly with no
//	    FP0/FP1 multiply, but VPMADDWD is on FP0/FP3 (llvm-mca) and the
//	    block takes 2 vector operations more: 0.90× the scores, 0.93× the
//	    accumulate (llvm-mca with the scalar set-up: 49 and 42 cycles per
//	    4 blocks against 40 and 42).
func (b *quantBlock) vec(i int) VecVirtual {
	s := b.s
	if b.e.Bits == 8 {
		if b.slot != nil {
			v := b.raw(i)
			b.mulScale(v, v)
			return v
		}
		sc := b.scale()
		v := b.raw(i)
		VMULPS(sc, v, v)
		return v
	}
	if s.EVEX {
		if b.tab == nil {
			b.tab = s.Vec()
			switch {
			case b.slot != nil:
				b.mulScale(b.tabc, b.tab)
			case b.tabc != nil:
				VMULPS(b.tabc, b.scale(), b.tab)
			default:
				VMULPS(q4Tab, b.scale(), b.tab)
			}
			b.x = s.Vec()
			VPMOVZXBD(b.m.Offset(2), b.x)
		}
		idx := b.x
		if i == 1 {
			idx = s.Vec()
			VPSRLD(Imm(4), b.x, idx)
		}
		v := s.Vec()
		VPERMPS(b.tab, idx, v)
		return v
	}
	if b.m8 == nil {
		b.m8 = s.Vec()
		VMULPS(q4Tab.Offset(q4Minus8), b.scale(), b.m8)
	}
	v := s.Vec()
	VPMOVZXBD(b.m.Offset(2+8*(i%2)), v)
	if i < 2 {
		VPAND(q4Tab.Offset(q4Nibble), v, v)
	} else {
		VPSRLD(Imm(4), v, v)
	}
	VCVTDQ2PS(v, v)
	VFMADD213PS(b.m8, b.scale(), v) // v = code·scale − 8·scale
	return v
}

// raw returns vector i of a q8_0 block, unscaled (the int8 values as
// float32).
func (b *quantBlock) raw(i int) VecVirtual {
	if b.e.Bits != 8 {
		panic("raw of a q4_0 block")
	}
	v := b.s.Vec()
	VPMOVSXBD(b.m.Offset(2+i*b.s.Lanes), v)
	VCVTDQ2PS(v, v)
	return v
}

// q4Tab is the table of the q4_0 kernels (decodeq4tab): the 16 float32
// values code − 8 for code 0..15 (the VPERMPS table of AVX-512, scaled per
// block), then at q4Minus8 eight float32 −8 and at q4Nibble eight dwords
// 15 (AVX2).
var q4Tab Mem

const (
	q4Minus8 = 64
	q4Nibble = 96
)

func genQ4Table() {
	q4Tab = GLOBL("decodeq4tab", RODATA|NOPTR)
	for c := 0; c < 16; c++ {
		DATA(4*c, U32(math.Float32bits(float32(c-8))))
	}
	for l := 0; l < 8; l++ {
		DATA(q4Minus8+4*l, U32(math.Float32bits(-8)))
	}
	for l := 0; l < 8; l++ {
		DATA(q4Nibble+4*l, U32(15))
	}
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

// fp8Tab is the table of the fp8 kernels (decodefp8tab): at fp8Clear14
// sixteen words 0xbfff, at fp8NaNWord sixteen words 0x7f00, at fp8Ones
// sixteen words 0xffff, at fp8Times256 sixteen float32 256.
var fp8Tab Mem

const (
	fp8Clear14  = 0
	fp8NaNWord  = 32
	fp8Ones     = 64
	fp8Times256 = 96
)

func genFP8Table() {
	fp8Tab = GLOBL("decodefp8tab", RODATA|NOPTR)
	for _, w := range []struct {
		off int
		v   uint16
	}{{fp8Clear14, 0xbfff}, {fp8NaNWord, 0x7f00}, {fp8Ones, 0xffff}} { // in address order, as the assembler wants
		for i := 0; i < 16; i++ {
			DATA(w.off+2*i, U16(w.v))
		}
	}
	for i := 0; i < 16; i++ {
		DATA(fp8Times256+4*i, U32(math.Float32bits(256)))
	}
}

// widenFP8 loads s.Lanes fp8 bytes at m (with k: masked, AVX-512) into v
// as float32, through fp16 words in the lower half of v:
//
//	e5m2:   the byte is the top byte of an fp16 of the same value:
//	        VPMOVZXBW, VPSLLW 8, VCVTPH2PS.
//	e4m3fn: S.EEEE.MMM becomes the fp16 S.0EEEE.MMM0000000, the value
//	        over 2⁸ (fp16's exponent bias is 8 more; subnormals map to
//	        subnormals): VPMOVSXBW (the sign fills the high byte), VPSLLW 7
//	        (sign in bits 15 and 14), a VPAND clearing bit 14; the NaN codes
//	        S.1111.111 (which would read ±480) are the words whose low 15
//	        bits shifted left by one are 0x7f00, set to 0xffff (an fp16
//	        NaN) by a compare and an OR (AVX-512: an opmask and a merging
//	        move); VCVTPH2PS, then VMULPS by 256 (exact).
func widenFP8(s isa, e decodeElem, m Mem, k Register, v VecVirtual) {
	x := half(s, v)
	var src Op = m
	if k != nil {
		VMOVDQU8_Z(m, k, v.AsX())
		src = v.AsX()
	}
	if e.E5M2 {
		VPMOVZXBW(src, x)
		VPSLLW(Imm(8), x, x)
		VCVTPH2PS(x, v)
		return
	}
	VPMOVSXBW(src, x)
	VPSLLW(Imm(7), x, x)
	t := half(s, s.Vec())
	if s.EVEX {
		VPANDD(fp8Tab.Offset(fp8Clear14), x, x)
		VPSLLW(Imm(1), x, t)
		nan := K()
		VPCMPEQW(fp8Tab.Offset(fp8NaNWord), t, nan)
		VMOVDQU16(fp8Tab.Offset(fp8Ones), nan, x)
		VCVTPH2PS(x, v)
		VMULPS_BCST(fp8Tab.Offset(fp8Times256), v, v)
		return
	}
	VPAND(fp8Tab.Offset(fp8Clear14), x, x)
	VPSLLW(Imm(1), x, t)
	VPCMPEQW(fp8Tab.Offset(fp8NaNWord), t, t)
	VPOR(t, x, x)
	VCVTPH2PS(x, v)
	VMULPS(fp8Tab.Offset(fp8Times256), v, v)
}
