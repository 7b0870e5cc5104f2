package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// dbias.go is the gradient of a Bias (Grads.DBias). The bias is the last
// score modifier (after Scale, Softcap and ALiBi), so its gradient is the
// score gradient at that point, dS = P∘(dP − D) before the chain rule's
// other factors, summed over the bias's broadcast dimensions:
//
//	dBias[b', h', i', j'] = Σ dS[b, h, i, j] over the (b, h, i, j) that read Bias[b', h', i', j']
//
// It is a pass of its own after the others, parallel over slabs of the
// bias, (b', h', a block of bwdBlockK key columns): each task owns its slab
// and recomputes S and dP (two of the backward's tile products) for every
// sequence, query head, key block and query tile that reads it, in that
// order. So the sums do not depend on the number of workers, and no
// seqlen_q × seqlen_k buffer is kept beyond the slab. A slab sums in
// float64 and is rounded once.

// dbiasTask is a slab of the bias: batch b, head h, key columns [c0, c1)
// (all keys when the bias has one column).
type dbiasTask struct{ b, h, c0, c1 int }

// dbiasPass runs the tasks of the bias gradient.
type dbiasPass struct{ b *backwardPass }

// storeBias computes the bias gradient into Grads.DBias, if wanted:
// overwriting it, or adding to it (Grads.Accumulate).
func (b *backwardPass) storeBias() error {
	bs := b.grads.bias
	if b.grads.dbias == nil {
		return nil
	}
	step := b.p.bwdBlockK
	if bs.seqK == 1 {
		step = 1
	}
	t := b.mem.dbiasT[:0]
	for bi := range bs.batch {
		for h := range bs.heads {
			for c0 := 0; c0 < bs.seqK; c0 += step {
				t = append(t, dbiasTask{bi, h, c0, min(c0+step, bs.seqK)})
			}
		}
	}
	b.mem.dbiasT, b.dbiasT = t, t
	if b.grads.o.dt != Float32 {
		b.wholeRowDelta()
	}
	return b.p.parallel(len(t), dbiasPass{b})
}

// wholeRowDelta replaces D in b.delta, for a 16-bit output, by the call's
// Σ_j P_j·dP_j where the call holds the whole row (see sinkgrad.go): D from
// O rounded to 16 bits is off by u·‖dO‖·‖O‖, which dS = P∘(dP − D) carries
// into the bias gradient unsummed (dQ and dK take it only through sums
// weighted by P). The passes before have used D and are done.
func (b *backwardPass) wholeRowDelta() {
	p, g := b.p, &b.grads
	for si := range p.seqs {
		s := &p.seqs[si]
		for h := range p.heads {
			for i := range s.nq {
				e := s.lse0 + h*s.lseH + i
				if g.lse[e] == negInf {
					continue // the row sees no key: its P is 0
				}
				var dl float32
				if g.dlse != nil {
					dl = g.dlse[e]
				}
				b.delta[e] = float32(b.rowD(e, b.sinkProb(h, e))) - dl
			}
		}
	}
}

func (d dbiasPass) runTask(ws *workspace, t int) {
	b := d.b
	p, bs, u := b.p, b.grads.bias, b.dbiasT[t]
	ws.sizeBackward(p)
	w := u.c1 - u.c0
	acc := grow(&ws.bwd.dbias, bs.seqQ*w)
	clear(acc)
	for si := range p.seqs {
		s := &p.seqs[si]
		if bs.batch != 1 && s.b != u.b {
			continue
		}
		// The sequence's keys in the slab: key j reads column j + kpos.
		ja, jb := 0, s.nk
		if bs.seqK != 1 {
			ja, jb = max(0, u.c0-s.kpos), min(s.nk, u.c1-s.kpos)
		}
		for h := range p.heads {
			if bs.heads != 1 && h != u.h {
				continue
			}
			hr := b.headRows(si, h)
			hr.sinkD = nil // the dQ pass has summed them
			for j0 := ja - ja%p.bwdBlockK; j0 < jb; j0 += p.bwdBlockK {
				kb := keyBlockAt{s: s, seq: si, h: h, hk: h / p.group, j0: j0, n: min(p.bwdBlockK, s.nk-j0)}
				d.keyBlock(ws, kb, &hr, max(ja, j0)-j0, min(jb, j0+kb.n)-j0, u, acc)
			}
			if p.stopped() {
				return
			}
		}
	}
	g := bs.seqK * bs.seqQ
	for i := range bs.seqQ {
		dst := b.grads.dbias[(u.b*bs.heads+u.h)*g+i*bs.seqK+u.c0:][:w]
		for c, x := range acc[i*w : (i+1)*w] {
			if b.grads.accumulate {
				x += float64(dst[c])
			}
			dst[c] = float32(x)
		}
	}
}

// keyBlock adds to acc (the slab of task u, seqQ rows of its columns) the
// score gradients of keys [kb.j0+ca, kb.j0+cb) of the KV block kb, for
// every query tile that sees the block.
func (d dbiasPass) keyBlock(ws *workspace, kb keyBlockAt, hr *headRows, ca, cb int, u dbiasTask, acc []float64) {
	b := d.b
	s, bs := kb.s, b.grads.bias
	tiles := b.p.queryTiles(kb.s, kb.h, kb.j0, kb.n)
	if tiles.empty() || ca >= cb {
		return
	}
	w, np := u.c1-u.c0, kernel.Pad(kb.n)
	blk := b.kv.backwardTile(kb.seq, kb.hk, kb.j0, kb.n)
	for at, ok := tiles.next(); ok; at, ok = tiles.next() {
		qt := b.queryTile(hr, at.i0, at.i1)
		b.tileScores(ws, &blk, &qt, at.rows(), at.n)
		for r := range at.rows() {
			a := at.row(r)
			b.scoreGrad(ws, &a, r, hr)
			i := 0
			if bs.seqQ != 1 {
				i = at.i0 + r + s.qpos
			}
			row := acc[i*w : (i+1)*w]
			ds := ws.bwd.dP[r*np:]
			for c := ca; c < cb; c++ {
				col := 0
				if bs.seqK != 1 {
					col = kb.j0 + c + s.kpos - u.c0
				}
				row[col] += float64(ds[c])
			}
		}
	}
}
