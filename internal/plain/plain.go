// Package plain is the standard attention algorithm that FlashAttention is
// measured against (Algorithm 0 of the paper): for each head it
// materialises the full Sq×Sk score matrix S = scale·QKᵀ, applies the
// softmax to get P, and multiplies O = P·V; the backward pass materialises
// P and dP the same way. It uses the same microkernels as flashattn and the
// same number of workers, so a comparison isolates the algorithm: O(N²)
// memory traffic against FlashAttention's tiling.
//
// Dense layout only (Q [B,Sq,H,D], K/V [B,Sk,Hk,D]), causal or not,
// bottom-right aligned. It exists for benchmarks, not as an API.
package plain

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/flashattn/flashattn/internal/kernel"
)

// Problem is one plain-attention call.
type Problem struct {
	B, Sq, Sk, H, Hk, D int
	Causal              bool
	Workers             int
}

const rowBlock = 64

func parallel(workers, n int, f func(t int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < max(1, min(workers, n)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := int(next.Add(1) - 1); t < n; t = int(next.Add(1) - 1) {
				f(t)
			}
		}()
	}
	wg.Wait()
}

// head gathers one head of a [B,S,H,D] tensor into rows of stride ld.
func head(dst, src []float32, b, s, h, H, D, ld int) {
	for i := 0; i < s; i++ {
		copy(dst[i*ld:i*ld+D], src[((b*s+i)*H+h)*D:][:D])
	}
}

func scatter(dst, src []float32, b, s, h, H, D, ld int, add bool) {
	for i := 0; i < s; i++ {
		d := dst[((b*s+i)*H+h)*D:][:D]
		if add {
			for c := range d {
				d[c] += src[i*ld+c]
			}
		} else {
			copy(d, src[i*ld:i*ld+D])
		}
	}
}

// scores fills s (Sq × ld) with the masked, scaled scores and turns each row
// into probabilities; returns the LSE of each row.
func (p *Problem) softmax(im *kernel.Impl, s []float32, ld int, lse []float32) {
	scale := float32(1 / math.Sqrt(float64(p.D)))
	off := p.Sk - p.Sq
	parallel(p.Workers, (p.Sq+rowBlock-1)/rowBlock, func(t int) {
		for i := t * rowBlock; i < min(p.Sq, (t+1)*rowBlock); i++ {
			row := s[i*ld : (i+1)*ld]
			lim := p.Sk
			if p.Causal {
				lim = max(0, min(p.Sk, i+off+1))
			}
			for j := lim; j < ld; j++ {
				row[j] = float32(math.Inf(-1))
			}
			m := im.Max(row) * scale
			if lim == 0 {
				clear(row)
				lse[i] = float32(math.Inf(-1))
				continue
			}
			l := im.ExpSum(row, scale, m)
			im.Scale(row, 1/l)
			lse[i] = m + float32(math.Log(float64(l)))
		}
	})
}

// Forward returns O and LSE ([B,H,Sq]).
func (p *Problem) Forward(q, k, v []float32) (o, lse []float32) {
	im := kernel.Active().Impl
	D, dp, skp := p.D, kernel.Pad(p.D), kernel.Pad(p.Sk)
	o = make([]float32, p.B*p.Sq*p.H*D)
	lse = make([]float32, p.B*p.H*p.Sq)
	s := make([]float32, p.Sq*skp) // the N×N matrix
	qh := make([]float32, p.Sq*D)
	kh := make([]float32, p.Sk*D)
	kt := make([]float32, skp*D)
	vh := make([]float32, p.Sk*dp)
	oh := make([]float32, p.Sq*dp)
	nrb := (p.Sq + rowBlock - 1) / rowBlock
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.H; h++ {
			hk := h / (p.H / p.Hk)
			head(qh, q, b, p.Sq, h, p.H, D, D)
			head(kh, k, b, p.Sk, hk, p.Hk, D, D)
			kernel.PackBt(kt, kh, D, p.Sk, D)
			clear(vh)
			head(vh, v, b, p.Sk, hk, p.Hk, D, dp)
			parallel(p.Workers, nrb, func(t int) {
				i0, i1 := t*rowBlock, min(p.Sq, (t+1)*rowBlock)
				im.MulABt(s[i0*skp:], skp, qh[i0*D:], D, kt, i1-i0, skp, D)
			})
			p.softmax(&im, s, skp, lse[(b*p.H+h)*p.Sq:])
			clear(oh)
			parallel(p.Workers, nrb, func(t int) {
				i0, i1 := t*rowBlock, min(p.Sq, (t+1)*rowBlock)
				im.MulAddAB(oh[i0*dp:], dp, s[i0*skp:], skp, vh, dp, i1-i0, dp, p.Sk)
			})
			scatter(o, oh, b, p.Sq, h, p.H, D, dp, false)
		}
	}
	return o, lse
}

// Backward returns dQ, dK, dV, materialising P and dP (Sq × Sk each).
func (p *Problem) Backward(q, k, v, o, do []float32) (dq, dk, dv []float32) {
	im := kernel.Active().Impl
	D, dp, skp := p.D, kernel.Pad(p.D), kernel.Pad(p.Sk)
	scale := float32(1 / math.Sqrt(float64(D)))
	dq = make([]float32, len(q))
	dk = make([]float32, len(k))
	dv = make([]float32, len(v))
	s := make([]float32, p.Sq*skp)
	dP := make([]float32, p.Sq*skp)
	qh, doh, oh := make([]float32, p.Sq*dp), make([]float32, p.Sq*dp), make([]float32, p.Sq*dp)
	kh, vh := make([]float32, p.Sk*dp), make([]float32, p.Sk*dp)
	kt, vt := make([]float32, skp*D), make([]float32, skp*D)
	dqh, dkh, dvh := make([]float32, p.Sq*dp), make([]float32, p.Sk*dp), make([]float32, p.Sk*dp)
	lse := make([]float32, p.Sq)
	delta := make([]float32, p.Sq)
	nrb := (p.Sq + rowBlock - 1) / rowBlock
	ncb := (p.Sk + rowBlock - 1) / rowBlock
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.H; h++ {
			hk := h / (p.H / p.Hk)
			for _, x := range [][]float32{qh, doh, oh, kh, vh, dqh, dkh, dvh} {
				clear(x)
			}
			head(qh, q, b, p.Sq, h, p.H, D, dp)
			head(doh, do, b, p.Sq, h, p.H, D, dp)
			head(oh, o, b, p.Sq, h, p.H, D, dp)
			head(kh, k, b, p.Sk, hk, p.Hk, D, dp)
			head(vh, v, b, p.Sk, hk, p.Hk, D, dp)
			kernel.PackBt(kt, kh, dp, p.Sk, D)
			kernel.PackBt(vt, vh, dp, p.Sk, D)
			parallel(p.Workers, nrb, func(t int) {
				i0, i1 := t*rowBlock, min(p.Sq, (t+1)*rowBlock)
				im.MulABt(s[i0*skp:], skp, qh[i0*dp:], dp, kt, i1-i0, skp, D)
				im.MulABt(dP[i0*skp:], skp, doh[i0*dp:], dp, vt, i1-i0, skp, D)
				for i := i0; i < i1; i++ {
					var acc float32
					for c := 0; c < D; c++ {
						acc += doh[i*dp+c] * oh[i*dp+c]
					}
					delta[i] = acc
				}
			})
			p.softmax(&im, s, skp, lse)
			parallel(p.Workers, nrb, func(t int) {
				for i := t * rowBlock; i < min(p.Sq, (t+1)*rowBlock); i++ {
					im.DsFromDp(dP[i*skp:(i+1)*skp], s[i*skp:(i+1)*skp], delta[i])
				}
			})
			parallel(p.Workers, nrb+ncb, func(t int) {
				if t < nrb {
					i0, i1 := t*rowBlock, min(p.Sq, (t+1)*rowBlock)
					im.MulAddAB(dqh[i0*dp:], dp, dP[i0*skp:], skp, kh, dp, i1-i0, dp, p.Sk)
					return
				}
				j0 := (t - nrb) * rowBlock
				j1 := min(p.Sk, j0+rowBlock)
				im.MulAddAtB(dvh[j0*dp:], dp, s[j0:], skp, doh, dp, j1-j0, dp, p.Sq)
				im.MulAddAtB(dkh[j0*dp:], dp, dP[j0:], skp, qh, dp, j1-j0, dp, p.Sq)
			})
			im.Scale(dqh, scale)
			im.Scale(dkh, scale)
			scatter(dq, dqh, b, p.Sq, h, p.H, D, dp, false)
			scatter(dk, dkh, b, p.Sk, hk, p.Hk, D, dp, true)
			scatter(dv, dvh, b, p.Sk, hk, p.Hk, D, dp, true)
		}
	}
	return dq, dk, dv
}
