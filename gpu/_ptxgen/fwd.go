package main

import (
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// forward generates the FlashAttention-2 forward kernel (one block per
// (query block, head, batch element); the block's warps split the query
// rows; K/V tiles double-buffered in shared memory with cp.async; S = Q·Kᵀ
// and O += P·V on the tensor cores; online softmax in registers in log2
// units; O divided by the row sum once at the end; LSE written in natural
// log units).
func forward(dt dtype, c tile.Fwd) *Kernel {
	k := newKernel(c.Name(dt.name), tile.Threads)
	g := newGen(k, dt)
	g.declare(tile.FwdParams)
	D, Bc, MT, Br, rc := c.D, c.Bc, c.MT, c.Br(), c.RowChunks()
	nt := Bc / 8 // key n-tiles per S row block
	dnt := D / 8 // n-tiles of O

	mb := k.rOp("mov.u32", "%ctaid.x")
	h := k.rOp("mov.u32", "%ctaid.y")
	b := k.rOp("mov.u32", "%ctaid.z")
	s := g.seq(b, "p_cu_q", "p_cu_k", "p_used_k", "p_sq", "p_sk")
	m0 := k.rOp("mul.lo.u32", mb, imm(Br))
	done := k.newLabel("done")
	out := k.pOp("setp.ge.u32", m0, s.sq)
	k.op("@%s bra %s", out, done)

	group := g.ld(".u32", "group")
	kh := k.rOp("div.u32", h, group)
	qRS, kRS, oRS := g.ld(".u32", "q_rs"), g.ld(".u32", "k_rs"), g.ld(".u32", "o_rs")
	qBase := g.rowBase("p_q", b, "p_q_bs", s.qStart, qRS, h, D, 2)
	kBase := g.rowBase("p_k", b, "p_k_bs", s.kStart, kRS, kh, D, 2)
	vBase := g.rowBase("p_v", b, "p_k_bs", s.kStart, kRS, kh, D, 2)
	oBase := g.rowBase("p_o", b, "p_o_bs", s.qStart, oRS, h, D, 2)
	qRB := k.rOp("shl.b32", qRS, "1")
	kRB := k.rOp("shl.b32", kRS, "1")
	oRB := k.rOp("shl.b32", oRS, "1")
	mask := g.loadMask("p_left", "p_right")
	sc := g.loadScore("p_scale_log2", "p_cap_scale", "p_cap_log2")
	nlo, nhi := g.keyBlocks(mask, s, m0, Br, Bc)

	// Per-thread state: O accumulators, row max (log2 units) and partial
	// row sums for rows g and g+8 of each m-tile.
	k.comment("accumulators")
	o := make([][][4]string, MT)
	mrow := make([][2]string, MT)
	lrow := make([][2]string, MT)
	for mt := range MT {
		o[mt] = g.acc4(dnt)
		for rh := range 2 {
			mrow[mt][rh] = k.F()
			k.op("mov.f32 %s, %s", mrow[mt][rh], negInf)
			lrow[mt][rh] = k.F()
			k.op("mov.f32 %s, %s", lrow[mt][rh], zeroF)
		}
	}
	// The warp's Q rows (base address of its first m-tile) and this
	// thread's rows m0 + wrow + mt*16 + g + 8*rh, needed by the epilogue
	// too: computed before the branch to it.
	wrow := k.rOp("mul.lo.u32", g.warp, imm(MT*16))
	qW := k.rOp("mad.lo.u32", wrow, imm(rc*tile.ChunkBytes), g.smem)
	rowBase := k.rOp("add.u32", m0, wrow)
	rowBase = k.rOp("add.u32", rowBase, g.g)
	colOff := k.rOp("shl.b32", g.t, "1") // 2t

	epi := k.newLabel("epilogue")
	empty := k.pOp("setp.ge.s32", nlo, nhi)
	k.op("@%s bra %s", empty, epi)

	// Prologue: Q (group 0), then K/V tile nlo into stage 0 (group 1).
	qCopy := g.newTileCopy(Br, rc)
	kvCopy := g.newTileCopy(Bc, rc)
	loadKV := g.kvLoader(kvCopy, kBase, vBase, kRB, s, c.KOff(0), c.VOff(0))
	g.issue(qCopy, qBase, qRB, m0, s.sq, g.smem, c.QOff())
	k.op("cp.async.commit_group")
	loadKV(nlo, g.smem)
	k.op("cp.async.commit_group")

	var qf [][][4]string // [mt][ks]
	if c.QInRegs() {
		k.op("cp.async.wait_group 1")
		k.op("bar.sync 0")
		qf = make([][][4]string, MT)
		for mt := range MT {
			for ks := 0; ks < D/16; ks++ {
				qf[mt] = append(qf[mt], g.ldsm(qW, c.QOff(), rc, tile.PatternRowMajor, mt*16, ks*16, false))
			}
		}
	}

	loop := g.newLoop(nlo, c.KOff(1)-c.KOff(0))
	S := make([][][4]string, MT)
	for mt := range MT {
		S[mt] = make([][4]string, nt)
		for j := range nt {
			for i := range 4 {
				S[mt][j][i] = k.F()
			}
		}
	}

	g.top(loop, nhi, loadKV)

	// S = Q·Kᵀ for the warp's rows and the tile's Bc keys.
	k.comment("S = Q K^T")
	sb := k.rOp("add.u32", g.smem, loop.stage)
	g.zeroAcc(flat(S))
	for ks := 0; ks < D/16; ks++ {
		a := make([][4]string, MT)
		for mt := range MT {
			if qf != nil {
				a[mt] = qf[mt][ks]
			} else {
				a[mt] = g.ldsm(qW, c.QOff(), rc, tile.PatternRowMajor, mt*16, ks*16, false)
			}
		}
		for j := 0; j < Bc/16; j++ {
			kb := g.ldsm(sb, c.KOff(0), rc, tile.PatternColMajor, j*16, ks*16, false)
			for mt := range MT {
				g.mma16(S[mt][2*j:], a[mt], kb)
			}
		}
	}

	// Scores in log2 units, then the mask where the tile needs one.
	g.scoreTransform(sc, flat(S))
	nk0 := k.rOp("shl.b32", loop.n, imm(log2(Bc)))
	need := g.needsMask(mask, s, m0, nk0, Br, Bc)
	nomask := k.newLabel("nomask")
	k.op("@!%s bra %s", need, nomask)
	k.comment("mask")
	colBase := k.rOp("add.u32", nk0, colOff)
	for mt := range MT {
		for rh := range 2 {
			row := k.rOp("add.u32", rowBase, imm(mt*16+8*rh))
			lo, hi := g.rowBounds(mask, s, row, colBase)
			for j := range nt {
				for e := range 2 {
					g.maskElem(S[mt][j][2*rh+e], lo, hi, 8*j+e)
				}
			}
		}
	}
	k.label(nomask)

	// Online softmax.
	k.comment("online softmax")
	for mt := range MT {
		for rh := range 2 {
			x := S[mt][0][2*rh]
			for j := range nt {
				for e := range 2 {
					if j == 0 && e == 0 {
						continue
					}
					x = k.fOp("max.f32", x, S[mt][j][2*rh+e])
				}
			}
			x = g.shflReduce(x, "max.f32", 1, 2)
			mnew := k.fOp("max.f32", mrow[mt][rh], x)
			isInf := k.pOp("setp.eq.f32", mnew, negInf)
			muse := k.fOp("selp.f32", zeroF, mnew, isInf)
			alpha := k.fOp("sub.f32", mrow[mt][rh], muse)
			alpha = k.fOp("ex2.approx.ftz.f32", alpha)
			k.op("mov.f32 %s, %s", mrow[mt][rh], mnew)
			var sum string
			for j := range nt {
				for e := range 2 {
					v := S[mt][j][2*rh+e]
					k.op("sub.f32 %s, %s, %s", v, v, muse)
					k.op("ex2.approx.ftz.f32 %s, %s", v, v)
					if sum == "" {
						sum = k.fOp("mov.f32", v)
					} else {
						sum = k.fOp("add.f32", sum, v)
					}
				}
			}
			k.op("fma.rn.f32 %s, %s, %s, %s", lrow[mt][rh], lrow[mt][rh], alpha, sum)
			for j := range dnt {
				for e := range 2 {
					v := o[mt][j][2*rh+e]
					k.op("mul.f32 %s, %s, %s", v, v, alpha)
				}
			}
		}
	}

	// O += P·V with P from the S accumulators.
	k.comment("O += P V")
	for kk := 0; kk < Bc/16; kk++ {
		pa := make([][4]string, MT)
		for mt := range MT {
			pa[mt] = g.aFromC(S[mt], kk)
		}
		for j := 0; j < D/16; j++ {
			vb := g.ldsm(sb, c.VOff(0), rc, tile.PatternRowMajor, kk*16, j*16, true)
			for mt := range MT {
				g.mma16(o[mt][2*j:], pa[mt], vb)
			}
		}
	}
	g.bottom(loop)

	// Epilogue: O /= l, LSE = (m + log2 l)·ln 2; rows with no visible key
	// give O = 0 and LSE = -Inf.
	k.label(epi)
	k.comment("epilogue")
	lseP := g.ld(".u64", "lse")
	lseP = k.rdOp("cvta.to.global.u64", lseP)
	lseBS := g.ld(".u64", "lse_bs")
	lseHS := g.ld(".u32", "lse_hs")
	b64 := k.rdOp("cvt.u64.u32", b)
	li := k.rdOp("mul.lo.u64", b64, lseBS)
	lh := k.rdOp("mul.wide.u32", h, lseHS)
	li = k.rdOp("add.s64", li, lh)
	lq := k.rdOp("cvt.u64.u32", s.qStart)
	li = k.rdOp("add.s64", li, lq)
	li = k.rdOp("shl.b64", li, "2")
	lseP = k.rdOp("add.s64", lseP, li)
	t0 := k.pOp("setp.eq.u32", g.t, "0")
	colB := k.rdOp("mul.wide.u32", g.t, "4") // 2t elements = 4t bytes
	oT := k.rdOp("add.s64", oBase, colB)
	for mt := range MT {
		for rh := range 2 {
			l := g.shflReduce(lrow[mt][rh], "add.f32", 1, 2)
			zero := k.pOp("setp.eq.f32", l, zeroF)
			inv := k.fOp("rcp.rn.f32", l)
			k.op("selp.f32 %s, %s, %s, %s", inv, zeroF, inv, zero)
			isInf := k.pOp("setp.eq.f32", mrow[mt][rh], negInf)
			muse := k.fOp("selp.f32", zeroF, mrow[mt][rh], isInf)
			lse := k.fOp("lg2.approx.ftz.f32", l)
			lse = k.fOp("add.f32", lse, muse)
			lse = k.fOp("mul.f32", lse, fimm(float32(ln2)))
			k.op("selp.f32 %s, %s, %s, %s", lse, negInf, lse, zero)
			row := k.rOp("add.u32", rowBase, imm(mt*16+8*rh))
			ok := k.pOp("setp.lt.u32", row, s.sq)
			ra := k.RD()
			k.op("mad.wide.u32 %s, %s, %s, %s", ra, row, oRB, oT)
			for j := range dnt {
				v0 := k.fOp("mul.f32", o[mt][j][2*rh], inv)
				v1 := k.fOp("mul.f32", o[mt][j][2*rh+1], inv)
				p := g.pack(v0, v1)
				k.op("@%s st.global.b32 [%s+%d], %s", ok, ra, j*16, p)
			}
			okT := k.P()
			k.op("and.pred %s, %s, %s", okT, ok, t0)
			la := k.RD()
			k.op("mad.wide.u32 %s, %s, 4, %s", la, row, lseP)
			k.op("@%s st.global.f32 [%s], %s", okT, la, lse)
		}
	}
	k.label(done)
	k.op("ret")
	return k
}

// scoreTransform turns raw scores into log2 units in place: x·scale_log2, or
// cap_log2·tanh(x·cap_scale) when the softcap is on (a uniform branch).
func (g *gen) scoreTransform(sc scoreParams, regs [][4]string) {
	k := g.k
	capL := k.newLabel("softcap")
	doneL := k.newLabel("scored")
	k.op("@%s bra %s", sc.softcap, capL)
	for _, r := range regs {
		for _, v := range r {
			k.op("mul.f32 %s, %s, %s", v, v, sc.scaleLog2)
		}
	}
	k.op("bra.uni %s", doneL)
	k.label(capL)
	for _, r := range regs {
		for _, v := range r {
			a := k.fOp("mul.f32", v, sc.capScale)
			t := g.tanh(a)
			k.op("mul.f32 %s, %s, %s", v, t, sc.capLog2)
		}
	}
	k.label(doneL)
}

// flat lists the accumulators of all m-tiles.
func flat(a [][][4]string) [][4]string {
	var out [][4]string
	for _, x := range a {
		out = append(out, x...)
	}
	return out
}

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	if 1<<l != n {
		panic("not a power of two")
	}
	return l
}
