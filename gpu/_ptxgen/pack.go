package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// GQA packing (tile.FwdParams' pack): with pack > 1 a forward block serves
// pack query heads of one KV head as the rows of one query block, row r
// being head h0 + r/sq at position r%sq, so that every K/V tile it loads
// serves all of them. The host packs only when pack·sq rows fit the block,
// which then starts at row 0 and sees every position's keys: the key-block
// range and the mask thresholds of rows [0, Br) cover it. What depends on
// the row — the Q copy, the per-element mask, where O and LSE go — maps
// each row back to its head and position.

// packing is a block's packing as the code that maps rows back sees it:
// row r is at head offset hoff = r/sq = (r·pack_div) >> 16 and position
// r - hoff·sq, with sq the sq parameter (the longest sequence) and
// pack_div = ceil(2^16/sq), exact for r·sq < 2^16 (packed rows: r < 128,
// sq ≤ 64); pack_div = 0 (unpacked) gives hoff = 0, position r.
type packing struct {
	div  string // .u32: pack_div
	sq   string // .u32: the sq parameter, the positions per head
	rows string // .u32: pack·sq, the block's rows (not all valid in a shorter varlen sequence)
}

// loadPacking reads the packing parameters.
func (g *gen) loadPacking() packing {
	k := g.k
	p := packing{div: g.ld(".u32", "pack_div"), sq: g.ld(".u32", "sq")}
	p.rows = k.rOp("mul.lo.u32", g.ld(".u32", "pack"), p.sq)
	return p
}

// unpackRow returns row r's head offset and position (packing).
func (g *gen) unpackRow(p packing, r string) (hoff, pos string) {
	k := g.k
	hoff = k.rOp("mul.lo.u32", r, p.div)
	hoff = k.rOp("shr.u32", hoff, "16")
	pos = k.rOp("mul.lo.u32", hoff, p.sq)
	pos = k.rOp("sub.u32", r, pos)
	return hoff, pos
}

// validRow returns the predicate "row r exists": r < pack·sq and its
// position is below seqSq, its sequence's query rows.
func (g *gen) validRow(p packing, r, pos, seqSq string) string {
	k := g.k
	ok := k.pOp("setp.lt.u32", r, p.rows)
	k.op("setp.lt.and.u32 %s, %s, %s, %s", ok, pos, seqSq, ok)
	return ok
}

// rowElem returns the .u64 element offset of row r from row 0 of the
// block's first head in a layout with head stride hs (.u32 elements) and
// row stride 1, LSE's (hoff·hs + position), and whether the row exists.
func (g *gen) rowElem(p packing, r, hs, seqSq string) (elem, ok string) {
	k := g.k
	hoff, pos := g.unpackRow(p, r)
	e := k.rdOp("mul.wide.u32", hoff, hs)
	return k.rdOp("add.s64", e, k.rdOp("cvt.u64.u32", pos)), g.validRow(p, r, pos, seqSq)
}

// firstHead returns the first query head of the block whose grid y index
// is y: y·pack.
func (g *gen) firstHead(y string) string {
	return g.k.rOp("mul.lo.u32", y, g.ld(".u32", "pack"))
}

// copyPackedQ issues the thread's copies of a packed Q block (rows
// row0 + i·step of c from 0, i < c.n) into the tile at shared address
// c.soff + soffConst: row r from qBase (row 0 of the block's first head) +
// hoff·d·2 + position·rowBytes; rows that do not exist (validRow) are
// zero-filled (their copies point at qBase and read nothing). It is a loop,
// not unrolled: the block runs it once, and unrolled its addresses cost
// the d128 forward kernel a spill on sm_90.
func (g *gen) copyPackedQ(c *tileCopy, p packing, seqSq, qBase string, d, soffConst int) {
	k := g.k
	r := k.rOp("mov.u32", c.row0)
	end := k.rOp("add.u32", c.row0, imm(c.n*c.step))
	dst := k.rOp("add.u32", c.soff, imm(soffConst))
	loop := k.newLabel("qpacked")
	k.label(loop)
	hoff, pos := g.unpackRow(p, r)
	off := k.rOp("mad.lo.u32", hoff, imm(d*2), c.col) // < 2^17
	off = k.rOp("mad.lo.u32", pos, c.rowBytes, off)   // pos < 64, rowBytes < 2^25
	a := k.rdOp("add.s64", qBase, k.rdOp("cvt.u64.u32", off))
	ok := g.validRow(p, r, pos, seqSq)
	sz := k.rOp("selp.u32", "16", "0", ok)
	src := k.rdOp("selp.b64", a, qBase, ok)
	k.op("cp.async.cg.shared.global [%s], [%s], 16, %s", dst, src, sz)
	k.op("add.u32 %s, %s, %d", dst, dst, c.step*c.rc*tile.ChunkBytes)
	k.op("add.u32 %s, %s, %d", r, r, c.step)
	more := k.pOp("setp.lt.u32", r, end)
	k.op("@%s bra.uni %s", more, loop)
}
