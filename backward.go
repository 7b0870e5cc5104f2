package flashattn

import (
	"fmt"

	"github.com/flashattn/flashattn/internal/kernel"
)

// Backward computes the gradients of attention with respect to q, k and v
// for the upstream gradient dout, given the forward's inputs, its output out
// and its lse, and the same options. P is recomputed tile by tile from q, k
// and lse (FA2's backward): no seqlen_q × seqlen_k matrix is stored. With
// GQA/MQA, dk and dv sum over the query heads that share a KV head.
func Backward(q, k, v, out, dout Tensor, lse []float32, opts *Options) (dq, dk, dv Tensor, err error) {
	dq = NewTensor(q.Batch, q.Seq, q.Heads, q.Dim)
	dk = NewTensor(k.Batch, k.Seq, k.Heads, k.Dim)
	dv = NewTensor(v.Batch, v.Seq, v.Heads, v.Dim)
	if err := BackwardInto(dq, dk, dv, q, k, v, out, dout, lse, opts); err != nil {
		return Tensor{}, Tensor{}, Tensor{}, err
	}
	return dq, dk, dv, nil
}

// BackwardInto is Backward writing into caller-owned gradients dq (shaped
// like q), dk and dv (shaped like k). Repeated calls allocate nothing.
func BackwardInto(dq, dk, dv Tensor, q, k, v, out, dout Tensor, lse []float32, opts *Options) error {
	if opts != nil && opts.KVCache != nil {
		return fmt.Errorf("flashattn: Backward does not take a KVCache (decoding is inference only)")
	}
	p, err := newProblem(q, k, v, opts)
	if err != nil {
		return err
	}
	defer p.release()
	g := &p.gv
	B, Sq, H, D, Sk, Hk := q.Batch, q.Seq, q.Heads, q.Dim, k.Seq, k.Heads
	for _, c := range []struct {
		dst        *view
		t          Tensor
		name       string
		output     bool
		b, s, h, d int
	}{
		{&g.o, out, "out", false, B, Sq, H, D},
		{&g.do, dout, "dout", false, B, Sq, H, D},
		{&g.dq, dq, "dq", true, B, Sq, H, D},
		{&g.dk, dk, "dk", true, B, Sk, Hk, D},
		{&g.dv, dv, "dv", true, B, Sk, Hk, D},
	} {
		if *c.dst, err = c.t.check(c.name, c.output, c.b, c.s, c.h, c.d); err != nil {
			return err
		}
	}
	if len(lse) < p.lseLen {
		return fmt.Errorf("flashattn: lse has %d elements, want %d", len(lse), p.lseLen)
	}
	g.lse = lse
	p.backward(g)
	return nil
}

// gradViews holds the backward's extra inputs and its outputs.
type gradViews struct {
	o, do, dq, dk, dv view
	lse               []float32
}

// bwdUnit is one unit of backward work (FA2 parallelises the backward over
// K/V blocks): sequence seq, KV head hk, and the KV blocks
// chunk, chunk+chunks, chunk+2·chunks, ... (round robin, which balances a
// causal mask). The unit owns the dK, dV rows of its blocks; its dQ
// contributions go to its own partial buffer (part ≥ 0) that is reduced in
// a fixed order afterwards, or straight to dq when chunks is 1.
type bwdUnit struct {
	seq, hk       int
	chunk, chunks int
	part          int // offset of the unit's partial dQ (group × nq × dp), -1 if none
}

// bwdTarget is the number of units the chunking aims for. It is fixed (not
// the worker count) so results are the same for any number of workers.
const bwdTarget = 8

func (p *problem) backwardUnits() (units []bwdUnit, partLen int) {
	units = p.sc.units[:0]
	defer func() { p.sc.units = units }()
	total := 0
	for _, s := range p.seqs {
		total += s.nq * s.nk
	}
	for si, s := range p.seqs {
		if s.nq == 0 || s.nk == 0 {
			continue
		}
		nkb := (s.nk + p.bkB - 1) / p.bkB
		c := (bwdTarget*s.nq*s.nk + p.kvh*total - 1) / (p.kvh * total)
		c = min(max(c, 1), nkb)
		for hk := 0; hk < p.kvh; hk++ {
			for ch := 0; ch < c; ch++ {
				u := bwdUnit{seq: si, hk: hk, chunk: ch, chunks: c, part: -1}
				if c > 1 {
					u.part = partLen
					partLen += p.group * s.nq * p.dp
				}
				units = append(units, u)
			}
		}
	}
	return units, partLen
}

func (p *problem) backward(g *gradViews) {
	p.g = g
	// Keys that no query sees (and keys past SeqUsedK) get zero gradients.
	p.clearKV(g)
	units, partLen := p.backwardUnits()
	p.units = units
	p.dqPart = grow(&p.sc.dqPart, partLen)
	clear(p.dqPart)
	p.phase = phaseBackward
	parallel(p.workers, len(units), p)
	if partLen == 0 {
		return
	}
	// Reduce the partial dQ of each (sequence, KV head) in chunk order.
	reds := p.sc.reds[:0]
	for _, u := range units {
		if u.part >= 0 && u.chunk == 0 {
			reds = append(reds, u)
		}
	}
	p.sc.reds, p.reds = reds, reds
	p.phase = phaseReduce
	parallel(p.workers, len(reds), p)
}

// reduceDQ sums, in chunk order, the partial dQ of the query heads of
// (sequence, KV head) u, and writes scale·sum to dq.
func (p *problem) reduceDQ(u *bwdUnit) {
	s := &p.seqs[u.seq]
	size := p.group * s.nq * p.dp
	for hh := 0; hh < p.group; hh++ {
		h := u.hk*p.group + hh
		for i := 0; i < s.nq; i++ {
			dst := p.g.dq.row(s.tb, s.q0+i, h)[:p.d]
			off := u.part + (hh*s.nq+i)*p.dp
			for c := range dst {
				var acc float32
				for ch := 0; ch < u.chunks; ch++ {
					acc += p.dqPart[off+ch*size+c]
				}
				dst[c] = p.scale * acc
			}
		}
	}
}

// clearKV zeroes dk and dv: the units accumulate into them.
func (p *problem) clearKV(g *gradViews) {
	for _, dst := range []view{g.dk, g.dv} {
		for b := 0; b < p.tbatch; b++ {
			for j := 0; j < p.kRows; j++ {
				for h := 0; h < p.kvh; h++ {
					clear(dst.row(b, j, h)[:p.d])
				}
			}
		}
	}
}

// backwardUnit runs FA2's backward for one unit: for each KV block it owns,
// stream the query blocks that see it, recompute P = exp(S − LSE), and
// accumulate dV += Pᵀ dO, dK += dSᵀ Q locally and dQ += dS K.
func (p *problem) backwardUnit(ws *workspace, u *bwdUnit) {
	g, part := p.g, p.dqPart
	s := &p.seqs[u.seq]
	ws.forBackward(p, s.nq)
	d, dp := p.d, p.dp
	nkb := (s.nk + p.bkB - 1) / p.bkB
	for hh := 0; hh < p.group; hh++ {
		h := u.hk*p.group + hh
		delta, lse := ws.delta[:s.nq], ws.lse[:s.nq]
		// This head's Q (scaled) and dO, packed once for all its KV blocks.
		qs, dos := grow(&ws.qall, s.nq*dp), grow(&ws.doall, s.nq*dp)
		for i := 0; i < s.nq; i++ {
			scaleRow(qs[i*dp:i*dp+d], p.q.row(s.tb, s.q0+i, h), p.scale)
			clear(qs[i*dp+d : (i+1)*dp])
		}
		kernel.PackRows(dos, g.do.row(s.tb, s.q0, h), g.do.ss, s.nq, d)
		for i := range delta {
			o, do := g.o.row(s.tb, s.q0+i, h)[:d], g.do.row(s.tb, s.q0+i, h)[:d]
			delta[i] = p.impl.Dot(do, o) // rowsum(dO∘O), as dP is accumulated
			lse[i] = g.lse[s.lse0+h*s.lseH+i]
		}
		var dq []float32
		if u.part >= 0 {
			dq = part[u.part+hh*s.nq*dp:][:s.nq*dp]
		} else {
			dq = grow(&ws.dq, s.nq*dp)
			clear(dq)
		}
		for kb := u.chunk; kb < nkb; kb += u.chunks {
			j0 := kb * p.bkB
			n := min(p.bkB, s.nk-j0)
			p.backwardBlock(ws, s, h, u.hk, j0, n, qs, dos, delta, lse, dq, g)
		}
		if u.part < 0 {
			for i := 0; i < s.nq; i++ {
				dst := g.dq.row(s.tb, s.q0+i, h)[:d]
				for c, x := range dq[i*dp : i*dp+d] {
					dst[c] = p.scale * x
				}
			}
		}
	}
}

// backwardBlock processes KV block [j0, j0+n) of head hk against query head h.
// qs and dos hold the head's scale·Q and dO rows padded to dp; delta, lse
// and dq its per-row data.
func (p *problem) backwardBlock(ws *workspace, s *sequence, h, hk, j0, n int, qs, dos, delta, lse, dq []float32, g *gradViews) {
	qlo, qhi := s.band.rows(j0, j0+n)
	if qlo >= qhi {
		return
	}
	k := &p.impl
	d, dp, np := p.d, p.dp, kernel.Pad(n)
	kernel.PackBt(ws.kt, p.k.row(s.tb, s.k0+j0, hk), p.k.ss, n, d)
	kernel.PackBt(ws.vt, p.v.row(s.tb, s.k0+j0, hk), p.v.ss, n, d)
	kernel.PackRows(ws.kp, p.k.row(s.tb, s.k0+j0, hk), p.k.ss, n, d)
	dk, dv := ws.dk[:n*dp], ws.dv[:n*dp]
	clear(dk)
	clear(dv)
	for i0 := qlo; i0 < qhi; i0 += p.bq {
		i1 := min(i0+p.bq, qhi)
		m := i1 - i0
		qp, dop := qs[i0*dp:i1*dp], dos[i0*dp:i1*dp]
		k.MulABt(ws.s, np, qp, dp, ws.kt, m, np, d)
		k.MulABt(ws.dp, np, dop, dp, ws.vt, m, np, d)
		full := s.band.full(i0, i1, j0, j0+n)
		pass := p.needsScorePass(full)
		for r := 0; r < m; r++ {
			i := i0 + r
			row := ws.s[r*np : (r+1)*np]
			var gr []float32
			if p.softcap > 0 {
				gr = ws.g[r*np : (r+1)*np]
			}
			if pass {
				p.scoreRow(row, n, gr, s, h, i, j0, !full)
			}
			for c := n; c < np; c++ {
				row[c] = negInf
			}
			if lse[i] == negInf { // the row sees no key at all
				clear(row)
			} else {
				k.ExpSum(row, 1, lse[i])
			}
			dprow := ws.dp[r*np : (r+1)*np]
			if p.dropOn {
				pd := ws.pd[r*np : (r+1)*np]
				copy(pd, row)
				// One mask for both: P̃ = P∘z/(1-p) and dP = dP̃∘z/(1-p).
				f := ws.drop[:n]
				for c := range f {
					f[c] = 1
				}
				p.drop.ApplyRow(f, s.b, h, i, j0)
				for c, x := range f {
					pd[c] *= x
					dprow[c] *= x
				}
			}
			k.DsFromDp(dprow, row, delta[i])
			for c, x := range gr {
				dprow[c] *= x
			}
		}
		pmat := ws.s
		if p.dropOn {
			pmat = ws.pd
		}
		k.MulAddAtB(dv, dp, pmat, np, dop, dp, n, dp, m)
		k.MulAddAtB(dk, dp, ws.dp, np, qp, dp, n, dp, m)
		k.MulAddAB(dq[i0*dp:], dp, ws.dp, np, ws.kp, dp, m, dp, n)
	}
	for jj := 0; jj < n; jj++ {
		dkr := g.dk.row(s.tb, s.k0+j0+jj, hk)[:d]
		dvr := g.dv.row(s.tb, s.k0+j0+jj, hk)[:d]
		for c := range dkr {
			dkr[c] += dk[jj*dp+c] // dK = dSᵀ·(scale·Q): the scale is in qp
			dvr[c] += dv[jj*dp+c]
		}
	}
}
