package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// bwdtiles.go holds the backward's tile products for both number paths:
// float32 kernels, or native 16-bit products (plan.native) on operands
// packed in the VNNI pair layout (see internal/kernel.Half). The softmax
// part (gradRow) is float32 either way; P̃ and dS are rounded to the type
// before they multiply, so both paths compute the same-type algorithm.

// tileScores computes S = Q·Kᵀ (ws.bwd.s) and dP = dO·Vᵀ (ws.bwd.dP) for
// the m query rows of qt against the KV block blk of n keys.
func (b *backwardPass) tileScores(ws *workspace, blk *bwdTile, qt *qTile, m, n int) {
	b.tileS(ws, blk, qt, m, n)
	b.tileABt(ws.bwd.dP, qt.do, qt.doh, blk.vt, blk.vtH, b.p.dimVPad, b.p.dimV, m, n)
}

// tileS computes S = Q·Kᵀ (ws.bwd.s) for the m query rows of qt against the
// KV block blk of n keys.
func (b *backwardPass) tileS(ws *workspace, blk *bwdTile, qt *qTile, m, n int) {
	b.tileABt(ws.bwd.s, qt.q, qt.qh, blk.kt, blk.ktH, b.p.dimPad, b.p.dim, m, n)
}

// tileABt computes dst = A·Bᵀ (stride Pad(n)) for m rows of A of dim values
// against the n rows of B of the block: in float32 from a (stride dimPad)
// and the packed bt, or on the native half path from ah (stride even(dim))
// and the packed bth.
func (b *backwardPass) tileABt(dst, a []float32, ah []uint16, bt []float32, bth []uint16, dimPad, dim, m, n int) {
	p := b.p
	np := kernel.Pad(n)
	if !p.native {
		p.kern.MulABt(dst, np, a, dimPad, bt, m, np, dim)
		return
	}
	de := even(dim)
	p.halfMul.Mul(dst, np, ah, de, bth, kernel.W*de, m, np, de)
}

// tileGrads adds the products of the tile at: dV += P̃ᵀ·dO and
// dK += dSᵀ·Q into g (n rows of dimVPad and dimPad), and dQ += dS·K into
// dq (the tile's rows, stride dimPad) when dq is not nil.
func (b *backwardPass) tileGrads(ws *workspace, blk *bwdTile, qt *qTile, at tileAt, g *blockGrads, dq []float32) {
	p, bw := b.p, &ws.bwd
	kern := &p.kern
	m, n := at.rows(), at.n
	dpad, dvpad, np := p.dimPad, p.dimVPad, kernel.Pad(n)
	pmat := bw.s
	if p.dropOn {
		pmat = bw.pDrop
	}
	if dq != nil {
		b.dqProduct(ws, blk, m, n, dq)
	}
	if !p.native {
		kern.MulAddAtB(g.dv, g.ldv, pmat, np, qt.do, dvpad, n, dvpad, m)
		kern.MulAddAtB(g.dk, g.ldk, bw.dP, np, qt.q, dpad, n, dpad, m)
		return
	}
	e, me := p.ct.elem(), even(m)
	// Q and dO as B operands (k = the m rows), Pᵀ and dSᵀ as A operands.
	pt, dst := grow(&bw.pT, n*me), grow(&bw.dsT, n*me)
	kern.TransposeRound(pt, me, pmat, np, m, n, e)
	kern.TransposeRound(dst, me, bw.dP, np, m, n, e)
	if m%2 != 0 {
		for j := 0; j < n; j++ {
			pt[j*me+m], dst[j*me+m] = 0, 0
		}
	}
	p.halfMul.MulAdd(g.dv, g.ldv, pt, me, qt.dov, qt.ldb, n, dvpad, me)
	p.halfMul.MulAdd(g.dk, g.ldk, dst, me, qt.qv, qt.ldb, n, dpad, me)
}

// dqProduct adds dS·K (the tile's m rows against the KV block blk of n
// keys) to dq.
func (b *backwardPass) dqProduct(ws *workspace, blk *bwdTile, m, n int, dq []float32) {
	p, bw := b.p, &ws.bwd
	dpad, np := p.dimPad, kernel.Pad(n)
	if !p.native {
		p.kern.MulAddAB(dq, dpad, bw.dP, np, blk.kp, dpad, m, dpad, n)
		return
	}
	ne := even(n)
	dsh := grow(&bw.dsH, m*ne)
	for r := 0; r < m; r++ {
		toHalf(&p.kern, p.ct, dsh[r*ne:(r+1)*ne], bw.dP[r*np:r*np+ne])
	}
	p.halfMul.MulAdd(dq, dpad, dsh, ne, blk.kpH, blk.ldbK, m, dpad, ne)
}

// bwdTile is a KV block of the backward's packed K and V: Kᵀ and Vᵀ (the B
// of S = Q·Kᵀ and dP = dO·Vᵀ) and K (the B of dQ += dS·K), as float32 or,
// with native products, in the VNNI layout (K with strip stride ldbK).
type bwdTile struct {
	kt, vt, kp    []float32
	ktH, vtH, kpH []uint16
	ldbK          int
}

// backwardTile returns keys j0..j0+n-1 (j0 a multiple of kernel.W) of
// (sequence si, KV head hk).
func (kv *packedKV) backwardTile(si, hk, j0, n int) bwdTile {
	p := kv.p
	u := si*p.kvHeads + hk
	if p.native {
		ldbT, ldbTV := kernel.W*even(p.dim), kernel.W*even(p.dimV)
		return bwdTile{
			ktH:  kv.h[kv.kt[u]+j0/kernel.W*ldbT:],
			vtH:  kv.h[kv.vt[u]+j0/kernel.W*ldbTV:],
			kpH:  kv.h[kv.kr[u]+kernel.W*j0:],
			ldbK: kv.ldb[u],
		}
	}
	d, dv, dpad, np := p.dim, p.dimV, p.dimPad, kernel.Pad(n)
	return bwdTile{
		kt: kv.buf[kv.kt[u]+j0*d : kv.kt[u]+(j0+np)*d],
		vt: kv.buf[kv.vt[u]+j0*dv : kv.vt[u]+(j0+np)*dv],
		kp: kv.buf[kv.kr[u]+j0*dpad : kv.kr[u]+(j0+n)*dpad],
	}
}
