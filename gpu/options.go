package gpu

import (
	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// Options selects what attention computes: flashattn.Options, with the
// meaning and the validation rules package flashattn gives them (the same
// *flashattn.ArgError for a bad value), Deterministic and NumSplits. A nil
// *Options is the zero value: plain, non-causal attention with scale
// 1/sqrt(headdim).
//
// The GPU kernels implement Scale, Causal, Window and Softcap (masks
// aligned to the bottom-right corner), GQA/MQA, and VarLen with
// CuSeqlensQ, CuSeqlensK and SeqUsedK. Workers, BlockQ, BlockK and
// CacheBytes tune the CPU kernels and have no effect here (their values
// are still checked), nor has Seed without Dropout. Every other option — TopLeft, Offsets,
// Sinks, ALiBi, Dropout, KVCache, BlockMask, Mask, ScoreMod and
// VarLen.SeqUsedQ — is refused with an *ArgError naming it ("Options.ALiBi"),
// never ignored.
type Options struct {
	flashattn.Options

	// Deterministic makes the backward pass compute dQ in a separate kernel
	// over query blocks instead of accumulating it with float32 atomics, so
	// that dQ does not depend on the order the GPU runs blocks in. dK and dV
	// are deterministic either way. Forward ignores it.
	Deterministic bool

	// NumSplits is the number of parts the forward pass splits the keys
	// each query block sees into (split-KV, "flash-decoding"): one
	// thread block per part, then a kernel that merges the parts by their
	// log-sum-exp, as KVCache.NumSplits does on the CPU. It gives shapes with few query rows and long keys
	// (decoding) enough thread blocks to fill the GPU. 0 chooses from
	// the shape and the device's SM count (the README's GPU section
	// describes the rule; the same shape on the same device always gets
	// the same choice); 1 never splits; n from 2 to 128 splits in n
	// parts, or in as many as there are 64-key tiles if that is fewer.
	// Split and unsplit results differ by rounding only. Backward
	// ignores it.
	NumSplits int
}

// checkSplits refuses a NumSplits outside [0, tile.MaxSplits].
func (o *Options) checkSplits() error {
	if o.NumSplits < 0 || o.NumSplits > tile.MaxSplits {
		return argErr("Options.NumSplits", "Options.NumSplits is %d; package gpu takes 0 (automatic), 1 (no split) or up to %d", o.NumSplits, tile.MaxSplits)
	}
	return nil
}

// unsupported refuses the first option the GPU kernels do not implement.
func (o *Options) unsupported() error {
	f := &o.Options
	var name string
	switch {
	case f.TopLeft:
		name = "TopLeft"
	case f.Offsets != nil:
		name = "Offsets"
	case len(f.Sinks) != 0:
		name = "Sinks"
	case len(f.ALiBi) != 0:
		name = "ALiBi"
	case f.Dropout != 0:
		name = "Dropout"
	case f.KVCache != nil:
		name = "KVCache"
	case f.BlockMask != nil:
		name = "BlockMask"
	case f.Mask != nil:
		name = "Mask"
	case f.ScoreMod != nil:
		name = "ScoreMod"
	case f.VarLen != nil && f.VarLen.SeqUsedQ != nil:
		name = "VarLen.SeqUsedQ"
	default:
		return nil
	}
	return argErr("Options."+name, "Options.%s is not supported by package gpu", name)
}
