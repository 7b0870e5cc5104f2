package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// rowsPass prepares every query row of one (sequence, head) per task: it
// packs Q and dO once for all the KV blocks that read them (float32 rows
// padded to dimPad, or the native products' 16-bit operands), and computes
// D = rowsum(dO∘O) in float64, rounded once, from dO in the compute type —
// minus dLSE, when the loss has one; with a sink gradient it also keeps
// dO·O for it (sinkgrad.go).
type rowsPass struct {
	b     *backwardPass
	tasks []rowBlock
	pack  queryPack
	mem   rowsMem
}

// rowsMem is what the rows pass keeps from call to call.
type rowsMem struct {
	tasks        []rowBlock
	q, do        []float32
	qh, doh      []uint16
	qv, dov      []uint16
	qvOff, dvOff []int
	vLdb         []int
}

// queryPack is the backward's packed Q and dO. They are packed even when
// float32 rows need no padding: read in place, rows a multiple of 1 KiB
// apart (heads·dim·4 bytes) fall into a few L1 sets, and the tile
// products slowed by 30% (Q·Kᵀ, A rows 4 KiB apart) and 40% (dK += dSᵀ·Q,
// B rows 4 KiB apart) on Zen 4.
//
// Row (sequence s, head h, i)
// is row s.lse0 + h·s.lseH + i (its LSE index) of q and do (float32, rows of
// dimPad and dimVPad) or of qh and doh (native, rows of even(dim) and
// even(dimV)); native B operands qv, dov hold one VNNI matrix per
// (sequence, head), at qvOff[seq·heads+h] and dvOff[seq·heads+h], k = the
// rows, strip stride vLdb[seq·heads+h].
type queryPack struct {
	q, do        []float32
	qh, doh      []uint16
	qv, dov      []uint16
	qvOff, dvOff []int
	vLdb         []int
}

// run sizes the packed Q and dO and runs the pass.
func (r *rowsPass) run(b *backwardPass) error {
	*r = rowsPass{b: b, mem: r.mem}
	p, m, qp := b.p, &r.mem, &r.pack
	r.tasks = p.headTasks(&m.tasks)
	if !p.native {
		qp.q, qp.do = grow(&m.q, p.lseLen*p.dimPad), grow(&m.do, p.lseLen*p.dimVPad)
	} else {
		qp.qh, qp.doh = grow(&m.qh, p.lseLen*even(p.dim)), grow(&m.doh, p.lseLen*even(p.dimV))
		n := len(p.seqs) * p.heads
		qp.qvOff, qp.dvOff, qp.vLdb = grow(&m.qvOff, n), grow(&m.dvOff, n), grow(&m.vLdb, n)
		tq, tv := 0, 0
		for si := range p.seqs {
			for h := 0; h < p.heads; h++ {
				u := si*p.heads + h
				qp.vLdb[u] = kernel.W * even(p.seqs[si].nq)
				qp.qvOff[u], qp.dvOff[u] = tq, tv
				tq += p.dimPad / kernel.W * qp.vLdb[u]
				tv += p.dimVPad / kernel.W * qp.vLdb[u]
			}
		}
		qp.qv, qp.dov = grow(&m.qv, tq), grow(&m.dov, tv)
	}
	return p.parallel(len(r.tasks), r)
}

func (r *rowsPass) runTask(ws *workspace, t int) {
	b, rb := r.b, r.tasks[t]
	p, g, qp := b.p, &b.grads, &r.pack
	s := &p.seqs[rb.seq]
	h, base := rb.h0, s.lse0+rb.h0*s.lseH
	oBuf, doBuf := grow(&ws.conv.out, p.dimV), grow(&ws.conv.in2, p.dimV)
	for i := 0; i < s.nq; i++ {
		o := g.o.rowIn(oBuf, s.tb, s.q0+i, h, Float32, &p.kern)
		do := g.do.rowIn(doBuf, s.tb, s.q0+i, h, p.ct, &p.kern)
		d := dot64(do, o)
		var dl float32
		if g.dlse != nil && g.lse[base+i] != negInf {
			dl = g.dlse[base+i]
		}
		b.delta[base+i] = d - dl
		if b.sinkD != nil {
			b.sinkD[base+i] = sinkRow{o: float64(d)}
		}
	}
	if !p.native {
		for _, x := range []struct {
			v      view
			dst    []float32
			d, pad int
		}{{p.q, qp.q, p.dim, p.dimPad}, {g.do, qp.do, p.dimV, p.dimVPad}} {
			rows, ld := x.v.matrix(&ws.conv.in1, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
			kernel.PackRows(x.dst[base*x.pad:], rows, ld, s.nq, x.d)
		}
		return
	}
	u := rb.seq*p.heads + h
	for _, x := range []struct {
		v     view
		a, bv []uint16
		d     int
	}{{p.q, qp.qh, qp.qv[qp.qvOff[u]:], p.dim}, {g.do, qp.doh, qp.dov[qp.dvOff[u]:], p.dimV}} {
		d, de := x.d, even(x.d)
		p.packVNNI(vnniRows{v: x.v, tb: s.tb, r: s.q0, h: h, n: s.nq}, &ws.conv.in1, vnniDst{x.bv, qp.vLdb[u], 0, d})
		a := x.a[base*de : (base+s.nq)*de]
		if x.v.dt == p.ct {
			src, ld := x.v.rows16(s.tb, s.q0, h)
			for r := 0; r < s.nq; r++ {
				copy(a[r*de:r*de+d], src[r*ld:r*ld+d])
			}
		} else {
			rows, ld := x.v.matrix(&ws.conv.in1, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
			for r := 0; r < s.nq; r++ {
				toHalf(&p.kern, p.ct, a[r*de:r*de+d], rows[r*ld:r*ld+d])
			}
		}
		if d%2 != 0 {
			for r := 0; r < s.nq; r++ {
				a[r*de+d] = 0 // the pad column
			}
		}
	}
}

// qTile is a query tile's Q and dO: float32 rows padded to dimPad (dO:
// dimVPad), or the
// native products' 16-bit A operands (rows of even(dim)) and B operands
// (VNNI from the tile's first row, strip stride ldb).
type qTile struct {
	q, do   []float32
	qh, doh []uint16
	qv, dov []uint16
	ldb     int
}

// queryTile returns rows [i0, i1) of the head's packed Q and dO (i0 even
// with native products).
func (b *backwardPass) queryTile(hr *headRows, i0, i1 int) qTile {
	p, qp := b.p, b.qPack
	r0, r1 := hr.base+i0, hr.base+i1
	if !p.native {
		dpad, dvpad := p.dimPad, p.dimVPad
		return qTile{q: qp.q[r0*dpad : r1*dpad], do: qp.do[r0*dvpad : r1*dvpad]}
	}
	de, deV, off := even(p.dim), even(p.dimV), kernel.W*i0
	return qTile{qh: qp.qh[r0*de : r1*de], doh: qp.doh[r0*deV : r1*deV],
		qv: qp.qv[qp.qvOff[hr.unit]+off:], dov: qp.dov[qp.dvOff[hr.unit]+off:], ldb: qp.vLdb[hr.unit]}
}

// dot64 returns Σ a[i]·b[i] accumulated in float64 (the products of two
// float32 are exact in float64) and rounded once.
func dot64(a, b []float32) float32 {
	var s float64
	for i, x := range a {
		s += float64(x) * float64(b[i])
	}
	return float32(s)
}
