package flashattn

import "math"

// scores.go turns the raw products S = Q·Kᵀ of one tile row into the scores
// x of SPEC §1: scale, softcap, ALiBi bias, mask. The common case (no
// softcap, no ALiBi, tile fully visible) skips this pass: the scale is then
// folded into the exponential by the caller.

// needsScorePass reports whether rows of a tile must go through scoreRow.
func (p *problem) needsScorePass(full bool) bool {
	return !full || p.softcap > 0 || p.alibi != nil
}

// scoreRow rewrites row (raw dot products of query row i with keys j0,
// j0+1, ...) into final scores. If g is not nil and softcap is on, g[c]
// receives d(score)/d(scaled raw score) = 1 - tanh², for the backward pass.
// If masked is true the band is applied per element.
func (p *problem) scoreRow(row, g []float32, s *sequence, h, i, j0 int, masked bool) {
	scale := p.scale
	if c := p.softcap; c > 0 {
		inv := float64(scale / c)
		for j, x := range row {
			t := math.Tanh(float64(x) * inv)
			row[j] = c * float32(t)
			if g != nil {
				g[j] = float32(1 - t*t)
			}
		}
	} else {
		for j := range row {
			row[j] *= scale
		}
	}
	if slope := p.slope(s.b, h); p.alibi != nil {
		pos := i + s.band.off - j0 // key index of the diagonal, relative to j0
		for j := range row {
			dist := pos - j
			if dist < 0 {
				dist = -dist
			}
			row[j] -= slope * float32(dist)
		}
	}
	if masked {
		s.band.maskRow(row, i, j0)
	}
}
