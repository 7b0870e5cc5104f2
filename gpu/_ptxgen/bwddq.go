package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// dqAtomic is the state of the atomic dQ part of the dK/dV kernel: warp w
// computes query rows 32·(w % DQRowGroups) (two m-tiles) and columns
// cw = (w / DQRowGroups)·DQCols (+DQCols) of dQ = dS·K.
type dqAtomic struct {
	acc   [2][][4]string // [mt]: the warp's 32 × DQCols products
	dsA   [2]string      // lane offsets of A = dS from the dSᵀ tile, per m-tile
	kBase string         // shared address the lane offsets of B = K add to
	kB    []string       // lane offsets of B = K, per 16-column block of the warp
	kOff  []int          // and their constant parts
	addr  string         // .u64: dq_acc address of row (warp rows + g), column cw + 2t
	rowB  string         // .u32: dq_acc row stride in bytes
	rows8 string         // .u64: 8 rows in bytes
}

func (f *bwdKernel) newDQAtomic() dqAtomic {
	k, c := f.k, f.c
	var d dqAtomic
	wm := k.rOp("and.b32", f.warp, imm(c.DQRowGroups()-1))
	wc := k.rOp("shr.u32", f.warp, imm(log2(c.DQRowGroups())))
	for mt := range 2 {
		d.acc[mt] = f.regs4(c.DQCols() / 8)
		// A = dS (queries × keys) is the stored dSᵀ (keys × queries)
		// through LaneATrans: block origin (kk·16 keys, 32·wm + 16·mt
		// queries), chunk 4·wm + 2·mt.
		d.dsA[mt] = f.laneOffCol(tile.PatternColMajor, c.Br/8, k.rOp("mad.lo.u32", wm, "4", imm(2*mt)))
	}
	cw8 := k.rOp("mul.lo.u32", wc, imm(c.DQCols()/8))
	d.kBase = f.smem
	for jl := range c.DQCols() / 16 {
		if c.DQCols()%64 == 0 {
			// The warp's columns start at a whole swizzle group of 8
			// chunks: row-major lane offsets on a per-warp base.
			d.kB = append(d.kB, f.laneOff(tile.PatternRowMajor, c.RowChunks(), jl&3))
			d.kOff = append(d.kOff, (2*jl)&^7*tile.ChunkBytes)
			continue
		}
		c8 := k.rOp("add.u32", cw8, imm(2*jl))
		d.kB = append(d.kB, f.laneOffCol(tile.PatternRowMajor, c.RowChunks(), c8))
		d.kOff = append(d.kOff, 0)
	}
	if c.DQCols()%64 == 0 {
		d.kBase = k.rOp("mad.lo.u32", cw8, imm(tile.ChunkBytes), f.smem)
	}
	dqRS := f.ld(".u32", "dq_rs")
	base := f.rowBase("dq_acc", f.b, "dq_bs", f.s.qStart, dqRS, f.h, c.D, 4)
	d.rowB = k.rOp("shl.b32", dqRS, "2")
	row := k.rOp("mad.lo.u32", wm, "32", f.g)
	col := k.rOp("mad.lo.u32", cw8, "8", k.rOp("shl.b32", f.t, "1"))
	base = k.rdOp("add.s64", base, k.rdOp("mul.wide.u32", col, "4"))
	d.addr = k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", d.addr, row, d.rowB, base)
	d.rows8 = k.rdOp("mul.wide.u32", d.rowB, "8")
	return d
}

// accumulateDQ (after stagePDS and a barrier) adds the warp's part of
// dQ = dS·K for query block rows [m0, m0+Br) to the padded float32
// accumulator: every row of the block exists there, so the atomics need no
// predicate (rows past sq receive zeros).
func (f *bwdKernel) accumulateDQ(m0 string) {
	k, c, d := f.k, f.c, f.dq
	k.comment("dQ += dS K with atomics")
	for kk := range c.Bc() / 16 {
		var sa [2][4]string
		for mt := range 2 {
			sa[mt] = f.ldsmAt(f.smem, d.dsA[mt], c.DSOff()+tile.BlockBase(kk*16, 0, c.Br/8), true)
		}
		for jl, lane := range d.kB {
			kb := f.ldsmAt(d.kBase, lane, d.kOff[jl]+c.KOff()+tile.BlockBase(kk*16, 0, c.RowChunks()), true)
			for mt := range 2 {
				f.mma16(d.acc[mt][2*jl:], sa[mt], kb, kk == 0)
			}
		}
	}
	a := k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", a, m0, d.rowB, d.addr)
	for mt := range 2 {
		for rh := range 2 {
			if mt+rh > 0 {
				a = k.rdOp("add.s64", a, d.rows8)
			}
			for j := range d.acc[mt] {
				for e := range 2 {
					k.op("red.global.add.f32 [%s+%d], %s", a, 32*j+4*e, d.acc[mt][j][2*rh+e])
				}
			}
		}
	}
}
