package flashattn

import (
	"math"
	"reflect"
)

// Options selects what attention computes and how it is run. The zero value
// is plain, non-causal softmax attention with scale 1/sqrt(headdim), run on
// GOMAXPROCS workers. The fields that say what is computed have the
// meaning of the same option in flash-attn's Python API (BlockMask, Mask and
// ScoreMod: of PyTorch's FlexAttention); Workers, BlockQ, BlockK and
// CacheBytes only tune how it is run (the tile sizes may change the
// rounding, never the function).
//
// The score of query row i against key j goes through these steps, in order:
//
//	x = Scale·(Q[i]·K[j])
//	x = Softcap·tanh(x/Softcap)          if Softcap > 0
//	x = x − slope·|i + Sk − Sq − j|      if ALiBi is set (|i − j| with TopLeft)
//	x = ScoreMod(x)                      if ScoreMod is set
//	x = −Inf if j is hidden from i       Causal, Window, BlockMask, Mask (all combined)
//
// then P = softmax(x) over the row (and the sink, with Sinks) and O = P·V
// (with dropout on P). A row that sees no key gives O = 0 and LSE = −Inf
// (the sink's logit, with Sinks). With Offsets, i and j are the rows' and
// keys' positions in the longer sequence the call is a part of.
type Options struct {
	// Scale multiplies QKᵀ before the softmax. 0 means 1/sqrt(headdim).
	Scale float32

	// Causal masks key j for query row i unless j <= i + Sk - Sq (the mask
	// is aligned to the bottom-right corner, as in flash-attn ≥ 2.1; see
	// TopLeft and Offsets).
	Causal bool

	// TopLeft aligns Causal, Window and ALiBi's distances to the top-left
	// corner instead: query row i sits at key position i, so key j is
	// visible to row i when j <= i (causal) — PyTorch's and GoMLX's is_causal
	// when seqlen_q ≠ seqlen_k. With seqlen_q == seqlen_k both alignments are
	// the same.
	TopLeft bool

	// Offsets, if not nil, says where this call's query rows and keys sit
	// in a longer sequence, so that a shard of the sequence (ring attention,
	// context parallelism) computes exactly its part of the full attention:
	// row i is at position Offsets.Query+i and key j at Offsets.Key+j, and
	// Causal, Window, ALiBi, dropout, Mask, BlockMask and ScoreMod all see
	// those positions, top-left aligned (key position p is visible to query
	// position p' when p <= p', causally). Positions end at MaxPosition:
	// larger offsets are refused. Not with KVCache.
	Offsets *Offsets

	// Sinks, if not nil, holds one learnable attention-sink logit per query
	// head (gpt-oss), in the units of the scaled scores: each row's softmax
	// also sums exp(Sinks[h]), as if over a key whose value is zero, so
	// LSE_i = log(Σ_visible exp(x_ij) + exp(Sinks[h])) and
	// O_i = Σ_j exp(x_ij − LSE_i)·V_j. A row that sees no key gets O = 0 and
	// LSE = Sinks[h]. BackwardGrads returns their gradient.
	Sinks []float32

	// Window, if not nil, restricts row i to keys j with
	// i+Sk-Sq-Left <= j <= i+Sk-Sq+Right; -1 leaves that side unbounded.
	// Combined with Causal, both masks apply.
	Window *Window

	// Softcap, if > 0, replaces each scaled score x by Softcap*tanh(x/Softcap)
	// (Gemma 2, Grok).
	Softcap float32

	// ALiBi, if not nil, holds slopes of shape [heads] or [batch, heads]; the
	// bias -slope*|i + Sk - Sq - j| is added to the scaled scores.
	ALiBi []float32

	// Dropout is the probability of dropping each attention probability
	// (training). Survivors are scaled by 1/(1-Dropout). The mask is a pure
	// function of (Seed, batch, head, row, column): forward and backward
	// agree and repeated calls are bit-identical.
	Dropout float32
	// Seed seeds the dropout mask.
	Seed uint64

	// VarLen, if not nil, makes the call a variable-length batch: Q, K and V
	// are packed [total, heads, dim] tensors (Batch 1) and VarLen tells where
	// each sequence starts.
	VarLen *VarLen

	// KVCache, if not nil, reads K and V from a key/value cache with a
	// length per sequence, optionally paged (flash-attn's
	// flash_attn_with_kvcache). Forward only.
	KVCache *KVCache

	// Workers is the number of goroutines; 0 means GOMAXPROCS. They come
	// from a pool of GOMAXPROCS goroutines started on first use (the
	// calling goroutine is one of them), so larger values act as that.
	// Results are bit-identical for every worker count.
	Workers int

	// BlockMask, if not nil, makes attention block-sparse: key blocks it
	// marks empty are never read, full blocks are computed without a
	// per-element mask, and partial blocks apply the mask it was built
	// from. It combines (AND) with every other mask. Positions count from
	// each sequence's start (with VarLen too).
	BlockMask *BlockMask

	// Mask, if not nil, hides keys element by element (FlexAttention's
	// mask_mod), combined (AND) with the other masks. It is evaluated one
	// tile row at a time, only on tiles that are not decided as a whole;
	// masks that implement BlockClassifier (all the built-in ones) also let
	// whole tiles be skipped.
	Mask Mask

	// ScoreMod, if not nil, rewrites the scores after Scale, Softcap and
	// ALiBi and before the masks (FlexAttention's score_mod); it supplies
	// its own derivative for the backward pass.
	ScoreMod ScoreMod

	// BlockQ and BlockK override the tile sizes (rows of Q, rows of K/V per
	// tile); 0 derives them from the CPU's cache sizes.
	BlockQ, BlockK int

	// CacheBytes sizes the tiles, and the forward's query super-blocks,
	// for a cache of this many bytes instead of this machine's L2
	// (TileCacheBytes): to tune for another CPU, or to run what
	// CountTraffic counted for that cache. 0 means TileCacheBytes(); at
	// most 1 TiB. Like BlockQ and BlockK it may change the rounding of the
	// results (the tiles set the order of the sums).
	CacheBytes int
}

// Offsets places a call's query rows and keys in a longer sequence; see
// Options.Offsets. Both are ≥ 0, and Query + seqlen_q and Key + seqlen_k are
// at most MaxPosition.
type Offsets struct {
	Query, Key int
}

// Window is a sliding-window (local) attention mask; see Options.Window.
type Window struct {
	Left, Right int
}

// VarLen describes a variable-length batch (flash-attn's varlen functions).
// Sequence b's queries are rows CuSeqlensQ[b]..CuSeqlensQ[b+1]-1 of the
// packed Q, and its keys rows CuSeqlensK[b]..CuSeqlensK[b+1]-1 of K and V.
// With a KVCache (continuous batching, see KVCache) the keys are the
// cache's: CuSeqlensK and SeqUsedK must be nil.
type VarLen struct {
	CuSeqlensQ, CuSeqlensK []int32
	// SeqUsedK, if not nil, limits sequence b to its first SeqUsedK[b] keys
	// (flash-attn's seqused_k).
	SeqUsedK []int32
	// SeqUsedQ, if not nil, limits sequence b to its first SeqUsedQ[b]
	// query rows (flash-attn's seqused_q), for padded batches: the other
	// rows get O = 0, LSE = −Inf and dQ = 0.
	SeqUsedQ []int32
}

// KVCache describes keys and values held in a decoding cache
// (flash-attn's flash_attn_with_kvcache). The call's k and v are the cache.
//
// Without BlockTable, K and V are [cache_batch, cache_len, kv_heads, dim]
// and sequence b uses row BatchIdx[b] of them (b without BatchIdx). With
// BlockTable (a paged cache, as in vLLM and flash-attn), K and V are
// [num_blocks, block_size, kv_heads, dim]: cache position j of sequence b
// is row j % block_size of block BlockTable[b*BlocksPerSeq + j/block_size];
// block_size must be a multiple of 16.
//
// Sequence b's cache holds positions LeftPad[b] ≤ j < SeqLens[b] (LeftPad
// 0 without it). With KNew and VNew, their Snew rows are first written into
// the cache at positions SeqLens[b]..SeqLens[b]+Snew−1 (rotated by Rotary
// first, if set) — the cache tensors are modified in place — and attention
// covers positions LeftPad[b] ≤ j < SeqLens[b]+Snew. The caller advances
// SeqLens afterwards. Positions relative to the first valid one (j −
// LeftPad[b]) are the ones the masks and ALiBi see; Rotary, as in
// flash-attn, rotates at the absolute cache position j (LeftPad included).
//
// A 16-bit cache (bfloat16, float16) rounds a float32 q to its type before
// the products; a q8_0 or q4_0 cache does not (see "Mixed element types"
// on DType).
//
// With VarLen (continuous batching, as vLLM's scheduler runs a step), q is
// packed [1, total_q, heads, dim] with VarLen.CuSeqlensQ, the new keys and
// values packed with CuSeqlensKNew, and sequence b (cache row b, or its
// BatchIdx or BlockTable row) appends its new keys at SeqLens[b] and
// attends over its cache as for a dense call: the mask is aligned to the
// bottom-right corner of each sequence's queries and keys; O is packed
// like q and the LSE is [heads, total_q]. VarLen.CuSeqlensK and SeqUsedK
// are not used with a cache and must be nil.
//
// The call copies the slices it reads before it starts, so the caller may
// change them as soon as it returns (not while it runs); k and v must not
// be used by anything else while it runs.
type KVCache struct {
	SeqLens      []int32 // per sequence: where its cache ends (cache_seqlens)
	BlockTable   []int32 // [batch, BlocksPerSeq], nil for a contiguous cache
	BlocksPerSeq int

	// BatchIdx, if not nil, is the cache row of each batch element
	// (cache_batch_idx); not with BlockTable.
	BatchIdx []int32
	// LeftPad, if not nil, is the first valid cache position of each
	// sequence (cache_leftpad).
	LeftPad []int32

	// KNew and VNew, if set (both or neither), are the new keys and values
	// [batch, Snew, kv_heads, dim] to append before attending; with VarLen,
	// packed [1, total_new, kv_heads, dim] (see CuSeqlensKNew).
	KNew, VNew Tensor
	// CuSeqlensKNew (FA3's cu_seqlens_k_new), with VarLen and KNew only,
	// says which rows of the packed KNew and VNew are each sequence's new
	// keys: rows CuSeqlensKNew[b]..CuSeqlensKNew[b+1]-1, appended at
	// SeqLens[b].. (batch+1 entries from 0, never decreasing, ending at
	// total_new; a sequence may have none). Continuous batching: decode
	// rows, prompt chunks and speculative tokens of many sequences in one
	// call.
	CuSeqlensKNew []int32
	// Rotary, if not nil, rotates the queries and the new keys (rotary
	// position embedding, as flash-attn applies it); without new keys (no
	// KNew, or a sequence whose CuSeqlensKNew span is empty: a verification
	// step) the queries still rotate at their positions.
	Rotary *Rotary

	// NumSplits, if > 0, splits each sequence's keys into this many parts
	// (at most 128) computed in parallel and merged by their log-sum-exp
	// (split-K, flash-decoding); 0 chooses.
	NumSplits int
}

// Rotary is a rotary position embedding (RoPE) as flash-attn applies it in
// decoding. Cos and Sin are [max_pos, Dim/2] tables; Dim channels of each
// row rotate, from channel Offset (0: the first Dim), in pairs (2t, 2t+1)
// when Interleaved (GPT-J) or (t, t+Dim/2) otherwise (GPT-NeoX), t counted
// from Offset:
//
//	x' = x·cos[pos][t] − y·sin[pos][t],   y' = x·sin[pos][t] + y·cos[pos][t]
//
// New key i of sequence b is rotated at its cache position SeqLens[b] + i
// (flash-attn's positions: LeftPad does not shift them, so Cos and Sin need
// SeqLens[b] + max(Snew, query rows) positions); with a causal or window
// mask query row i is too, otherwise (also with Window{-1, -1}, which
// hides nothing: flash-attn's window_size (-1, -1) is not local) every
// query row is rotated at SeqLens[b].
type Rotary struct {
	Cos, Sin    []float32
	Dim         int // rotary_dim: even, Offset+Dim at most the head dim
	Interleaved bool
	// Offset is the first rotated channel: the channels Offset..Offset+Dim-1
	// rotate, the others pass through. 0 rotates the first Dim channels
	// (flash-attn); MLA (DeepSeek) rotates the last 64 of its 576 (Offset
	// 512, Dim 64). Even.
	Offset int
}

func (o *Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return workersDefault()
}

// validate checks the option values that do not depend on the shapes.
func (o *Options) validate() error {
	bad := func(f float32) bool { return math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) }
	switch {
	case bad(o.Scale) || o.Scale < 0:
		return argErr("Options.Scale", "Scale %v must be a finite number > 0 (or 0 for 1/sqrt(headdim))", o.Scale)
	case bad(o.Softcap) || o.Softcap < 0:
		return argErr("Options.Softcap", "Softcap %v must be a finite number ≥ 0", o.Softcap)
	case math.IsNaN(float64(o.Dropout)) || o.Dropout < 0 || o.Dropout >= 1:
		return argErr("Options.Dropout", "Dropout %v must be in [0, 1)", o.Dropout)
	case o.Workers < 0:
		return argErr("Options.Workers", "Workers %d must be ≥ 0", o.Workers)
	case o.BlockQ < 0 || o.BlockK < 0 || o.BlockQ > 4096 || o.BlockK > 4096:
		return argErr("Options.BlockQ", "BlockQ %d and BlockK %d must be in [0, 4096]", o.BlockQ, o.BlockK)
	case o.CacheBytes < 0 || int64(o.CacheBytes) > 1<<40:
		return argErr("Options.CacheBytes", "CacheBytes %d must be in [0, 1 TiB]", o.CacheBytes)
	}
	if w := o.Window; w != nil && (w.Left < -1 || w.Right < -1) {
		return argErr("Options.Window", "Window {%d, %d}: each side must be ≥ 0 or -1 (unbounded)", w.Left, w.Right)
	}
	for i, s := range o.ALiBi {
		if bad(s) {
			return argErr("Options.ALiBi", "ALiBi slope %d is %v, want a finite number", i, s)
		}
	}
	if o.Mask != nil {
		if err := checkMask("Options.Mask", o.Mask); err != nil {
			return err
		}
	}
	if o.ScoreMod != nil && isNil(o.ScoreMod) {
		return argErr("Options.ScoreMod", "Options.ScoreMod is a nil %T", o.ScoreMod)
	}
	for i, s := range o.Sinks {
		if bad(s) {
			return argErr("Options.Sinks", "Sinks[%d] is %v, want a finite number", i, s)
		}
	}
	if f := o.Offsets; f != nil {
		switch {
		case f.Query < 0 || f.Key < 0 || f.Query > MaxPosition || f.Key > MaxPosition:
			return argErr("Options.Offsets", "Offsets {%d, %d}: each must be in 0..%d (MaxPosition)", f.Query, f.Key, MaxPosition)
		case o.KVCache != nil:
			return argErr("Options.Offsets", "Offsets cannot be combined with KVCache (a cache places its queries and keys itself)")
		}
	}
	return nil
}

// isNil reports whether x, a non-nil interface value, holds a nil pointer
// or func (a nil *Bias or ScoreFunc as Options.ScoreMod), which a call
// could only dereference or call into a panic.
func isNil(x any) bool {
	v := reflect.ValueOf(x)
	switch v.Kind() {
	case reflect.Pointer, reflect.Func:
		return v.IsNil()
	}
	return false
}
