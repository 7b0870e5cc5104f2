package flashattn

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
	row := grow(&ws.conv.out, p.dim)
	for b := range p.seqs {
		s := &p.seqs[b]
		first := int(cs.end[b]) - s.k0 // key index of the first new key
		for i := 0; i < cs.snew; i++ {
			tb, r := p.keyAt(s, first+i)
			for hk := 0; hk < p.kvHeads; hk++ {
				p.knew.rowTo(row, b, i, hk, Float32, &p.kern)
				if cs.rotary != nil {
					cs.rotary.rotate(row, first+i)
				}
				if err := p.k.storeRow(row, tb, r, hk, &p.kern); err != nil {
					return argErr("Options.KVCache.KNew", "KVCache.KNew[%d, %d, %d] cannot be stored in the q8_0 cache: %v", b, i, hk, err)
				}
				p.vnew.rowTo(row, b, i, hk, Float32, &p.kern)
				if err := p.v.storeRow(row, tb, r, hk, &p.kern); err != nil {
					return argErr("Options.KVCache.VNew", "KVCache.VNew[%d, %d, %d] cannot be stored in the q8_0 cache: %v", b, i, hk, err)
				}
			}
		}
	}
	return nil
}
