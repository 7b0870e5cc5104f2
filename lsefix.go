package flashattn

import (
	"math"

	"github.com/flashattn/flashattn/internal/kernel"
)

// lsefix.go makes the backward's probabilities exact when the float32 LSE
// is not. The backward recomputes P = exp(S − LSE); the LSE it is given is
// m + log l rounded to float32, off by up to half an ulp of its magnitude,
// and that error multiplies a whole row of P: 2⁻²⁴·|LSE| relatively, 1e-4 at
// LSE ≈ 3000 (large logits), where the plain algorithm's P is exact to a few
// ulps. For the rows whose |LSE| reaches lseExactFrom, a pass over their key
// tiles recomputes c = Σ_j exp(S_j − LSE) + exp(sink − LSE) (the last term
// with Options.Sinks: every term of the row's denominator) with the
// backward's own kernels and a float64 sum; the backward then uses P/c,
// which sums to 1 with the sink's P as the plain algorithm's does. A row
// whose c is further from 1 than the LSE's rounding explains holds only some
// of its keys (see lseFixMax) and is left as it is. Below lseExactFrom the LSE's rounding contributes
// at most 2⁻²⁰ (about 1e-6) relative error to P, and the pass costs nothing.

// lseExactFrom is the |LSE| from which a row's probabilities are corrected.
const lseExactFrom = 16

// lseFixPass computes the correction factors 1/c of the flagged rows, one
// task per (sequence, head, query block) that holds one.
type lseFixPass struct {
	p     *plan
	b     *backwardPass // its packed K and Q: scores as the KV pass computes them
	lse   []float32
	corr  []float32 // 1/c per LSE entry (1 where not flagged)
	tasks []rowBlock
	mem   lseFixMem
}

// lseFixMem is what the pass keeps from call to call.
type lseFixMem struct {
	corr  []float32
	tasks []rowBlock
}

// lseFixMax is the largest |c − 1| the pass corrects in a row of LSE l:
// 16 times the 2⁻²⁴·|l| that rounding the LSE to float32 puts into c. A c
// further from 1 is not the LSE's rounding: the call holds only some of the
// row's keys, with the LSE of all of them (a key shard with the merged LSE,
// ring attention), and renormalising over its keys would be wrong; such a
// row keeps P = exp(S − LSE).
func lseFixMax(l float32) float64 { return 0x1p-20 * math.Abs(float64(l)) }

// lseFlagged reports whether a row of LSE l is corrected: it sees some key
// and |l| reaches lseExactFrom.
func lseFlagged(l float32) bool {
	return l >= lseExactFrom || l <= -lseExactFrom && l != negInf
}

// needsLSEFix reports whether some row of lse is flagged.
func needsLSEFix(lse []float32) bool {
	for _, x := range lse {
		if lseFlagged(x) {
			return true
		}
	}
	return false
}

// run sets b.corr: nil when no row is flagged, else 1 everywhere and 1/c
// for the flagged rows.
func (f *lseFixPass) run(b *backwardPass) error {
	p := b.p
	lse := b.grads.lse[:p.lseLen]
	*f = lseFixPass{p: p, b: b, lse: lse, mem: f.mem}
	b.corr = nil
	if !needsLSEFix(lse) {
		return nil
	}
	corr := grow(&f.mem.corr, p.lseLen)
	for i := range corr {
		corr[i] = 1
	}
	tasks := f.mem.tasks[:0]
	for si := range p.seqs {
		s := &p.seqs[si]
		for h := 0; h < p.heads; h++ {
			for i0 := 0; i0 < s.nq; i0 += p.blockQ {
				i1 := min(i0+p.blockQ, s.nq)
				if needsLSEFix(lse[s.lse0+h*s.lseH+i0 : s.lse0+h*s.lseH+i1]) {
					tasks = append(tasks, rowBlock{si, h, 1, i0, i1})
				}
			}
		}
	}
	f.mem.tasks = tasks
	f.corr, f.tasks, b.corr = corr, tasks, corr
	return p.parallel(len(tasks), f)
}

func (f *lseFixPass) runTask(ws *workspace, t int) {
	p, b, rb := f.p, f.b, f.tasks[t]
	s := &p.seqs[rb.seq]
	ws.sizeBackward(p)
	bw := &ws.bwd
	m := rb.i1 - rb.i0
	h, hk := rb.h0, rb.h0/p.group
	hr := b.headRows(rb.seq, h)
	qt := b.queryTile(&hr, rb.i0, rb.i1) // the packed Q rows the KV pass reads
	sums := grow(&bw.sums, m)
	clear(sums)
	if p.sinks != nil {
		// The sink is a key of value 0 and logit sink_h: its term of c
		// (in the flagged rows only; the others keep a sum of 0, factor 1).
		for r := range sums {
			if l := f.lse[s.lse0+h*s.lseH+rb.i0+r]; lseFlagged(l) {
				sums[r] = math.Exp(float64(p.sinks[h]) - float64(l))
			}
		}
	}
	lo, hi := s.vis.keySpan(rb)
	for j := lo / p.bwdBlockK * p.bwdBlockK; j < hi; j += p.bwdBlockK {
		// The backward's KV blocks, their kind and its products on its
		// packed operands, so that every score is the KV pass's bit for
		// bit.
		n := min(p.bwdBlockK, s.nk-j)
		kind := s.vis.tile(rb, j, j+n)
		if kind == BlockEmpty {
			continue
		}
		np := kernel.Pad(n)
		blk := b.kv.backwardTile(rb.seq, hk, j, n)
		b.tileS(ws, &blk, &qt, m, n)
		for r := 0; r < m; r++ {
			i := rb.i0 + r
			l := f.lse[s.lse0+h*s.lseH+i]
			if !lseFlagged(l) {
				continue
			}
			row := bw.s[r*np : (r+1)*np]
			f := p.scoreRow(&ws.row, row, nil, &scoreAt{s, h, i, j, n, kind})
			p.kern.ExpSum(row, f, l)
			var sum float64
			for _, x := range row[:n] {
				sum += float64(x)
			}
			sums[r] += sum
		}
	}
	for r, sum := range sums {
		e := s.lse0 + h*s.lseH + rb.i0 + r
		if sum > 0 && !math.IsInf(sum, 0) && math.Abs(sum-1) <= lseFixMax(f.lse[e]) {
			f.corr[e] = float32(1 / sum)
		}
	}
}
