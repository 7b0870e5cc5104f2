package flashattn

// scores.go turns the products S = (scale·Q)·Kᵀ of one tile row into the
// scores x of SPEC §1: softcap, ALiBi bias, mask. The scale is folded into
// the packed Q tile, so the common case (no softcap, no ALiBi, tile fully
// visible) needs no pass over the scores at all.

// needsScorePass reports whether rows of a tile must go through scoreRow.
func (p *problem) needsScorePass(full bool) bool {
	return !full || p.softcap > 0 || p.alibi != nil
}

// scoreRow rewrites row (scaled dot products of query row i with keys j0,
// j0+1, ...; the first n are real, the rest padding up to the kernel width)
// into final scores. The caller sets the padding to -Inf afterwards. If g is
// not nil and softcap is on, g[c] receives d(score)/d(scaled dot product) =
// 1 - tanh², for the backward pass. If masked is true the band is applied
// per element.
func (p *problem) scoreRow(row []float32, n int, g []float32, s *sequence, h, i, j0 int, masked bool) {
	if c := p.softcap; c > 0 {
		p.impl.Softcap(row, g, c)
	}
	full := row
	row = row[:n]
	if p.alibi != nil {
		// Bias −slope·|i + Sk − Sq − j|, on the padded row (the caller
		// masks the padding).
		p.impl.ALiBi(full, p.slope(s.b, h), float32(i+s.band.off-j0))
	}
	if masked {
		s.band.maskRow(row, i, j0)
	}
}
