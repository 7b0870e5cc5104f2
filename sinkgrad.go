package flashattn

import "math"

// sinkgrad.go is the gradient of the learnable sinks. The sink of head h
// is a key of logit sink_h and value 0, so its dP is 0 and
//
//	dsink_h = Σ_i P_sink,i·(dLSE_i − D_i),  P_sink,i = exp(sink_h − LSE_i)/c_i
//
// (c_i the LSE correction of lsefix.go, 1 for most rows), D_i = dO_i·O_i.
// The rows pass forms D_i from the output as given. A 16-bit output is
// O rounded to the type, which puts u·‖dO_i‖·‖O_i‖ (u = 2⁻⁸ for bf16) into
// D_i and every row's error into dsink_h, where the same-type plain
// algorithm sums P·dP in float32. So with a 16-bit output the pass that sums
// dQ (gradRow) also sums, in float64 from its float32 P and dP,
//
//	Σ_j P_ij·dP_ij = dO_i·Σ_j P_ij·V_j   and   Σ_j P_ij
//
// over the call's keys. Where the second plus P_sink,i is 1 (within
// sinkWholeRow) the call holds the whole row and the first is D_i from a
// float32 O; where it is not (a shard of the keys, with the merged O and
// LSE: ring attention) the first is only the shard's part of D_i, and the
// output's D_i is kept.

// sinkWholeRow is how far from 1 a row's probability mass (its keys' and
// its sink's) may be for the row to count as whole: far above what a
// float32 LSE and float32 probabilities leave (about 1e-6, lsefix.go
// corrects the rest), far below the 2⁻¹¹ relative of fp16's O rounding.
const sinkWholeRow = 0x1p-16

// sinkRow is what the sink gradient keeps of one query row: dO·O from the
// output as given, and with a 16-bit output the call's Σ_j P_j·dP_j and
// Σ_j P_j.
type sinkRow struct {
	o, dot, mass float64
}

// sinkRows returns the per-row records of the sink gradient (one per LSE
// entry, zeroed), or nil when the caller wants no sink gradient or there
// are no sinks. The bias gradient (dbias.go) uses them too, with a 16-bit
// output: its dS = P∘(dP − D) takes D as the sink gradient does.
func (b *backwardPass) sinkRows() []sinkRow {
	g := &b.grads
	if (g.dsinks == nil || g.sinks == nil) && (g.dbias == nil || g.o.dt == Float32) {
		return nil
	}
	d := grow(&b.mem.sinkD, b.p.lseLen)
	clear(d)
	return d
}

// addSinkD adds Σ_j P_j·dP_j and Σ_j P_j of one score row (the row's n
// keys of a block) to row i's record, when this pass keeps them.
func (hr *headRows) addSinkD(i int, p, dp []float32) {
	if hr.sinkD == nil {
		return
	}
	var dot, mass float64
	for c, x := range p {
		dot += float64(x) * float64(dp[c])
		mass += float64(x)
	}
	hr.sinkD[i].dot += dot
	hr.sinkD[i].mass += mass
}

// storeSinks forms the sink gradient row by row, head by head in sequence
// and row order (so the sum does not depend on the workers), into the
// caller's DSinks: overwriting it, or adding to it (Grads.Accumulate).
func (b *backwardPass) storeSinks() {
	p, g := b.p, &b.grads
	if g.dsinks == nil {
		return
	}
	if g.sinks == nil {
		if !g.accumulate {
			clear(g.dsinks) // no sinks: their gradient is 0
		}
		return
	}
	for h := range g.dsinks {
		var sum float64
		for si := range p.seqs {
			s := &p.seqs[si]
			for i := 0; i < s.nq; i++ {
				e := s.lse0 + h*s.lseH + i
				lse := float64(g.lse[e])
				if math.IsInf(lse, -1) {
					continue // no key and no sink: nothing to differentiate
				}
				ps := b.sinkProb(h, e)
				d := b.rowD(e, ps)
				var dl float64
				if g.dlse != nil {
					dl = float64(g.dlse[e])
				}
				sum += ps * (dl - d)
			}
		}
		if g.accumulate {
			sum += float64(g.dsinks[h])
		}
		g.dsinks[h] = float32(sum)
	}
}

// sinkProb returns P_sink of LSE entry e of head h (0 without sinks).
func (b *backwardPass) sinkProb(h, e int) float64 {
	g := &b.grads
	if g.sinks == nil {
		return 0
	}
	ps := math.Exp(float64(g.sinks[h]) - float64(g.lse[e]))
	if b.corr != nil {
		ps *= float64(b.corr[e])
	}
	return ps
}

// rowD returns D of LSE entry e, whose sink probability is ps: dO·O from
// the output as given, or with a 16-bit output, where the call holds the
// whole row, the call's Σ_j P_j·dP_j.
func (b *backwardPass) rowD(e int, ps float64) float64 {
	r := b.sinkD[e]
	if b.grads.o.dt != Float32 && math.Abs(r.mass+ps-1) <= sinkWholeRow {
		return r.dot
	}
	return r.o
}
