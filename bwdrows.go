package flashattn

import "github.com/flashattn/flashattn/internal/kernel"

// rowsPass prepares every query row of one (sequence, head) per task: it
// packs Q and dO once for all the KV blocks that read them (float32 rows
// padded to dimPad, or the native products' 16-bit operands), and computes
// D = rowsum(dO∘O) in float64, rounded once, from dO in the compute type.
type rowsPass struct {
	b     *backwardPass
	tasks []rowBlock
	pack  queryPack
	mem   rowsMem
}

// rowsMem is what the rows pass keeps from call to call.
type rowsMem struct {
	tasks      []rowBlock
	q, do      []float32
	qh, doh    []uint16
	qv, dov    []uint16
	vOff, vLdb []int
}

// queryPack is the backward's packed Q and dO. Row (sequence s, head h, i)
// is row s.lse0 + h·s.lseH + i (its LSE index) of q and do (float32, rows of
// dimPad) or of qh and doh (native, rows of even(dim)); native B operands
// qv, dov hold one VNNI matrix per (sequence, head) at vOff[seq·heads+h],
// k = the rows, strip stride vLdb[seq·heads+h].
type queryPack struct {
	q, do      []float32
	qh, doh    []uint16
	qv, dov    []uint16
	vOff, vLdb []int
}

// run sizes the packed Q and dO and runs the pass.
func (r *rowsPass) run(b *backwardPass) error {
	*r = rowsPass{b: b, mem: r.mem}
	p, m, qp := b.p, &r.mem, &r.pack
	r.tasks = p.headTasks(&m.tasks)
	if !p.native {
		qp.q, qp.do = grow(&m.q, p.lseLen*p.dimPad), grow(&m.do, p.lseLen*p.dimPad)
	} else {
		de := even(p.dim)
		qp.qh, qp.doh = grow(&m.qh, p.lseLen*de), grow(&m.doh, p.lseLen*de)
		n := len(p.seqs) * p.heads
		qp.vOff, qp.vLdb = grow(&m.vOff, n), grow(&m.vLdb, n)
		total := 0
		for si := range p.seqs {
			for h := 0; h < p.heads; h++ {
				u := si*p.heads + h
				qp.vOff[u], qp.vLdb[u] = total, kernel.W*even(p.seqs[si].nq)
				total += p.dimPad / kernel.W * qp.vLdb[u]
			}
		}
		qp.qv, qp.dov = grow(&m.qv, total), grow(&m.dov, total)
	}
	return parallel(p.workers, len(r.tasks), r)
}

func (r *rowsPass) runTask(ws *workspace, t int) {
	b, rb := r.b, r.tasks[t]
	p, g, qp := b.p, &b.grads, &r.pack
	s := &p.seqs[rb.seq]
	h, d, dpad, base := rb.h0, p.dim, p.dimPad, s.lse0+rb.h0*s.lseH
	o, do := grow(&ws.conv.out, d), grow(&ws.conv.in2, d)
	for i := 0; i < s.nq; i++ {
		g.o.rowTo(o, s.tb, s.q0+i, h, Float32, &p.kern)
		g.do.rowTo(do, s.tb, s.q0+i, h, p.ct, &p.kern)
		b.delta[base+i] = dot64(do, o)
	}
	if !p.native {
		for _, x := range []struct {
			v   view
			dst []float32
		}{{p.q, qp.q}, {g.do, qp.do}} {
			rows, ld := x.v.matrix(&ws.conv.in1, s.tb, s.q0, h, s.nq, p.ct, &p.kern)
			kernel.PackRows(x.dst[base*dpad:], rows, ld, s.nq, d)
		}
		return
	}
	de, u := even(d), rb.seq*p.heads+h
	for _, x := range []struct {
		v     view
		a, bv []uint16
	}{{p.q, qp.qh, qp.qv}, {g.do, qp.doh, qp.dov}} {
		p.packVNNI(vnniRows{x.v, s.tb, s.q0, h, s.nq, false}, &ws.conv.in1, vnniDst{x.bv[qp.vOff[u]:], qp.vLdb[u], 0, d})
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

// qTile is a query tile's Q and dO: float32 rows padded to dimPad, or the
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
		dpad := p.dimPad
		return qTile{q: qp.q[r0*dpad : r1*dpad], do: qp.do[r0*dpad : r1*dpad]}
	}
	de, off := even(p.dim), qp.vOff[hr.unit]+kernel.W*i0
	return qTile{qh: qp.qh[r0*de : r1*de], doh: qp.doh[r0*de : r1*de],
		qv: qp.qv[off:], dov: qp.dov[off:], ldb: qp.vLdb[hr.unit]}
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
