package main

import "fmt"

// The accum kernels of decode (see decode.go): O += P·V for a few query
// rows over n value rows of a KV cache read in place.

// accumKeyBlock is the number of keys whose V rows one pass keeps in L1
// while it sweeps O's columns.
const accumKeyBlock = 32

// General-purpose registers of the accum kernels.
const (
	acO    = "R0"  // O
	acLdo  = "R1"  // ldo in bytes
	acP    = "R2"  // P
	acLdp  = "R3"  // ldp in bytes
	acV    = "R4"  // V
	acLdv  = "R5"  // ldv in bytes
	acN    = "R6"  // keys left
	acD    = "R7"  // d
	acPBlk = "R9"  // P at the key block's first key
	acVBlk = "R10" // the key block's first V row
	acNB   = "R11" // keys in the block
	acCols = "R12" // columns (q8_0, q4_0: blocks of 32 columns) left in the block's sweep
	acOOff = "R13" // byte offset of the chunk's columns in O's rows
	acVOff = "R14" // byte offset of the chunk's columns (q8_0, q4_0: block) in V's rows
	acPCur = "R15" // P at the current key
	acT    = "R16" // scratch: O's or P's row; the block's bytes of V
	acVp   = "R17" // the current key's V row
	acKl   = "R19" // keys left in the chunk's pass
	acT2   = "R20" // scratch of the loads
)

// accumCols is the number of vectors of O's columns a chunk of the accum
// kernel for mr rows holds (cw of the main chunks).
func accumCols(mr int) int {
	switch mr {
	case 1, 2:
		return 8
	case 4:
		return 4
	}
	return 2
}

// genAccum emits accum<T>M<mr>NEON: for each block of accumKeyBlock keys,
// a sweep over O's columns in chunks, each chunk a pass over the block's
// keys.
func genAccum(f *file, e delem, mr int) {
	a := accumKernel{f: f, e: e, mr: mr, cwMain: accumCols(mr)}
	a.entry()
	a.blockStart()
	if e.quant() {
		a.qChunks()
	} else {
		a.elemChunks()
	}
	a.blockNext()
	f.ret()
}

// accumKernel is an accum kernel being generated: cache element e, mr
// query rows, cwMain vectors of columns per main chunk.
type accumKernel struct {
	f      *file
	e      delem
	mr     int
	cwMain int
}

// pr holds P[r][j..j+4) (or P[r][j] in lane 0).
func (a accumKernel) pr(r int) V { return V(8 + r) }

// sc holds the block scale of the current V row (q8_0, q4_0): past the P
// rows, or for mr = 8 past the values of the main chunk.
func (a accumKernel) sc() V {
	if a.mr == 8 {
		return V(a.cwMain)
	}
	return V(8 + a.mr)
}

// q4Regs are the registers of q4Codes' constants: v14, v15 (free for mr
// <= 4: the P rows and the scale end at v12), or v6, v7 for mr = 8 (the
// P rows fill v8-v15; its chunks use v0-v2).
func (a accumKernel) q4Regs() (mask, eight V) {
	if a.mr == 8 {
		return 6, 7
	}
	return 14, 15
}

// entry starts the kernel: its signature and doc, the arguments in their
// registers (strides in bytes) and the first key block.
func (a accumKernel) entry() {
	f, e := a.f, a.e
	name := fmt.Sprintf("accum%sM%dNEON", e.name, a.mr)
	f.text(name, fmt.Sprintf("func(o []float32, ldo int, p []float32, ldp int, v []%s, ldv, n, d int)", e.goType),
		fmt.Sprintf("%s adds Σ_j p[r*ldp+j]·v[j*ldv+c] to o[r*ldo+c] for r < %d, c < d, j < n;", name, a.mr),
		cacheDoc(e, "ldv", "value"))
	f.ld(acO, "o", "base")
	f.ldStride(acLdo, "ldo", 4)
	f.ld(acP, "p", "base")
	f.ldStride(acLdp, "ldp", 4)
	f.ld(acV, "v", "base")
	f.ldStride(acLdv, "ldv", e.size)
	f.ld(acN, "n", "")
	f.ld(acD, "d", "")
	if e.bits == 4 {
		f.q4Consts(a.q4Regs())
	}
	if e.size == 1 {
		// fp8: the scratch in the scale's register, the constants in
		// q4_0's (both unused by a format without blocks).
		nan, k256 := a.q4Regs()
		f.fp8 = fp8Regs{t: a.sc(), nan: nan, k256: k256}
		f.fp8Consts(f.fp8)
	}
	f.i("MOVD %s, %s", acP, acPBlk)
	f.i("MOVD %s, %s", acV, acVBlk)
}

// blockStart begins a key block: min(n, accumKeyBlock) keys, the sweep
// over O's columns from column 0.
func (a accumKernel) blockStart() {
	f := a.f
	f.label("block")
	f.i("MOVD $%d, %s", accumKeyBlock, acNB)
	f.i("CMP %s, %s", acNB, acN)
	f.i("CSEL LT, %s, %s, %s", acN, acNB, acNB)
	f.i("MOVD %s, %s", acD, acCols)
	f.i("MOVD ZR, %s", acOOff)
	f.i("MOVD ZR, %s", acVOff)
}

// qChunks sweeps a q8_0 or q4_0 cache's columns block by block (32
// columns; 34 or 18 bytes), each block in 32/(4·cwMain) chunks.
func (a accumKernel) qChunks() {
	f := a.f
	label := map[int]string{8: "q8Block", 4: "q4Block"}[a.e.bits]
	f.i("LSR $5, %s, %s", acD, acCols) // blocks
	f.label(label)
	subs := qValues / (4 * a.cwMain)
	for h := 0; h < subs; h++ {
		a.chunk(a.cwMain, 4*a.cwMain*h, fmt.Sprintf("c%d", h)).emit()
		f.i("ADD $%d, %s", 16*a.cwMain, acOOff)
	}
	f.i("ADD $%d, %s", a.e.blockBytes(), acVOff)
	f.i("SUBS $1, %s, %s", acCols, acCols)
	f.i("BNE %s", label)
}

// elemChunks sweeps a float32 or 16-bit cache's columns: chunks of
// cwMain vectors while they fit, then one of each smaller power of two,
// then single columns.
func (a accumKernel) elemChunks() {
	f, e := a.f, a.e
	for cw := a.cwMain; cw >= 1; cw /= 2 {
		tag := fmt.Sprintf("w%d", cw)
		f.label(tag + "Chunk")
		f.i("CMP $%d, %s", 4*cw, acCols)
		f.i("BLT %sDone", tag)
		a.chunk(cw, 0, tag).emit()
		f.i("ADD $%d, %s", 16*cw, acOOff)
		f.i("ADD $%d, %s", 4*cw*e.size, acVOff)
		f.i("SUB $%d, %s", 4*cw, acCols)
		if cw == a.cwMain {
			f.i("B %sChunk", tag)
		}
		f.label(tag + "Done")
	}
	f.label("colOne")
	f.i("CBZ %s, blockNext", acCols)
	a.chunk(0, 0, "one").emit()
	f.i("ADD $4, %s", acOOff)
	f.i("ADD $%d, %s", e.size, acVOff)
	f.i("SUB $1, %s", acCols)
	f.i("B colOne")
}

// blockNext moves P, V and the key count past the block and loops.
func (a accumKernel) blockNext() {
	f := a.f
	f.label("blockNext")
	f.i("ADD %s<<2, %s, %s", acNB, acPBlk, acPBlk)
	f.i("MUL %s, %s, %s", acNB, acLdv, acT)
	f.i("ADD %s, %s", acT, acVBlk)
	f.i("SUBS %s, %s, %s", acNB, acN, acN)
	f.i("BNE block")
}

// accumChunk is one pass over the block's keys for cw vectors of O's
// columns (cw 0: one column) at O byte offset acOOff and cache offset
// acVOff (q8_0, q4_0: the block at acVOff, from its value vi on), its
// labels prefixed by tag. Its vector registers: the V row's values in
// v0-v7, P in v8.., the accumulators from v16.
type accumChunk struct {
	accumKernel
	cw, nv int // nv = max(cw, 1) vectors per row
	vi     int
	tag    string
}

// chunk is the pass for cw vectors of columns (0: one column) whose values
// start at value vi of a q8_0 or q4_0 block, its labels prefixed by tag.
func (a accumKernel) chunk(cw, vi int, tag string) accumChunk {
	return accumChunk{a, cw, max(cw, 1), vi, tag}
}

// acc is the accumulator of row r, column vector v.
func (c accumChunk) acc(r, v int) V { return V(16 + r*c.nv + v) }

// dv holds column vector v of the current V row.
func (c accumChunk) dv(v int) V { return V(v) }

// emit emits the pass: O's tile into the accumulators, the keys four at a
// time (for cw > 0) then one at a time, the tile back to O.
func (c accumChunk) emit() {
	f := c.f
	c.oTile(false)
	f.i("MOVD %s, %s", acPBlk, acPCur)
	f.i("ADD %s, %s, %s", acVOff, acVBlk, acVp)
	f.i("MOVD %s, %s", acNB, acKl)
	if c.cw > 0 {
		c.keys4()
	}
	c.keys1()
	f.label(c.tag + "Store")
	c.oTile(true)
}

// keys4 emits the loop over four keys at a time: P's four columns per row
// by one load, each key's products by element of lane l.
func (c accumChunk) keys4() {
	f := c.f
	f.label(c.tag + "K4")
	f.i("CMP $4, %s", acKl)
	f.i("BLT %sK1", c.tag)
	c.pLoad(4)
	for l := 0; l < 4; l++ {
		c.value()
		c.products(l)
	}
	f.i("SUB $4, %s", acKl)
	f.i("B %sK4", c.tag)
}

// keys1 emits the loop over the keys left one at a time.
func (c accumChunk) keys1() {
	f := c.f
	f.label(c.tag + "K1")
	f.i("CBZ %s, %sStore", acKl, c.tag)
	c.pLoad(1)
	c.value()
	c.products(0)
	f.i("SUB $1, %s", acKl)
	f.i("B %sK1", c.tag)
}

// products adds the V row times lane l of each row's P to the
// accumulators.
func (c accumChunk) products(l int) {
	for v := 0; v < c.nv; v++ {
		for r := 0; r < c.mr; r++ {
			c.f.w(fmlaE(c.acc(r, v), c.dv(v), c.pr(r), l))
		}
	}
}

// oTile loads (store: stores) the chunk's mr×nv tile of O at acO + acOOff
// into (from) the accumulators.
func (c accumChunk) oTile(store bool) {
	f := c.f
	f.i("ADD %s, %s, %s", acOOff, acO, acT)
	for r := 0; r < c.mr; r++ {
		for v := 0; v < c.nv; {
			v += c.oMove(store, r, v)
		}
		if r < c.mr-1 {
			f.i("ADD %s, %s", acLdo, acT)
		}
	}
}

// oMove loads (stores) row r's accumulators from column vector v on from
// (to) O's row at acT: one float (cw 0), a pair of vectors or one vector.
// It returns the number of accumulators moved.
func (c accumChunk) oMove(store bool, r, v int) int {
	f := c.f
	switch {
	case c.cw == 0 && store:
		f.i("FMOVS F%d, (%s)", c.acc(r, 0), acT)
	case c.cw == 0:
		f.i("FMOVS (%s), F%d", acT, c.acc(r, 0))
	case c.nv-v >= 2 && store:
		f.i("FSTPQ (F%d, F%d), %d(%s)", c.acc(r, v), c.acc(r, v+1), 16*v, acT)
		return 2
	case c.nv-v >= 2:
		f.i("FLDPQ %d(%s), (F%d, F%d)", 16*v, acT, c.acc(r, v), c.acc(r, v+1))
		return 2
	case store:
		f.i("FMOVQ F%d, %d(%s)", c.acc(r, v), 16*v, acT)
	default:
		f.i("FMOVQ %d(%s), F%d", 16*v, acT, c.acc(r, v))
	}
	return 1
}

// pLoad loads P[r][j..j+cnt) (cnt 4 or 1) of every row and advances P.
func (c accumChunk) pLoad(cnt int) {
	f := c.f
	f.i("MOVD %s, %s", acPCur, acT)
	for r := 0; r < c.mr; r++ {
		if cnt == 4 {
			f.i("FMOVQ (%s), F%d", acT, c.pr(r))
		} else {
			f.i("FMOVS (%s), F%d", acT, c.pr(r))
		}
		if r < c.mr-1 {
			f.i("ADD %s, %s", acLdp, acT)
		}
	}
	f.i("ADD $%d, %s", 4*cnt, acPCur)
}

// value loads the chunk's columns of the V row at acVp as float32 into
// dv(0..nv) and advances acVp to the next row.
func (c accumChunk) value() {
	switch {
	case c.e.bits == 8:
		c.valueQ8()
	case c.e.bits == 4:
		c.valueQ4()
	case c.cw == 0:
		c.f.loadElems(c.e, []V{c.dv(0)}, acVp, 0, 0, 1, acT2)
	case c.e.size == 4:
		c.valueF32()
	case c.e.size == 1:
		c.value8()
	default:
		c.value16()
	}
	c.f.i("ADD %s, %s", acLdv, acVp)
}

// valueQ8 loads nv·4 int8 values from value vi of the row's block,
// widened and multiplied by the block's scale.
func (c accumChunk) valueQ8() {
	f, sc := c.f, c.sc()
	voff := 2 + c.vi
	f.loadQ8Scale(sc, fmt.Sprintf("(%s)", acVp), acT2)
	switch c.nv {
	case 8:
		f.i("FMOVQ %d(%s), F%d", voff, acVp, c.dv(2))
		f.i("FMOVQ %d(%s), F%d", voff+16, acVp, c.dv(6))
		f.widenQ8([]V{0, 1, 2, 3}, 4, sc)
		f.widenQ8([]V{4, 5, 6, 7}, 4, sc)
	case 4:
		f.i("FMOVQ %d(%s), F%d", voff, acVp, c.dv(2))
		f.widenQ8([]V{0, 1, 2, 3}, 4, sc)
	case 2:
		f.i("FMOVD %d(%s), F%d", voff, acVp, c.dv(0))
		f.widenQ8([]V{0, 1}, 2, sc)
	}
}

// valueQ4 loads the nv·4 values from value vi of the row's q4_0 block:
// value j < 16 is the low nibble of code byte j, value j+16 its high
// nibble. All 32 (nv = 8): the 16 code bytes once, low nibbles into v2
// and high ones into v6. 16 (nv = 4): the 16 bytes, one nibble. 8 (nv =
// 2): 8 of the bytes (0-7 or 8-15), one nibble. Then as q8_0's int8.
func (c accumChunk) valueQ4() {
	f, sc := c.f, c.sc()
	mask, eight := c.q4Regs()
	f.loadQ8Scale(sc, fmt.Sprintf("(%s)", acVp), acT2)
	high := c.vi >= 16
	switch c.nv {
	case 8:
		f.i("FMOVQ 2(%s), F%d", acVp, c.dv(6))
		f.q4Codes(c.dv(2), c.dv(6), false, mask, eight)
		f.q4Codes(c.dv(6), c.dv(6), true, mask, eight)
		f.widenQ8([]V{0, 1, 2, 3}, 4, sc)
		f.widenQ8([]V{4, 5, 6, 7}, 4, sc)
	case 4:
		f.i("FMOVQ 2(%s), F%d", acVp, c.dv(2))
		f.q4Codes(c.dv(2), c.dv(2), high, mask, eight)
		f.widenQ8([]V{0, 1, 2, 3}, 4, sc)
	case 2:
		f.i("FMOVD %d(%s), F%d", 2+c.vi%16, acVp, c.dv(0))
		f.q4Codes(c.dv(0), c.dv(0), high, mask, eight)
		f.widenQ8([]V{0, 1}, 2, sc)
	}
}

// valueF32 loads nv vectors of float32, by pairs.
func (c accumChunk) valueF32() {
	for v := 0; v < c.nv; v += 2 {
		if c.nv-v >= 2 {
			c.f.i("FLDPQ %d(%s), (F%d, F%d)", 16*v, acVp, c.dv(v), c.dv(v+1))
		} else {
			c.f.i("FMOVQ %d(%s), F%d", 16*v, acVp, c.dv(v))
		}
	}
}

// value8 loads nv·4 fp8 values, 8 bytes into each even register (4 for
// nv = 1), widened into it and the next.
func (c accumChunk) value8() {
	f, dv := c.f, c.dv
	if c.nv == 1 {
		f.i("FMOVS (%s), F%d", acVp, dv(0))
		f.widenFP8(c.e, []V{dv(0)}, 4)
		return
	}
	for v := 0; v < c.nv; v += 2 {
		f.i("FMOVD %d(%s), F%d", 4*v, acVp, dv(v))
		f.widenFP8(c.e, []V{dv(v), dv(v + 1)}, 8)
	}
}

// value16 loads nv·4 16-bit values: raw into the even registers, then
// widened in place (the high halves into the odd ones).
func (c accumChunk) value16() {
	f, dv := c.f, c.dv
	switch c.nv {
	case 8:
		f.i("FLDPQ (%s), (F%d, F%d)", acVp, dv(0), dv(2))
		f.i("FLDPQ 32(%s), (F%d, F%d)", acVp, dv(4), dv(6))
	case 4:
		f.i("FLDPQ (%s), (F%d, F%d)", acVp, dv(0), dv(2))
	case 2:
		f.i("FMOVQ (%s), F%d", acVp, dv(0))
	case 1:
		f.i("FMOVD (%s), F%d", acVp, dv(0))
	}
	if c.nv == 1 {
		f.widen16(c.e, dv(0), dv(0), false)
	}
	for v := 0; v+1 < c.nv; v += 2 {
		f.widen16(c.e, dv(v+1), dv(v), true)
		f.widen16(c.e, dv(v), dv(v), false)
	}
}
