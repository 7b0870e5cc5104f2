package flashattn

// rotary.go applies the rotary position embedding of a KV-cache call (see
// Rotary) and appends the new keys and values to the cache.

// rotate rotates the first r.Dim channels of row x to position pos, in
// float32, as flash-attn does.
func (r *Rotary) rotate(x []float32, pos int) {
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

// queryPos is the rotary position of query row i of sequence s.
func (p *plan) queryPos(s *sequence, i int) int {
	pos := int(p.cache.end[s.b]) - s.k0
	if p.cache.ropeCausal {
		pos += i
	}
	return pos
}

// appendKV writes the new keys (rotated) and values of every sequence into
// the cache at positions SeqLens[b]...
func (c *call) appendKV() error {
	p := &c.plan
	cs := &p.cache
	if cs.snew == 0 {
		return nil
	}
	ws := workspaces.get()
	defer workspaces.put(ws)
	row := grow(&ws.convO, p.dim)
	for b := range p.seqs {
		s := &p.seqs[b]
		first := int(cs.end[b]) - s.k0 // key index of the first new key
		for i := 0; i < cs.snew; i++ {
			tb, r := p.kv.at(s, first+i)
			for hk := 0; hk < p.kvHeads; hk++ {
				cs.knew.rowTo(row, b, i, hk, Float32, &p.kern)
				if cs.rotary != nil {
					cs.rotary.rotate(row, first+i)
				}
				if err := p.kv.k.storeRow(row, tb, r, hk, &p.kern); err != nil {
					return argErr("Options.KVCache.KNew", "KVCache.KNew[%d, %d, %d] cannot be stored in the q8_0 cache: %v", b, i, hk, err)
				}
				cs.vnew.rowTo(row, b, i, hk, Float32, &p.kern)
				if err := p.kv.v.storeRow(row, tb, r, hk, &p.kern); err != nil {
					return argErr("Options.KVCache.VNew", "KVCache.VNew[%d, %d, %d] cannot be stored in the q8_0 cache: %v", b, i, hk, err)
				}
			}
		}
	}
	return nil
}
