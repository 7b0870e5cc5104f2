package main

import (
	"flag"
	"fmt"
	"os"

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

var decodeOnly = flag.Bool("decode", false, "generate the decode kernels of decode.go instead of the main ones")

// decodeMain generates the decode kernels and exits when the -decode flag
// is set; otherwise it returns and main generates the main kernels.
func decodeMain() {
	flag.Parse()
	if !*decodeOnly {
		return
	}
	ConstraintExpr("amd64,!purego")
	genDecode()
	Generate()
	os.Exit(0)
}

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
// The transposing reduction: L accumulators to one vector of their sums.

// A fold level combines vectors 2i and 2i+1 into one: x and y are two
// shuffles of the pair, and x+y holds, in the same lane positions, the
// partial sums of fewer accumulators with half as many lanes each.
type foldLevel int

const (
	fold256 foldLevel = iota // AVX-512 only: 256-bit halves
	fold128                  // 128-bit lanes
	fold64                   // pairs of dwords within 128-bit lanes
	fold32                   // dwords within 128-bit lanes
)

func foldLevels(s isa) []foldLevel {
	if s.EVEX {
		return []foldLevel{fold256, fold128, fold64, fold32}
	}
	return []foldLevel{fold128, fold64, fold32}
}

// foldLanes returns, for the x and y shuffles of level l on L lanes, the
// source of each output lane: (0 = a, 1 = b, lane).
func foldLanes(l foldLevel, L int) (x, y [][2]int) {
	x, y = make([][2]int, L), make([][2]int, L)
	for i := 0; i < L; i++ {
		g, w := i/4, i%4 // 128-bit group, dword within it
		switch l {
		case fold256: // x = [a.q0 a.q1 b.q0 b.q1], y = [a.q2 a.q3 b.q2 b.q3]
			src := 0
			if g >= 2 {
				src = 1
			}
			x[i] = [2]int{src, (g%2)*4 + w}
			y[i] = [2]int{src, (g%2+2)*4 + w}
		case fold128: // 16 lanes: x = [a.q0 a.q2 b.q0 b.q2], y = [a.q1 a.q3 b.q1 b.q3]; 8 lanes: x = [a.h0 b.h0], y = [a.h1 b.h1]
			if L == 16 {
				src := g / 2
				x[i] = [2]int{src, (g%2)*8 + w}
				y[i] = [2]int{src, (g%2)*8 + 4 + w}
			} else {
				x[i] = [2]int{g, w}
				y[i] = [2]int{g, 4 + w}
			}
		case fold64: // per 128-bit group: x = [a0 a1 b0 b1], y = [a2 a3 b2 b3]
			x[i] = [2]int{w / 2, g*4 + w%2}
			y[i] = [2]int{w / 2, g*4 + 2 + w%2}
		case fold32: // per 128-bit group: x = [a0 a2 b0 b2], y = [a1 a3 b1 b3]
			x[i] = [2]int{w / 2, g*4 + 2*(w%2)}
			y[i] = [2]int{w / 2, g*4 + 2*(w%2) + 1}
		}
	}
	return x, y
}

// foldPerm simulates the folding tree on labels: it returns, for each lane
// of the result, the input vector whose sum ends up there. It panics if a
// level would add partial sums of different inputs (a generator bug).
func foldPerm(s isa) []int {
	L := s.Lanes
	vs := make([][]int, L)
	for i := range vs {
		vs[i] = make([]int, L)
		for j := range vs[i] {
			vs[i][j] = i
		}
	}
	for _, l := range foldLevels(s) {
		xs, ys := foldLanes(l, L)
		var next [][]int
		for p := 0; p < len(vs); p += 2 {
			out := make([]int, L)
			for i := 0; i < L; i++ {
				pair := [2][]int{vs[p], vs[p+1]}
				a, b := pair[xs[i][0]][xs[i][1]], pair[ys[i][0]][ys[i][1]]
				if a != b {
					panic(fmt.Sprintf("fold level %d adds lanes of inputs %d and %d", l, a, b))
				}
				out[i] = a
			}
			next = append(next, out)
		}
		vs = next
	}
	return vs[0]
}

// fold emits the tree on in (s.Lanes vectors; nil ones are zero) and
// returns the vector whose lane i holds the sum of in[foldPerm(s)[i]].
func fold(s isa, in []VecVirtual) VecVirtual {
	var zero VecVirtual
	zeroReg := func() VecVirtual {
		if zero == nil {
			zero = s.Vec()
			VXORPS(zero, zero, zero)
		}
		return zero
	}
	vs := in
	for _, l := range foldLevels(s) {
		var next []VecVirtual
		for p := 0; p < len(vs); p += 2 {
			a, b := vs[p], vs[p+1]
			if a == nil && b == nil {
				next = append(next, nil)
				continue
			}
			if a == nil {
				a = zeroReg()
			}
			if b == nil {
				b = zeroReg()
			}
			x, y := s.Vec(), s.Vec()
			switch l {
			case fold256:
				VSHUFF32X4(Imm(0x44), b, a, x)
				VSHUFF32X4(Imm(0xee), b, a, y)
			case fold128:
				if s.EVEX {
					VSHUFF32X4(Imm(0x88), b, a, x)
					VSHUFF32X4(Imm(0xdd), b, a, y)
				} else {
					VPERM2F128(Imm(0x20), b, a, x)
					VPERM2F128(Imm(0x31), b, a, y)
				}
			case fold64:
				VSHUFPS(Imm(0x44), b, a, x)
				VSHUFPS(Imm(0xee), b, a, y)
			case fold32:
				VSHUFPS(Imm(0x88), b, a, x)
				VSHUFPS(Imm(0xdd), b, a, y)
			}
			VADDPS(y, x, x)
			next = append(next, x)
		}
		vs = next
	}
	return vs[0]
}

// foldTile folds the accumulators acc[r][jj] (rows × w, rows·w <= L) into
// one vector whose lane r·w+jj holds their sum.
func foldTile(s isa, acc [][]VecVirtual, w int) VecVirtual {
	perm := foldPerm(s)
	in := make([]VecVirtual, s.Lanes)
	for lane, src := range perm {
		if r, jj := lane/w, lane%w; r < len(acc) {
			in[src] = acc[r][jj]
		}
	}
	return fold(s, in)
}

// storeTile stores the lanes r·w .. r·w+w-1 of v at row(r), for r < rows
// (w is a power of two).
func storeTile(s isa, v VecVirtual, rows, w int, row func(r int) Mem) {
	L := s.Lanes
	switch {
	case w == L:
		VMOVUPS(v, row(0))
		return
	case w == L/2:
		VMOVUPS(half(s, v), row(0))
		if rows > 1 {
			if s.EVEX {
				VEXTRACTF64X4(Imm(1), v, row(1))
			} else {
				VEXTRACTF128(Imm(1), v, row(1))
			}
		}
		return
	}
	// w <= 4 (AVX-512) or w <= 2 (AVX2): by 128-bit group.
	for g := 0; g*4 < rows*w; g++ {
		x := lane128(s, v, g)
		switch w {
		case 4:
			VMOVUPS(x, row(g))
		case 2:
			VMOVLPS(x, row(2*g))
			if 2*g+1 < rows {
				VMOVHPS(x, row(2*g+1))
			}
		case 1:
			for t := 0; t < 4 && 4*g+t < rows; t++ {
				if t == 0 {
					VMOVSS(x, row(4*g))
				} else {
					VEXTRACTPS(Imm(uint64(t)), x, row(4*g+t))
				}
			}
		}
	}
}

// lane128 returns 128-bit group g of v in an xmm register.
func lane128(s isa, v VecVirtual, g int) Register {
	if g == 0 {
		return v.AsX()
	}
	x := XMM()
	if s.EVEX {
		VEXTRACTF32X4(Imm(uint64(g)), v, x)
	} else {
		VEXTRACTF128(Imm(uint64(g)), v, x)
	}
	return x
}

// ---------------------------------------------------------------------------
// Scores.

// scoresGen holds the state of one scores function being generated.
type scoresGen struct {
	s  isa
	e  decodeElem
	mr int

	kmask Register   // AVX-512: opmask of the first t lanes (t = d mod 16)
	wmask VecVirtual // AVX2: mask of the last t of the 8 window lanes

	// Frame slots: &S[0][j0], &K[j0][0], keys left, steps per row and
	// (AVX2) the window rewinds of a key row and of a Q row in bytes.
	sp, kb, nLeft, steps, rewK, rewQ Mem
}

// stepElems is the number of elements of d one step of the p loop covers.
func (g *scoresGen) stepElems() int {
	if g.e.q8() {
		return q8Values
	}
	return g.s.Lanes
}

// stepKBytes is the number of bytes of a key row one step covers.
func (g *scoresGen) stepKBytes() int {
	if g.e.q8() {
		return q8Bytes
	}
	return g.s.Lanes * g.e.Size
}

// numRegs is the number of vector registers of the ISA.
func numRegs(s isa) int {
	if s.EVEX {
		return 32
	}
	return 16
}

func genScores(s isa, e decodeElem, mr int) {
	name := fmt.Sprintf("scores%sM%d%s", e.Name, mr, s.Suffix)
	TEXT(name, NOSPLIT, fmt.Sprintf("func(s []float32, lds int, q []float32, k []%s, ldk, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets s[r*lds+j] = Σ_p q[r*d+p]·k[j*ldk+p] for r < %d, j < n, p < d;", name, mr),
		cacheDoc(s, e, "ldk", "key"))

	g := &scoresGen{s: s, e: e, mr: mr}
	g.sp, g.kb, g.nLeft, g.steps = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	MOVQ(Load(Param("s").Base(), GP64()), g.sp)
	MOVQ(Load(Param("k").Base(), GP64()), g.kb)
	MOVQ(Load(Param("n"), GP64()), g.nLeft)
	d := Load(Param("d"), GP64())
	steps := GP64()
	MOVQ(d, steps)
	SHRQ(Imm(uint64(log2(g.stepElems()))), steps)
	MOVQ(steps, g.steps)
	if !e.q8() {
		t := GP64()
		MOVQ(d, t)
		ANDQ(Imm(uint64(s.Lanes-1)), t)
		if s.EVEX {
			g.kmask = tailMask(t)
		} else {
			g.wmask = windowMask(t)
			g.rewK, g.rewQ = AllocLocal(8), AllocLocal(8)
			rw := windowRewind(t)
			rk := GP64()
			MOVQ(rw, rk)
			SHLQ(Imm(uint64(log2(e.Size))), rk)
			MOVQ(rk, g.rewK)
			SHLQ(Imm(2), rw)
			MOVQ(rw, g.rewQ)
		}
	}

	w := s.Lanes / mr
	g.keyLoop(w, "main")
	if w > 1 {
		g.keyLoop(1, "rest")
	}
	Label("done")
	VZEROUPPER()
	RET()
}

// cacheDoc is the second line of the doc comment of a scores or accum
// kernel: the cache row stride ld (of a key or value row) and the
// preconditions on d and n.
func cacheDoc(s isa, e decodeElem, ld, row string) string {
	stride, pre := ld+" is the "+row+" row stride in elements", "d >= 1"
	switch {
	case e.q8():
		stride, pre = ld+" is the "+row+" row stride in bytes (rows of d/32 blocks of 34 bytes)", "d is a positive multiple of 32"
	case !s.EVEX:
		pre = "d >= 8"
	}
	return stride + "; " + pre + ", n >= 1, and all accesses are in bounds."
}

// tailMask returns the opmask of the first t lanes.
func tailMask(t Register) Register {
	k := K()
	tab := GP64()
	LEAQ(decMask16, tab)
	KMOVW(Mem{Base: tab, Index: t, Scale: 2}, k)
	return k
}

// windowMask returns the ymm mask of the last t of 8 lanes.
func windowMask(t Register) VecVirtual {
	tab := GP64()
	LEAQ(decMask8, tab)
	m := YMM()
	VMOVUPS(Mem{Base: tab, Index: t, Scale: 4, Disp: 32}, m)
	return m
}

// firstMask returns the ymm mask of the first t of 8 lanes (t in a
// register, 0 <= t <= 8).
func firstMask(t Register) VecVirtual {
	u := GP64()
	MOVQ(U32(8), u)
	SUBQ(t, u)
	tab := GP64()
	LEAQ(decMask8, tab)
	m := YMM()
	VMOVUPS(Mem{Base: tab, Index: u, Scale: 4}, m)
	return m
}

// windowRewind returns (8-t) mod 8 in a new register: the number of
// elements the window of the last 8 starts before the tail (0: no tail).
func windowRewind(t Register) GPVirtual {
	rw := GP64()
	MOVQ(U32(8), rw)
	SUBQ(t, rw)
	ANDQ(Imm(7), rw)
	return rw
}

// keyLoop emits: while keys left >= w { S[:, j0:j0+w] = Q·K[j0:j0+w]ᵀ }.
// The keys of a block are taken one after the other, each row read from
// start to end (w rows read side by side defeat the hardware prefetchers),
// into its own mr accumulators; the w·mr accumulators are folded together
// at the end of the block.
func (g *scoresGen) keyLoop(w int, lbl string) {
	s, e, mr := g.s, g.e, g.mr
	end := lbl + "End"
	if w == 1 {
		end = "done"
	}
	Label(lbl)
	CMPQ(g.nLeft, U32(w))
	JL(LabelRef(end))

	acc := make([][]VecVirtual, mr)
	for r := range acc {
		acc[r] = make([]VecVirtual, w)
		for jj := range acc[r] {
			acc[r][jj] = s.Vec()
			zero(s, acc[r][jj])
		}
	}
	var kld, kld3 GPVirtual
	if w > 1 {
		kld, kld3 = strides(slot(Param("ldk")), max(e.Size, 1), w)
	}
	ks := newRowSet(g.kb, kld, kld3, w)
	grp := scoresGroup(mr, w)
	for j0 := 0; j0 < w; j0 += grp {
		kl := fmt.Sprintf("%sK%d", lbl, j0)
		var qld, qld3 GPVirtual
		if mr > 1 {
			qld, qld3 = strides(slot(Param("d")), 4, mr)
		}
		qs := newRowSet(slot(Param("q").Base()), qld, qld3, mr)
		var jjs []int
		var kps []Register
		for jj := j0; jj < j0+grp; jj++ {
			kp := GP64()
			LEAQ(ks.mem(jj, 0), kp)
			jjs, kps = append(jjs, jj), append(kps, kp)
		}
		pfd := GP64() // bytes from a key row to the one it prefetches
		MOVQ(slot(Param("ldk")), pfd)
		SHLQ(Imm(uint64(log2(max(e.Size, 1))+log2(scoresPrefetchRows(e)))), pfd)
		steps := GP64()
		MOVQ(g.steps, steps)
		TESTQ(steps, steps)
		JZ(LabelRef(kl + "Tail"))
		Label(kl + "Step")
		for _, kp := range kps {
			PREFETCHT1(Mem{Base: kp, Index: pfd, Scale: 1})
		}
		g.step(acc, w, jjs, qs, kps, nil, false)
		qs.add(U32(4 * g.stepElems()))
		for _, kp := range kps {
			ADDQ(U32(g.stepKBytes()), kp)
		}
		DECQ(steps)
		JNZ(LabelRef(kl + "Step"))

		Label(kl + "Tail")
		if !e.q8() {
			if s.EVEX {
				KORTESTW(g.kmask, g.kmask)
				JZ(LabelRef(kl + "Done"))
				g.step(acc, w, jjs, qs, kps, g.kmask, false)
			} else {
				rk := GP64()
				MOVQ(g.rewK, rk)
				TESTQ(rk, rk)
				JZ(LabelRef(kl + "Done"))
				for _, kp := range kps {
					SUBQ(rk, kp)
				}
				qs.sub(g.rewQ)
				g.step(acc, w, jjs, qs, kps, nil, true)
			}
		}
		Label(kl + "Done")
	}

	v := foldTile(s, acc, w)
	sp := GP64()
	MOVQ(g.sp, sp)
	row := func(int) Mem { return Mem{Base: sp} }
	if mr > 1 {
		lds := GP64()
		MOVQ(slot(Param("lds")), lds)
		SHLQ(Imm(2), lds)
		row = rowMems(sp, lds)
	}
	storeTile(s, v, mr, w, row)
	ADDQ(U32(4*w), g.sp)
	kb := GP64()
	MOVQ(g.kb, kb)
	kst := GP64()
	MOVQ(slot(Param("ldk")), kst)
	SHLQ(Imm(uint64(log2(max(e.Size, 1))+log2(w))), kst)
	ADDQ(kst, kb)
	MOVQ(kb, g.kb)
	SUBQ(U32(w), g.nLeft)
	JMP(LabelRef(lbl))
	if w > 1 {
		Label(end)
	}
}

// scoresGroup is the number of keys whose rows a scores kernel for mr
// rows and w keys per block reads side by side: one for a single row (the
// kernel is memory-bound and rows read one after the other stream best),
// else up to 4, so that each Q vector loaded into a register serves
// several keys (a step of one key would load mr Q vectors per mr FMAs and
// be bound by the loads).
func scoresGroup(mr, w int) int {
	if mr == 1 {
		return 1
	}
	return min(w, 4)
}

// step emits one step of the p loop of the keys jjs, whose rows are at
// kps: the products of one vector of each row (one q8 block: several
// vectors) with the same part of Q's rows. With k set (AVX-512) it is the
// masked tail; with window (AVX2) the tail read as the window of the last 8
// elements, the lanes the full vectors covered cleared in both operands.
func (g *scoresGen) step(acc [][]VecVirtual, w int, jjs []int, qs rowSet, kps []Register, k Register, window bool) {
	s, e, mr := g.s, g.e, g.mr
	regs := numRegs(s)
	tail := k != nil || window
	qload := func(r, disp int) VecVirtual {
		q := s.Vec()
		switch {
		case k != nil:
			VMOVUPS_Z(qs.mem(r, disp), k, q)
		case window:
			VMASKMOVPS(qs.mem(r, disp), g.wmask, q)
		default:
			VMOVUPS(qs.mem(r, disp), q)
		}
		return q
	}
	if e.q8() && mr == 1 {
		// One row: the block's products summed unscaled, then one FMA
		// by the scale (a multiply per vector fewer).
		for x, jj := range jjs {
			sc := q8Scale(s, Mem{Base: kps[x]})
			t := s.Vec()
			for i := 0; i < q8Values/s.Lanes; i++ {
				kv := q8Raw(s, Mem{Base: kps[x]}, i)
				if i == 0 {
					VMULPS(qs.mem(0, 0), kv, t)
				} else {
					VFMADD231PS(qs.mem(0, i*s.Bytes()), kv, t)
				}
			}
			VFMADD231PS(sc, t, acc[0][jj])
		}
		return
	}
	if e.q8() {
		nv := q8Values / s.Lanes
		var qv [][]VecVirtual
		if len(jjs) > 1 && mr*nv+mr*w+3 <= regs {
			qv = make([][]VecVirtual, mr)
			for r := range qv {
				for i := 0; i < nv; i++ {
					qv[r] = append(qv[r], qload(r, i*s.Bytes()))
				}
			}
		}
		for x, jj := range jjs {
			sc := q8Scale(s, Mem{Base: kps[x]})
			for i := 0; i < nv; i++ {
				kv := q8Vec(s, Mem{Base: kps[x]}, i, sc)
				for r := 0; r < mr; r++ {
					if qv != nil {
						VFMADD231PS(qv[r][i], kv, acc[r][jj])
					} else {
						VFMADD231PS(qs.mem(r, i*s.Bytes()), kv, acc[r][jj])
					}
				}
			}
		}
		return
	}
	if e.Size == 4 && mr == 1 && !tail {
		q := qload(0, 0)
		for x, jj := range jjs {
			VFMADD231PS(Mem{Base: kps[x]}, q, acc[0][jj])
		}
		return
	}
	var qv []VecVirtual
	if (len(jjs) > 1 || tail) && mr+mr*w+3 <= regs {
		for r := 0; r < mr; r++ {
			qv = append(qv, qload(r, 0))
		}
	}
	for x, jj := range jjs {
		kv := widen(s, e, Mem{Base: kps[x]}, k)
		if window {
			VANDPS(g.wmask, kv, kv)
		}
		for r := 0; r < mr; r++ {
			switch {
			case qv != nil:
				VFMADD231PS(qv[r], kv, acc[r][jj])
			case tail:
				VFMADD231PS(qload(r, 0), kv, acc[r][jj])
			default:
				VFMADD231PS(qs.mem(r, 0), kv, acc[r][jj])
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Accum.

// accumGen holds the state of one accum function being generated.
type accumGen struct {
	s     isa
	e     decodeElem
	mr, w int
	vpb   int // vectors per q8 block (1 for the other types)
	passN int // passes emitted so far (label names)

	kmask Register // AVX-512: opmask of the first t lanes (t = d mod 16)

	// Frame slots: &O[0][c0] and &V[j0][c0] of the current chunk, &P[0][j0]
	// and &V[j0][0] of the current key block, the keys in it, the keys
	// left (this block included) and the vectors of d left in the sweep.
	oCur, vCur, pBlk, vBlk, jn, nLeft, vecLeft Mem
	// The block of P (mr rows of accumKeyBlock keys, zero beyond the
	// block's keys), copied so that the broadcasts of the key loop read
	// 128-byte rows whatever P's stride (rows 4 KiB apart would all fall
	// in one L1 set).
	pLoc Mem
}

// copyP copies the mr×jn block of P at pBlk into pLoc.
func (g *accumGen) copyP(jn Register) {
	s := g.s
	pb := ldMem(g.pBlk)
	ldp := Load(Param("ldp"), GP64())
	SHLQ(Imm(2), ldp)
	row := rowMems(pb, ldp)
	if g.mr == 1 {
		row = func(int) Mem { return Mem{Base: pb} }
	}
	nv := accumKeyBlock / s.Lanes
	var masks []Register
	for v := 0; v < nv; v++ {
		// Lanes of vector v: clamp(jn - v·L, 0, L).
		t, z, l := GP64(), GP64(), GP64()
		MOVQ(jn, t)
		SUBQ(U32(v*s.Lanes), t)
		XORQ(z, z)
		CMPQ(t, z)
		CMOVQLT(z, t)
		MOVQ(U32(s.Lanes), l)
		CMPQ(t, l)
		CMOVQGT(l, t)
		if s.EVEX {
			masks = append(masks, tailMask(t))
		} else {
			masks = append(masks, firstMask(t))
		}
	}
	for r := 0; r < g.mr; r++ {
		m := row(r)
		for v := 0; v < nv; v++ {
			x := s.Vec()
			if s.EVEX {
				VMOVUPS_Z(m.Offset(v*s.Bytes()), masks[v], x)
			} else {
				VMASKMOVPS(m.Offset(v*s.Bytes()), masks[v], x)
			}
			VMOVUPS(x, g.pLoc.Offset(r*accumKeyBlock*4+v*s.Bytes()))
		}
	}
}

func genAccum(s isa, e decodeElem, mr int) {
	name := fmt.Sprintf("accum%sM%d%s", e.Name, mr, s.Suffix)
	// Not NOSPLIT: the frame holds a copy of a block of P (up to 2 KiB).
	TEXT(name, 0, fmt.Sprintf("func(o []float32, ldo int, p []float32, ldp int, v []%s, ldv, n, d int)", e.GoType))
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds Σ_j p[r*ldp+j]·v[j*ldv+c] to o[r*ldo+c] for r < %d, c < d, j < n;", name, mr),
		cacheDoc(s, e, "ldv", "value"))

	g := &accumGen{s: s, e: e, mr: mr, w: s.Lanes / mr, vpb: 1}
	if e.q8() {
		g.vpb = q8Values / s.Lanes
	}
	g.oCur, g.vCur, g.pBlk, g.vBlk = AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.jn, g.nLeft, g.vecLeft = AllocLocal(8), AllocLocal(8), AllocLocal(8)
	g.pLoc = AllocLocal(mr * accumKeyBlock * 4)
	MOVQ(Load(Param("p").Base(), GP64()), g.pBlk)
	MOVQ(Load(Param("v").Base(), GP64()), g.vBlk)
	MOVQ(Load(Param("n"), GP64()), g.nLeft)
	if s.EVEX && !e.q8() {
		g.kmask = tailMask(dTail(15))
	}

	Label("block")
	{
		n := GP64()
		MOVQ(g.nLeft, n)
		TESTQ(n, n)
		JZ(LabelRef("done"))
		jb := GP64()
		MOVQ(U32(accumKeyBlock), jb)
		CMPQ(n, jb)
		CMOVQGT(jb, n)
		MOVQ(n, g.jn)
		g.copyP(n)
		MOVQ(Load(Param("o").Base(), GP64()), g.oCur)
		MOVQ(ldMem(g.vBlk), g.vCur)
		d := Load(Param("d"), GP64())
		SHRQ(Imm(uint64(log2(s.Lanes))), d)
		MOVQ(d, g.vecLeft)
	}
	unit := max(g.w, g.vpb)
	Label("full")
	CMPQ(g.vecLeft, U32(unit))
	JL(LabelRef(fmt.Sprintf("chunk%d", unit/2)))
	g.chunk(unit)
	JMP(LabelRef("full"))
	for c := unit / 2; c >= g.vpb; c /= 2 {
		Label(fmt.Sprintf("chunk%d", c))
		CMPQ(g.vecLeft, U32(c))
		JL(LabelRef(fmt.Sprintf("chunk%d", c/2)))
		g.chunk(c)
	}
	Label(fmt.Sprintf("chunk%d", g.vpb/2))
	if !e.q8() {
		dTail(s.Lanes - 1) // ANDQ sets ZF when d has no tail
		JZ(LabelRef("next"))
		g.pass(0, 1, true)
	}

	Label("next")
	{
		jn := GP64()
		MOVQ(g.jn, jn)
		SUBQ(jn, g.nLeft)
		pb := GP64()
		MOVQ(g.pBlk, pb)
		LEAQ(Mem{Base: pb, Index: jn, Scale: 4}, pb)
		MOVQ(pb, g.pBlk)
		ldv := Load(Param("ldv"), GP64())
		if e.Size > 1 {
			SHLQ(Imm(uint64(log2(e.Size))), ldv)
		}
		IMULQ(jn, ldv)
		ADDQ(ldv, g.vBlk)
	}
	JMP(LabelRef("block"))
	Label("done")
	VZEROUPPER()
	RET()
}

// vecBytesV is the number of bytes of a V row that c vectors cover (for
// q8, c is a multiple of the vectors per block).
func (g *accumGen) vecBytesV(c int) int {
	if g.e.q8() {
		return c / g.vpb * q8Bytes
	}
	return c * g.s.Lanes * g.e.Size
}

// prefetchOffsets returns the offsets in a value row of one byte per
// cache line of the columns that a pass over vectors first..first+c-1
// reads (the d tail: its first vector).
func (g *accumGen) prefetchOffsets(first, c int, tail bool) []int {
	var lo, hi int
	switch {
	case g.e.q8():
		lo, hi = first/g.vpb*q8Bytes, ((first+c-1)/g.vpb+1)*q8Bytes
	case tail:
		lo, hi = 0, g.s.Lanes*g.e.Size
	default:
		lo, hi = first*g.s.Lanes*g.e.Size, (first+c)*g.s.Lanes*g.e.Size
	}
	var offs []int
	for off := lo; off < hi; off += 64 {
		offs = append(offs, off)
	}
	return offs
}

// chunk emits the passes over c vectors of O's columns (for q8 with fewer
// vectors per tile than per block, one pass per part of the block) and
// advances the chunk pointers.
func (g *accumGen) chunk(c int) {
	if c > g.w {
		for first := 0; first < c; first += g.w {
			g.pass(first, g.w, false)
		}
	} else {
		g.pass(0, c, false)
	}
	ADDQ(U32(c*g.s.Lanes*4), g.oCur)
	ADDQ(U32(g.vecBytesV(c)), g.vCur)
	SUBQ(U32(c), g.vecLeft)
}

// oRows returns the memory operands of the O tile's rows at the current
// chunk (rewound to the window on the AVX2 tail).
func (g *accumGen) oRows(window bool) func(r int) Mem {
	op := GP64()
	MOVQ(g.oCur, op)
	if window {
		SUBQ(windowRewindD(4), op)
	}
	if g.mr == 1 {
		return func(int) Mem { return Mem{Base: op} }
	}
	ldo := Load(Param("ldo"), GP64())
	SHLQ(Imm(2), ldo)
	return rowMems(op, ldo)
}

// dTail returns d & mask in a new register: with mask = lanes−1, the
// elements of d beyond its last full vector.
func dTail(mask int) GPVirtual {
	t := Load(Param("d"), GP64()).(GPVirtual)
	ANDQ(Imm(uint64(mask)), t)
	return t
}

// windowMaskD loads the AVX2 window mask of the d tail.
func windowMaskD() VecVirtual { return windowMask(dTail(7)) }

// windowRewindD returns the bytes (elements of size bytes) that the AVX2
// window of the d tail starts before the tail.
func windowRewindD(size int) GPVirtual {
	rw := windowRewind(dTail(7))
	SHLQ(Imm(uint64(log2(size))), rw)
	return rw
}

// pass emits one sweep over the keys of the block for vectors
// first..first+c-1 of the current chunk: load the mr×c tile of O, add the
// products of every key, store it. tail: the one masked vector of the d
// tail (AVX-512: opmask; AVX2: the window of the last 8 columns).
func (g *accumGen) pass(first, c int, tail bool) {
	s, e, mr := g.s, g.e, g.mr
	L := s.Lanes
	g.passN++
	lbl := fmt.Sprintf("keys%d", g.passN)
	window := tail && !s.EVEX

	// Load the O tile.
	acc := make([][]VecVirtual, mr)
	{
		var wm VecVirtual
		if window {
			wm = windowMaskD()
		}
		row := g.oRows(window)
		for r := range acc {
			m := row(r)
			for i := 0; i < c; i++ {
				a := s.Vec()
				switch {
				case window:
					VMASKMOVPS(m, wm, a)
				case tail:
					VMOVUPS_Z(m, g.kmask, a)
				default:
					VMOVUPS(m.Offset((first+i)*L*4), a)
				}
				acc[r] = append(acc[r], a)
			}
		}
	}

	// The keys.
	pl := GP64()
	LEAQ(g.pLoc, pl)
	vr := ldMem(g.vCur)
	if window {
		SUBQ(windowRewindD(e.Size), vr)
	}
	ldv := Load(Param("ldv"), GP64())
	if e.Size > 1 {
		SHLQ(Imm(uint64(log2(e.Size))), ldv)
	}
	pfd := GP64() // bytes from a value row to the one in the next block
	MOVQ(ldv, pfd)
	SHLQ(Imm(uint64(log2(accumKeyBlock))), pfd)
	jc := ldMem(g.jn)
	Label(lbl)
	for _, off := range g.prefetchOffsets(first, c, tail) {
		PREFETCHT1(Mem{Base: vr, Index: pfd, Scale: 1, Disp: off})
	}
	var pv []VecVirtual
	if mr+mr*c+3 <= numRegs(s) {
		for r := 0; r < mr; r++ {
			p := s.Vec()
			VBROADCASTSS(Mem{Base: pl, Disp: r * accumKeyBlock * 4}, p)
			pv = append(pv, p)
		}
	}
	var sc VecVirtual
	for i := 0; i < c; i++ {
		x := first + i
		if e.Size == 4 && mr == 1 && !tail {
			VFMADD231PS(Mem{Base: vr, Disp: x * L * 4}, pv[0], acc[0][i])
			continue
		}
		var vv VecVirtual
		switch {
		case e.q8() && mr == 1:
			// One row: p times the block's scale once, then the raw
			// values (a multiply per vector fewer).
			blk := Mem{Base: vr, Disp: x / g.vpb * q8Bytes}
			if i == 0 || x%g.vpb == 0 {
				sc = q8Scale(s, blk)
				VMULPS(pv[0], sc, sc)
			}
			VFMADD231PS(sc, q8Raw(s, blk, x%g.vpb), acc[0][i])
			continue
		case e.q8():
			blk := Mem{Base: vr, Disp: x / g.vpb * q8Bytes}
			if i == 0 || x%g.vpb == 0 {
				sc = q8Scale(s, blk)
			}
			vv = q8Vec(s, blk, x%g.vpb, sc)
		case tail && !window:
			vv = widen(s, e, Mem{Base: vr}, g.kmask)
		default:
			vv = widen(s, e, Mem{Base: vr, Disp: x * L * e.Size}, nil)
		}
		for r := 0; r < mr; r++ {
			switch {
			case pv != nil:
				VFMADD231PS(pv[r], vv, acc[r][i])
			case s.EVEX:
				VFMADD231PS_BCST(Mem{Base: pl, Disp: r * accumKeyBlock * 4}, vv, acc[r][i])
			default:
				p := s.Vec()
				VBROADCASTSS(Mem{Base: pl, Disp: r * accumKeyBlock * 4}, p)
				VFMADD231PS(p, vv, acc[r][i])
			}
		}
	}
	ADDQ(U32(4), pl)
	ADDQ(ldv, vr)
	DECQ(jc)
	JNZ(LabelRef(lbl))

	// Store the O tile.
	var wm VecVirtual
	if window {
		wm = windowMaskD()
	}
	row := g.oRows(window)
	for r := range acc {
		m := row(r)
		for i := 0; i < c; i++ {
			switch {
			case window:
				VMASKMOVPS(acc[r][i], wm, m)
			case tail:
				VMOVUPS(acc[r][i], g.kmask, m)
			default:
				VMOVUPS(acc[r][i], m.Offset((first+i)*L*4))
			}
		}
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
