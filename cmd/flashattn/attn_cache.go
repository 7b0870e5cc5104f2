package main

import (
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/flashattn/flashattn"
)

// cacheFlags are the KV-cache decoding flags of "flashattn attn" beyond
// -cache-seqlens and -block-table (flash-attn's flash_attn_with_kvcache).
type cacheFlags struct {
	kNew, vNew       string
	cuKNew           string
	rotCos, rotSin   string
	rotInterleaved   bool
	rotOffset        int // -rotary-offset: the first rotated channel
	batchIdx, leftPd string
	kvDtype          string
	kScale, vScale   float64 // -k-scale, -v-scale: the fp8 caches' per-tensor scales
	numSplits        int
}

// maxNumSplits bounds -num-splits, as flash-attn's split-KV kernels do.
const maxNumSplits = 128

func (c *cacheFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.kNew, "k-new", "", "KV cache: new keys `k_new.npy` [batch, seqlen_new, kv_heads, headdim], appended in place at each sequence's cache_seqlens "+
		"(rotated first with -rotary-cos); the updated caches are written to OUTDIR/k_cache.npy and v_cache.npy, in the cache's type "+
		"('<f4' for f32, bf16, q8_0, q4_0 and fp8 — the dequantised values, times -k-scale and -v-scale —, '<f2' for f16)")
	fs.StringVar(&c.cuKNew, "cu-seqlens-k-new", "", "KV cache with -cu-seqlens-q (continuous batching): int32 `cu_k_new.npy` [batch+1] of sequence starts in "+
		"-k-new and -v-new, then packed [total_new, kv_heads, headdim]; sequence b's new keys are appended at its cache_seqlens (a sequence may have none)")
	fs.StringVar(&c.vNew, "v-new", "", "KV cache: new values `v_new.npy`, shaped like -k-new with the v cache's head dim (which may differ from k's, as in MLA)")
	fs.StringVar(&c.rotCos, "rotary-cos", "", "KV cache: rotary embedding cosines `cos.npy` [max_pos, rotary_dim/2], applied to q and -k-new at their positions (q also without -k-new)")
	fs.StringVar(&c.rotSin, "rotary-sin", "", "KV cache: rotary embedding sines `sin.npy`, shaped like -rotary-cos")
	fs.BoolVar(&c.rotInterleaved, "rotary-interleaved", false, "rotate channel pairs (0,1), (2,3)… (GPT-J) instead of (i, i+rotary_dim/2) (GPT-NeoX)")
	fs.IntVar(&c.rotOffset, "rotary-offset", 0, "rotate the rotary_dim channels from channel `N` (even; 0: the first ones; MLA's last 64 of 576: 512), the others pass through")
	fs.StringVar(&c.batchIdx, "cache-batch-idx", "", "KV cache: int32 `idx.npy` [batch], the cache row of each sequence (not with -block-table)")
	fs.StringVar(&c.leftPd, "cache-leftpad", "", "KV cache: int32 `pad.npy` [batch], the first valid cache position of each sequence")
	fs.StringVar(&c.kvDtype, "kv-dtype", "", "KV cache: element `type` the cache k, v are converted to before the call: f32, bf16, f16, q8_0 or q4_0 "+
		"(llama.cpp's blocks of 32 int8 with an fp16 scale; headdim a multiple of 32), fp8_e4m3 or fp8_e5m2 (vLLM's fp8 caches, OCP e4m3fn and e5m2, "+
		"with -k-scale and -v-scale) (default: -dtype); a 16-bit cache makes the products 16-bit")
	fs.Float64Var(&c.kScale, "k-scale", 1, "KV cache: the fp8 k cache's per-tensor `scale` (vLLM's k_scale): it stores k/scale, reads stored·scale")
	fs.Float64Var(&c.vScale, "v-scale", 1, "KV cache: the fp8 v cache's per-tensor `scale` (v_scale)")
	fs.IntVar(&c.numSplits, "num-splits", 0, fmt.Sprintf("KV cache: split each sequence's keys into `N` parts merged by their LSE (0: chosen; at most %d)", maxNumSplits))
}

// validate checks the flag combinations; f holds the other attn flags.
func (c *cacheFlags) validate(f *attnFlags) error {
	cache := f.cacheSeqlens != ""
	for _, x := range []struct {
		name string
		set  bool
	}{
		{"-k-new", c.kNew != ""}, {"-v-new", c.vNew != ""}, {"-cu-seqlens-k-new", c.cuKNew != ""}, {"-rotary-cos", c.rotCos != ""}, {"-rotary-sin", c.rotSin != ""},
		{"-cache-batch-idx", c.batchIdx != ""}, {"-cache-leftpad", c.leftPd != ""}, {"-kv-dtype", c.kvDtype != ""},
		{"-num-splits", f.set["num-splits"]}, {"-rotary-interleaved", f.set["rotary-interleaved"]}, {"-rotary-offset", f.set["rotary-offset"]},
		{"-k-scale", f.set["k-scale"]}, {"-v-scale", f.set["v-scale"]},
	} {
		if x.set && !cache {
			return fmt.Errorf("%s needs -cache-seqlens", x.name)
		}
	}
	for _, x := range []struct {
		name  string
		scale float64
	}{{"-k-scale", c.kScale}, {"-v-scale", c.vScale}} {
		switch {
		case f.set[x.name[1:]] && !strings.HasPrefix(c.kvDtype, "fp8_"):
			return fmt.Errorf("%s needs -kv-dtype fp8_e4m3 or fp8_e5m2", x.name)
		// A normal float32: a smaller scale saturates every stored value
		// (and one below float32's range would become 0, meaning 1).
		case !(x.scale >= 0x1p-126) || x.scale > math.MaxFloat32:
			return fmt.Errorf("%s %v: want a finite scale > 0, a normal float32 (at least %v)", x.name, x.scale, float32(0x1p-126))
		}
	}
	switch {
	case (c.kNew == "") != (c.vNew == ""):
		return fmt.Errorf("-k-new and -v-new must be given together")
	case (c.rotCos == "") != (c.rotSin == ""):
		return fmt.Errorf("-rotary-cos and -rotary-sin must be given together")
	case f.set["rotary-interleaved"] && c.rotCos == "":
		return fmt.Errorf("-rotary-interleaved needs -rotary-cos and -rotary-sin")
	case f.set["rotary-offset"] && c.rotCos == "":
		return fmt.Errorf("-rotary-offset needs -rotary-cos and -rotary-sin")
	case c.rotOffset < 0 || c.rotOffset%2 != 0:
		return fmt.Errorf("-rotary-offset %d: want an even channel ≥ 0", c.rotOffset)
	case c.batchIdx != "" && f.blockTable != "":
		return fmt.Errorf("-cache-batch-idx cannot be combined with -block-table")
	case c.cuKNew != "" && (c.kNew == "" || f.cuQ == ""):
		return fmt.Errorf("-cu-seqlens-k-new needs -k-new, -v-new and -cu-seqlens-q (packed new keys of packed queries)")
	case c.kNew != "" && f.cuQ != "" && c.cuKNew == "":
		return fmt.Errorf("-k-new with -cu-seqlens-q needs -cu-seqlens-k-new (which rows of the packed new keys are each sequence's)")
	}
	// -num-splits's range and -rotary-offset's against the head dim are
	// the library's to check.
	return nil
}

// inputs lists the files the flags name.
func (c *cacheFlags) inputs() []string {
	return []string{c.kNew, c.vNew, c.cuKNew, c.rotCos, c.rotSin, c.batchIdx, c.leftPd}
}

// readCache reads the KV-cache files and checks their shapes against the
// batch nb and the cache tensor's shape ks. Their values
// (block numbers, cache rows, lengths, padding, rotary positions) are the
// library's to check: it refuses them with an *ArgError that argFile maps
// back to the file.
func (f *attnFlags) readCache(nb int, ks []int) (*flashattn.KVCache, error) {
	c := &flashattn.KVCache{NumSplits: f.cache.numSplits}
	lens, err := f.readPerSeq(f.cacheSeqlens, nb)
	if err != nil {
		return nil, err
	}
	if f.blockTable != "" {
		table, tshape, err := f.rd.ReadInt32(f.blockTable)
		if err != nil {
			return nil, err
		}
		if len(tshape) != 2 || tshape[0] != nb || tshape[1] < 1 {
			return nil, fmt.Errorf("%s: shape %v, want [%d, blocks_per_seq]", f.blockTable, tshape, nb)
		}
		// The mask geometry multiplies blocks per sequence by the block
		// size: keep it within the 2^31 keys an int32 length can count.
		if int64(tshape[1]) > math.MaxInt32/int64(ks[1]) {
			return nil, fmt.Errorf("%s: %d blocks of %d keys per sequence is more keys than a cache can hold (2^31)", f.blockTable, tshape[1], ks[1])
		}
		c.BlockTable, c.BlocksPerSeq = table, tshape[1]
	}
	if f.cache.batchIdx != "" {
		if c.BatchIdx, err = f.readPerSeq(f.cache.batchIdx, nb); err != nil {
			return nil, err
		}
	}
	if f.cache.kNew != "" {
		if err := f.readNew(c); err != nil {
			return nil, err
		}
	}
	c.SeqLens = lens
	if f.cache.leftPd != "" {
		if c.LeftPad, err = f.readPerSeq(f.cache.leftPd, nb); err != nil {
			return nil, err
		}
	}
	if f.cache.rotCos != "" {
		if c.Rotary, err = f.readRotary(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// readPerSeq reads an int32 [nb] file: one entry per sequence.
func (f *attnFlags) readPerSeq(path string, nb int) ([]int32, error) {
	x, shape, err := f.rd.ReadInt32(path)
	if err != nil {
		return nil, err
	}
	if len(shape) != 1 || shape[0] != nb {
		return nil, fmt.Errorf("%s: shape %v, want [%d] (one entry per sequence)", path, shape, nb)
	}
	return x, nil
}

// readNew reads -k-new and -v-new ([batch, snew, kv_heads, headdim], or
// packed [total_new, kv_heads, headdim] with -cu-seqlens-k-new, in -dtype)
// into c; the library checks their shapes against q and the cache, and
// the cu_seqlens.
func (f *attnFlags) readNew(c *flashattn.KVCache) error {
	packed := f.cache.cuKNew != ""
	if packed {
		var err error
		if c.CuSeqlensKNew, err = f.readCu(f.cache.cuKNew); err != nil {
			return err
		}
	}
	for i, path := range []string{f.cache.kNew, f.cache.vNew} {
		a, err := f.rd.ReadFloat(path)
		if err != nil {
			return err
		}
		shape := a.Shape
		switch {
		case packed && len(shape) != 3:
			return fmt.Errorf("%s: shape %v, want 3 dimensions [total_new, kv_heads, headdim] (packed, -cu-seqlens-k-new)", path, a.Shape)
		case packed:
			shape = append([]int{1}, shape...)
		case len(shape) != 4:
			return fmt.Errorf("%s: shape %v, want 4 dimensions [batch, seqlen_new, kv_heads, headdim]", path, a.Shape)
		}
		t, err := arrayTensor(path, a, [4]int(shape), f.dt, 0)
		if err != nil {
			return err
		}
		if i == 0 {
			c.KNew = t
		} else {
			c.VNew = t
		}
	}
	return nil
}

// readRotary reads -rotary-cos and -rotary-sin: [max_pos, rotary_dim/2]
// tables of one shape. The library checks rotary_dim against the head dim,
// that they cover the positions used and that those rows are finite.
func (f *attnFlags) readRotary() (*flashattn.Rotary, error) {
	var tables [2][]float32
	var shape []int
	for i, path := range []string{f.cache.rotCos, f.cache.rotSin} {
		a, err := f.rd.ReadFloat(path)
		if err != nil {
			return nil, err
		}
		switch {
		case len(a.Shape) != 2:
			return nil, fmt.Errorf("%s: shape %v, want [max_pos, rotary_dim/2]", path, a.Shape)
		case i == 1 && (a.Shape[0] != shape[0] || a.Shape[1] != shape[1]):
			return nil, fmt.Errorf("%s: shape %v, want the shape of %s %v", path, a.Shape, f.cache.rotCos, shape)
		}
		shape = a.Shape
		tables[i] = floats32(a)
	}
	return &flashattn.Rotary{Cos: tables[0], Sin: tables[1], Dim: 2 * shape[1], Interleaved: f.cache.rotInterleaved, Offset: f.cache.rotOffset}, nil
}
