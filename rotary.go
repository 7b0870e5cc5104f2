package flashattn

// rotary.go applies the rotary position embedding of a KV-cache call (see
// Rotary).

// rotate rotates the r.Dim channels of row x from channel r.Offset to
// position pos, in float32, as flash-attn does.
func (r *Rotary) rotate(x []float32, pos int) {
	x = x[r.Offset:]
	half := r.Dim / 2
	cos, sin := r.Cos[pos*half:(pos+1)*half], r.Sin[pos*half:(pos+1)*half]
	for t := range half {
		i, j := t, t+half
		if r.Interleaved {
			i, j = 2*t, 2*t+1
		}
		a, b := x[i], x[j]
		x[i] = a*cos[t] - b*sin[t]
		x[j] = a*sin[t] + b*cos[t]
	}
}

// queryPos is the rotary position of query row i of sequence s: its
// absolute cache position, SeqLens (+ i), LeftPad included, as flash-attn
// rotates.
func (p *plan) queryPos(s *sequence, i int) int {
	pos := int(p.cache.end[s.b])
	if p.cache.ropeCausal {
		pos += i
	}
	return pos
}
