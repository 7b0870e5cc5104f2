package gpu

import "github.com/flashattn/flashattn"

// Options selects what attention computes: flashattn.Options, with the
// meaning and the validation rules package flashattn gives them (the same
// *flashattn.ArgError for a bad value), and Deterministic. A nil *Options
// is the zero value: plain, non-causal attention with scale
// 1/sqrt(headdim).
//
// The GPU kernels implement Scale, Causal, Window and Softcap (masks
// aligned to the bottom-right corner), GQA/MQA, and VarLen with
// CuSeqlensQ, CuSeqlensK and SeqUsedK. Workers, BlockQ and BlockK tune the
// CPU kernels and have no effect here (their values are still checked),
// nor has Seed without Dropout. Every other option — TopLeft, Offsets,
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
