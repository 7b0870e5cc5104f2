package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
)

// maskFlags are attn's block-sparse and document-mask flags.
type maskFlags struct {
	blockMask              string
	maskBlockQ, maskBlockK int
	segQ, segK             string
}

func (m *maskFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.blockMask, "block-mask", "", "block-sparse mask `mask.npy`: uint8, int8 or bool [heads (1 or H), ⌈seqlen_q/BQ⌉, ⌈seqlen_k/BK⌉], "+
		"nonzero = the block is visible; combined (AND) with the other masks. With -cu-seqlens-q/-k rows and columns count from "+
		"each sequence's start and seqlen is the longest sequence; with a KV cache seqlen_k is the cache's capacity")
	fs.IntVar(&m.maskBlockQ, "mask-block-q", flashattn.DefaultMaskBlock, "rows per block of -block-mask, `BQ` (independent of the kernel tiles; the last block may be short)")
	fs.IntVar(&m.maskBlockK, "mask-block-k", flashattn.DefaultMaskBlock, "keys per block of -block-mask, `BK`")
	fs.StringVar(&m.segQ, "segment-ids-q", "", "document masking: int32 `ids_q.npy` [batch, seqlen_q] of query segment ids (with -cu-seqlens-q/-k: "+
		"packed [total_q], each sequence's ids in its rows); key j is visible to query i only when their ids are equal, and a "+
		"negative id is padding that sees nothing and that nothing sees")
	fs.StringVar(&m.segK, "segment-ids-k", "", "int32 `ids_k.npy` [batch, seqlen_k] of key segment ids (with -cu-seqlens-q/-k: packed [total_k]; "+
		"with a KV cache [batch, capacity]); needs -segment-ids-q")
}

// validate checks the mask flags that need no file; set holds the flags
// given on the command line.
func (m *maskFlags) validate(set map[string]bool) error {
	switch {
	case m.maskBlockQ < 1:
		return fmt.Errorf("-mask-block-q %d: must be ≥ 1", m.maskBlockQ)
	case m.maskBlockK < 1:
		return fmt.Errorf("-mask-block-k %d: must be ≥ 1", m.maskBlockK)
	case m.blockMask == "" && set["mask-block-q"]:
		return fmt.Errorf("-mask-block-q needs -block-mask")
	case m.blockMask == "" && set["mask-block-k"]:
		return fmt.Errorf("-mask-block-k needs -block-mask")
	case (m.segQ == "") != (m.segK == ""):
		return fmt.Errorf("-segment-ids-q and -segment-ids-k must be given together")
	}
	return nil
}

// maskGeometry is what the mask files must fit: the number of query heads,
// the sequences (their query and key counts) and the lengths the masks
// cover (the longest sequence with varlen, the cache's capacity for keys
// with a KV cache).
type maskGeometry struct {
	heads      int
	nq, nk     []int // per sequence; nil for a dense batch
	batch      int
	seqQ, seqK int
	varlen     bool
}

// blocks is ⌈n/b⌉ for n ≥ 1, b ≥ 1, without overflow.
func blocks(n, b int) int { return (n-1)/b + 1 }

// load reads the mask files into o.BlockMask and o.Mask.
func (m *maskFlags) load(f *attnFlags, o *flashattn.Options, g maskGeometry) error {
	if m.blockMask != "" {
		table, shape, err := f.rd.ReadBytes(m.blockMask)
		if err != nil {
			return err
		}
		nqb, nkb := blocks(g.seqQ, m.maskBlockQ), blocks(g.seqK, m.maskBlockK)
		if len(shape) != 3 || (shape[0] != 1 && shape[0] != g.heads) || shape[1] != nqb || shape[2] != nkb {
			return fmt.Errorf("%s: shape %v, want [1 or %d, %d, %d] (mask heads, ⌈%d/%d⌉ query blocks, ⌈%d/%d⌉ key blocks)",
				m.blockMask, shape, g.heads, nqb, nkb, g.seqQ, m.maskBlockQ, g.seqK, m.maskBlockK)
		}
		bs := flashattn.BlockShape{Batch: 1, Heads: shape[0], SeqQ: g.seqQ, SeqK: g.seqK, BlockQ: m.maskBlockQ, BlockK: m.maskBlockK}
		if o.BlockMask, err = flashattn.BlockMaskFromTable(bs, table); err != nil {
			return fmt.Errorf("%s: %v", m.blockMask, cleanErr(err))
		}
	}
	if m.segQ == "" {
		return nil
	}
	idsQ, err := m.readIDs(f, m.segQ, g, g.nq, g.seqQ, "q")
	if err != nil {
		return err
	}
	idsK, err := m.readIDs(f, m.segK, g, g.nk, g.seqK, "k")
	if err != nil {
		return err
	}
	if o.Mask, err = flashattn.Documents(idsQ, idsK, g.seqQ, g.seqK); err != nil {
		return fmt.Errorf("%s: %v", m.segQ, cleanErr(err)) // the shapes were checked: not reached
	}
	return nil
}

// readIDs reads a segment-id file and returns the ids in the [batch, seq]
// layout that flashattn.Documents takes: as read for a dense batch; for
// varlen, the packed [total] ids of each sequence copied to its row and the
// rest of the row padded with -1 (never read: no sequence reaches it).
func (m *maskFlags) readIDs(f *attnFlags, path string, g maskGeometry, lens []int, seq int, side string) ([]int32, error) {
	ids, shape, err := f.rd.ReadInt32(path)
	if err != nil {
		return nil, err
	}
	if !g.varlen {
		if len(shape) != 2 || shape[0] != g.batch || shape[1] != seq {
			return nil, fmt.Errorf("%s: shape %v, want [%d, %d] (batch, seqlen_%s)", path, shape, g.batch, seq, side)
		}
		return ids, nil
	}
	total := 0
	for _, n := range lens {
		total += n
	}
	if len(shape) != 1 || shape[0] != total {
		return nil, fmt.Errorf("%s: shape %v, want [%d] (packed total_%s, with -cu-seqlens-%s)", path, shape, total, side, side)
	}
	size := memlimit.Mul(len(lens), seq, 4)
	if err := f.rd.Limit.Check(path+" padded to [batch, longest sequence]", size); err != nil {
		return nil, err
	}
	out := make([]int32, len(lens)*seq)
	off := 0
	for b, n := range lens {
		row := out[b*seq : (b+1)*seq]
		copy(row, ids[off:off+n])
		for i := n; i < seq; i++ {
			row[i] = -1
		}
		off += n
	}
	return out, nil
}

// inputs are the mask files, for the memory check.
func (m *maskFlags) inputs() []string { return []string{m.blockMask, m.segQ, m.segK} }

// argFile maps a library argument error to the file or flag it came from,
// so that the message names what the user gave.
func (f *attnFlags) argFile(err error) error {
	var ae *flashattn.ArgError
	if !errors.As(err, &ae) {
		return cleanErr(err)
	}
	names := map[string]string{
		"q": f.q, "k": f.k, "v": f.v, "dout": f.dout,
		"Options.ALiBi": f.alibi, "Options.VarLen.CuSeqlensQ": f.cuQ, "Options.VarLen.CuSeqlensK": f.cuK,
		"Options.VarLen.SeqUsedK": f.seqUsedK, "Options.VarLen.SeqUsedQ": f.seqUsedQ, "Options.KVCache.SeqLens": f.cacheSeqlens,
		"Options.Sinks": f.sinks, "Options.ScoreMod": f.bias, "dlse": f.dlse,
		"Options.KVCache.BlockTable": f.blockTable, "Options.KVCache.BlocksPerSeq": f.blockTable,
		"Options.BlockMask": f.masks.blockMask, "Options.Mask": f.masks.segQ,
		"Options.Scale": "-scale", "Options.Softcap": "-softcap", "Options.Dropout": "-dropout",
		"Options.Window": "-window-left/-window-right", "Options.Workers": "-workers",
		"Options.KVCache.KNew": f.cache.kNew, "Options.KVCache.VNew": f.cache.vNew, "Options.KVCache.Rotary": f.cache.rotCos,
		"Options.KVCache.BatchIdx": f.cache.batchIdx, "Options.KVCache.LeftPad": f.cache.leftPd, "Options.KVCache.NumSplits": "-num-splits",
		"Options.KVCache": "-cache-seqlens", "Options.KVCache.CuSeqlensKNew": f.cache.cuKNew,
	}
	if name := names[ae.Arg]; name != "" {
		// The one message about both cu_seqlens (their lengths differ)
		// names both files.
		if ae.Arg == "Options.VarLen.CuSeqlensQ" && strings.Contains(ae.Msg, "CuSeqlensK") && f.cuK != f.cuQ {
			name += " and " + f.cuK
		}
		return fmt.Errorf("%s: %s", name, ae.Msg)
	}
	return cleanErr(err)
}
