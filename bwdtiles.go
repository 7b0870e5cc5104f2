package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// bwdtiles.go holds the backward's tile products for both number paths:
// float32 kernels, or native 16-bit products (plan.native) on operands
// packed in the VNNI pair layout (see internal/kernel.Half). The softmax
// part (gradRow) is float32 either way; P̃ and dS are rounded to the type
// before they multiply, so both paths compute the same-type algorithm.

// queryTileNative packs rows [i0, i1) of head h's Q and dO for the native
// products: as A operands (ws.qh, ws.doh: rows of even(dim), zero padded)
// and as B operands (ws.qV, ws.doV: VNNI with k = the rows).
func (b *backwardPass) queryTileNative(ws *workspace, s *sequence, h, i0, i1 int) {
	p := b.p
	m, d, de := i1-i0, p.dim, even(p.dim)
	me := even(m)
	for _, t := range []struct {
		v       view
		a, bv   *[]uint16
		scratch *[]float32
	}{{p.q, &ws.qh, &ws.qV, &ws.convK}, {b.grads.do, &ws.doh, &ws.doV, &ws.convV}} {
		a := grow(t.a, m*de)
		packVNNIRows(p, t.v, t.scratch, s.tb, s.q0+i0, h, grow(t.bv, p.dimPad*me), kernel.W*me, 0, m, d, false)
		if t.v.dt == p.ct {
			src, ld := t.v.rows16(s.tb, s.q0+i0, h)
			for r := 0; r < m; r++ {
				copy(a[r*de:r*de+d], src[r*ld:r*ld+d])
				if d%2 != 0 {
					a[r*de+d] = 0 // the pad column
				}
			}
			continue
		}
		rows, ld := t.v.rows(t.scratch, s.tb, s.q0+i0, h, m, p.ct, &p.kern)
		for r := 0; r < m; r++ {
			a[r*de+de-1] = 0
			toHalf(&p.kern, p.ct, a[r*de:r*de+d], rows[r*ld:r*ld+d])
		}
	}
}

// tileScores computes S = Q·Kᵀ (ws.s) and dP = dO·Vᵀ (ws.dP) for the m
// query rows qp, dop (padded to dimPad) against the KV block kt of n keys.
func (b *backwardPass) tileScores(ws *workspace, kt *bwdTile, m, n int, qp, dop []float32) {
	p := b.p
	k := &p.kern
	dp, np := p.dimPad, kernel.Pad(n)
	if !p.native {
		k.MulABt(ws.s, np, qp, dp, kt.kt, m, np, p.dim)
		k.MulABt(ws.dP, np, dop, dp, kt.vt, m, np, p.dim)
		return
	}
	// Q and dO were packed by queryTileNative.
	de := even(p.dim)
	p.half.Mul(ws.s, np, ws.qh, de, kt.ktH, kernel.W*de, m, np, de)
	p.half.Mul(ws.dP, np, ws.doh, de, kt.vtH, kernel.W*de, m, np, de)
}

// tileGrads adds the products of one tile: dV += P̃ᵀ·dO and dK += dSᵀ·Q
// into dv, dk (n × dimPad), and dQ += dS·K into dq (m rows of dimPad) when
// dq is not nil.
func (b *backwardPass) tileGrads(ws *workspace, kt *bwdTile, m, n int, qp, dop, dv, dk, dq []float32) {
	p := b.p
	k := &p.kern
	dp, np := p.dimPad, kernel.Pad(n)
	pmat := ws.s
	if p.dropOn {
		pmat = ws.pDrop
	}
	if dq != nil {
		b.dqProduct(ws, kt, m, n, dq)
	}
	if !p.native {
		k.MulAddAtB(dv, dp, pmat, np, dop, dp, n, dp, m)
		k.MulAddAtB(dk, dp, ws.dP, np, qp, dp, n, dp, m)
		return
	}
	e, me := p.ct.elem(), even(m)
	// Q and dO as B operands (k = the m rows, packed by queryTileNative),
	// Pᵀ and dSᵀ as A operands.
	qv, dov := ws.qV, ws.doV
	pt, dst := grow(&ws.pT, n*me), grow(&ws.dsT, n*me)
	k.TransposeRound(pt, me, pmat, np, m, n, e)
	k.TransposeRound(dst, me, ws.dP, np, m, n, e)
	if m%2 != 0 {
		for j := 0; j < n; j++ {
			pt[j*me+m], dst[j*me+m] = 0, 0
		}
	}
	p.half.MulAdd(dv, dp, pt, me, dov, kernel.W*me, n, dp, me)
	p.half.MulAdd(dk, dp, dst, me, qv, kernel.W*me, n, dp, me)
}

// dqProduct adds dS·K (the tile's m rows against the KV block kt of n keys)
// to dq.
func (b *backwardPass) dqProduct(ws *workspace, kt *bwdTile, m, n int, dq []float32) {
	p := b.p
	dp, np := p.dimPad, kernel.Pad(n)
	if !p.native {
		p.kern.MulAddAB(dq, dp, ws.dP, np, kt.kp, dp, m, dp, n)
		return
	}
	ne := even(n)
	dsh := grow(&ws.dsH, m*ne)
	for r := 0; r < m; r++ {
		toHalf(&p.kern, p.ct, dsh[r*ne:(r+1)*ne], ws.dP[r*np:r*np+ne])
	}
	p.half.MulAdd(dq, dp, dsh, ne, kt.kpH, kt.ldbK, m, dp, ne)
}
