package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// bwdnative.go holds the backward's tile products for both number paths:
// float32 kernels, or native 16-bit products (plan.native) on operands
// packed in the VNNI pair layout (see internal/kernel.Half). The softmax
// part (gradRow) is float32 either way; P̃ and dS are rounded to the type
// before they multiply, so both paths compute the same-type algorithm.

// packKeyBlock packs keys [j0, j0+n) of KV head hk: the B operands of S =
// Q·Kᵀ and dP = dO·Vᵀ (Kᵀ, Vᵀ) and of dQ += dS·K (K).
func (b *backwardPass) packKeyBlock(ws *workspace, s *sequence, hk, j0, n int) {
	p := b.p
	kr, ldk := p.kRows(&ws.convK, s, j0, hk, n)
	vr, ldv := p.vRows(&ws.convV, s, j0, hk, n)
	if !p.native {
		kernel.PackBt(ws.kt, kr, ldk, n, p.dim)
		kernel.PackRows(ws.kp, kr, ldk, n, p.dim)
		kernel.PackBt(ws.vt, vr, ldv, n, p.dim)
		return
	}
	e, d, de := p.ct.elem(), p.dim, even(p.dim)
	kt := grow(&ws.ktH, kernel.Pad(n)*de)
	vt := grow(&ws.vtH, kernel.Pad(n)*de)
	kn := grow(&ws.kH, p.dimPad*even(n))
	p.kern.PackVNNIInto(kt, kernel.W*de, 0, kr, ldk, d, n, true, e)
	p.kern.PackVNNIInto(vt, kernel.W*de, 0, vr, ldv, d, n, true, e)
	p.kern.PackVNNIInto(kn, kernel.W*even(n), 0, kr, ldk, n, d, false, e)
}

// tileScores computes S = Q·Kᵀ (ws.s) and dP = dO·Vᵀ (ws.dP) for the m
// query rows qp, dop (padded to dimPad) against the packed KV block of n
// keys.
func (b *backwardPass) tileScores(ws *workspace, m, n int, qp, dop []float32) {
	p := b.p
	k := &p.kern
	dp, np := p.dimPad, kernel.Pad(n)
	if !p.native {
		k.MulABt(ws.s, np, qp, dp, ws.kt, m, np, p.dim)
		k.MulABt(ws.dP, np, dop, dp, ws.vt, m, np, p.dim)
		return
	}
	d, de := p.dim, even(p.dim)
	qh, doh := grow(&ws.qh, m*de), grow(&ws.doh, m*de)
	for r := 0; r < m; r++ {
		qh[r*de+de-1], doh[r*de+de-1] = 0, 0
		toHalf(k, p.ct, qh[r*de:r*de+d], qp[r*dp:r*dp+d])
		toHalf(k, p.ct, doh[r*de:r*de+d], dop[r*dp:r*dp+d])
	}
	p.half.Mul(ws.s, np, qh, de, ws.ktH, kernel.W*de, m, np, de)
	p.half.Mul(ws.dP, np, doh, de, ws.vtH, kernel.W*de, m, np, de)
}

// tileGrads adds the products of one tile: dV += P̃ᵀ·dO and dK += dSᵀ·Q
// into dv, dk (n × dimPad), and dQ += dS·K into dq (m rows of dimPad) when
// dq is not nil.
func (b *backwardPass) tileGrads(ws *workspace, m, n int, qp, dop, dv, dk, dq []float32) {
	p := b.p
	k := &p.kern
	dp, np := p.dimPad, kernel.Pad(n)
	pmat := ws.s
	if p.dropOn {
		pmat = ws.pDrop
	}
	if dq != nil {
		b.dqProduct(ws, m, n, dq)
	}
	if !p.native {
		k.MulAddAtB(dv, dp, pmat, np, dop, dp, n, dp, m)
		k.MulAddAtB(dk, dp, ws.dP, np, qp, dp, n, dp, m)
		return
	}
	e, d, me := p.ct.elem(), p.dim, even(m)
	// Q and dO as B operands (k = the m rows), Pᵀ and dSᵀ as A operands.
	qv, dov := grow(&ws.qV, p.dimPad*me), grow(&ws.doV, p.dimPad*me)
	k.PackVNNIInto(qv, kernel.W*me, 0, qp, dp, m, d, false, e)
	k.PackVNNIInto(dov, kernel.W*me, 0, dop, dp, m, d, false, e)
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

// dqProduct adds dS·K (the tile's m rows against the packed KV block of n
// keys) to dq, for the dQ pass.
func (b *backwardPass) dqProduct(ws *workspace, m, n int, dq []float32) {
	p := b.p
	dp, np := p.dimPad, kernel.Pad(n)
	if !p.native {
		p.kern.MulAddAB(dq, dp, ws.dP, np, ws.kp, dp, m, dp, n)
		return
	}
	ne := even(n)
	dsh := grow(&ws.dsH, m*ne)
	for r := 0; r < m; r++ {
		toHalf(&p.kern, p.ct, dsh[r*ne:(r+1)*ne], ws.dP[r*np:r*np+ne])
	}
	p.half.MulAdd(dq, dp, dsh, ne, ws.kH, kernel.W*ne, m, dp, ne)
}
