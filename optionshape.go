package flashattn

// optionshape.go checks the options that do not shape the sequences against
// the sequences a tiling made of the call's shape: per-head and per-sequence
// slices, the positions Offsets reach, what block masks, masks and score
// modifiers cover.

// checkSequences checks o against the call's sequences and query heads.
func (o *Options) checkSequences(seqs []sequence, heads int) error {
	for i, sq := range seqs {
		// Positions reaching unbounded would read as "no window limit".
		if f := o.Offsets; f != nil && (f.Query+sq.nqAll > MaxPosition || f.Key+sq.nk > MaxPosition) {
			return argErr("Options.Offsets", "Offsets {%d, %d} place rows or keys of sequence %d beyond MaxPosition (%d)", f.Query, f.Key, i, MaxPosition)
		}
	}
	if n := len(o.Sinks); o.Sinks != nil && n != heads {
		return argErr("Options.Sinks", "Sinks has %d logits, want %d (one per query head)", n, heads)
	}
	if n := len(o.ALiBi); n != 0 && n != heads && n != len(seqs)*heads {
		return argErr("Options.ALiBi", "ALiBi has %d slopes, want %d ([heads]) or %d ([batch, heads])", n, heads, len(seqs)*heads)
	}
	if m := o.BlockMask; m != nil {
		if err := checkBlockMask(m, seqs, heads); err != nil {
			return err
		}
	}
	if o.Mask == nil && o.ScoreMod == nil {
		return nil
	}
	nq, nk := 0, 0
	for _, sq := range seqs {
		nq, nk = max(nq, sq.qpos+sq.nq), max(nk, sq.kpos+sq.nk)
	}
	if err := checkCovers("Options.Mask", o.Mask, len(seqs), nq, nk); err != nil {
		return err
	}
	if err := checkCovers("Options.ScoreMod", o.ScoreMod, len(seqs), nq, nk); err != nil {
		return err
	}
	for _, x := range []struct {
		arg string
		x   any
	}{{"Options.Mask", o.Mask}, {"Options.ScoreMod", o.ScoreMod}} {
		if d, ok := x.x.(callerData); ok {
			if n := d.dataHeads(); n != 1 && n != heads {
				return argErr(x.arg, "%s holds data for %d heads, want 1 or %d", x.arg, n, heads)
			}
		}
	}
	return nil
}

// callerData is implemented by the masks and score modifiers that read the
// caller's memory during a call (Bias): the overlap rule checks that memory
// against the call's outputs, and its heads against the call's.
type callerData interface {
	// dataRegion is the caller memory read during a call.
	dataRegion() region
	// dataHeads is the number of heads the data holds (1 broadcasts).
	dataHeads() int
}

// checkBlockMask checks that m covers every sequence and head.
func checkBlockMask(m *BlockMask, seqs []sequence, heads int) error {
	s := m.shape
	switch {
	case s.Batch != 1 && s.Batch != len(seqs):
		return argErr("Options.BlockMask", "BlockMask has batch %d, want 1 or %d", s.Batch, len(seqs))
	case s.Heads != 1 && s.Heads != heads:
		return argErr("Options.BlockMask", "BlockMask has %d heads, want 1 or %d", s.Heads, heads)
	}
	for b, sq := range seqs {
		if sq.qpos+sq.nq > s.SeqQ || sq.kpos+sq.nk > s.SeqK {
			return argErr("Options.BlockMask", "BlockMask covers %d × %d positions, but sequence %d reaches query position %d and key position %d", s.SeqQ, s.SeqK, b, sq.qpos+sq.nq, sq.kpos+sq.nk)
		}
	}
	return nil
}
