package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// dqAtomic is the state of the atomic dQ part of the dK/dV kernel: warp w
// computes query rows 16·(w % DQRowGroups) (+16) and columns
// cw = (w / DQRowGroups)·DQCols (+DQCols) of dQ = dS·K.
type dqAtomic struct {
	acc   [][4]string // the warp's 16 × DQCols products
	dsW   string      // shared address of the warp's dSᵀ rows (its 16 keys)
	dsA   string      // lane offset of A = dS from the dSᵀ tile
	kBase string      // shared address the lane offsets of B = K add to
	kB    []string    // lane offsets of B = K, per 16-column block of the warp
	kOff  []int       // and their constant parts
	addr  string      // .u64: dq_acc address of row (warp rows + g), column cw + 2t
	rowB  string      // .u32: dq_acc row stride in bytes
	rows8 string      // .u64: 8 rows in bytes
}

func (f *bwdKernel) newDQAtomic() dqAtomic {
	k, c := f.k, f.c
	var d dqAtomic
	d.acc = f.regs4(c.DQCols() / 8)
	d.dsW = k.rOp("mad.lo.u32", f.warp, imm(16*c.Br*2), f.smem)
	wm := k.rOp("and.b32", f.warp, imm(c.DQRowGroups()-1))
	wc := k.rOp("shr.u32", f.warp, imm(log2(c.DQRowGroups())))
	// A = dS (queries × keys) is the stored dSᵀ (keys × queries) through
	// LaneATrans: block origin (kk·16 keys, 16·wm queries), chunk 2·wm.
	d.dsA = f.laneOffCol(tile.PatternColMajor, c.Br/8, k.rOp("shl.b32", wm, "1"))
	cw8 := k.rOp("mul.lo.u32", wc, imm(c.DQCols()/8))
	d.kBase = f.smem
	for jl := range c.DQCols() / 16 {
		if c.DQCols()%64 == 0 {
			// The warp's columns start at a whole swizzle group of 8
			// chunks: the lane offsets gradKV uses too, on a per-warp base.
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
	row := k.rOp("mad.lo.u32", wm, "16", f.g)
	col := k.rOp("mad.lo.u32", cw8, "8", k.rOp("shl.b32", f.t, "1"))
	base = k.rdOp("add.s64", base, k.rdOp("mul.wide.u32", col, "4"))
	d.addr = k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", d.addr, row, d.rowB, base)
	d.rows8 = k.rdOp("mul.wide.u32", d.rowB, "8")
	return d
}

// stageDS stores the sub-tile's dSᵀ (queries [q0, q0+QSub)) to shared
// memory.
func (f *bwdKernel) stageDS(q0 int) {
	f.k.comment("dS^T to shared memory")
	f.stageRows(f.dPT, q0/8, nil, f.dq.dsW, f.c.DSOff(), f.c.Br/8)
}

// accumulateDQ (after stageDS of every sub-tile) adds, after a barrier, the
// warp's part of dQ = dS·K for query block rows [m0, m0+Br) to the padded
// float32 accumulator: every row of the block exists there, so the atomics
// need no predicate (rows past sq receive zeros).
func (f *bwdKernel) accumulateDQ(m0 string) {
	k, c, d := f.k, f.c, f.dq
	k.comment("dQ += dS K with atomics")
	k.op("bar.sync 0")
	for kk := range c.Bc() / 16 {
		sa := f.ldsmAt(f.smem, d.dsA, c.DSOff()+tile.BlockBase(kk*16, 0, c.Br/8), true)
		for jl, lane := range d.kB {
			kb := f.ldsmAt(d.kBase, lane, d.kOff[jl]+c.KOff()+tile.BlockBase(kk*16, 0, c.RowChunks()), true)
			f.mma16(d.acc[2*jl:], sa, kb, kk == 0)
		}
	}
	a := k.RD()
	k.op("mad.wide.u32 %s, %s, %s, %s", a, m0, d.rowB, d.addr)
	for rh := range 2 {
		if rh == 1 {
			a = k.rdOp("add.s64", a, d.rows8)
		}
		for j := range d.acc {
			for e := range 2 {
				k.op("red.global.add.f32 [%s+%d], %s", a, 32*j+4*e, d.acc[j][2*rh+e])
			}
		}
	}
}
