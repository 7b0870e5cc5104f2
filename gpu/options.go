package gpu

import (
	"reflect"
	"strings"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// Options selects what attention computes: flashattn.Options, with the
// meaning and the validation rules package flashattn gives them (the same
// *flashattn.ArgError for a bad value), Deterministic, NumSplits and
// NoPackGQA. A nil
// *Options is the zero value: plain, non-causal attention with scale
// 1/sqrt(headdim).
//
// The GPU kernels implement Scale, Causal, Window and Softcap (masks
// aligned to the bottom-right corner), GQA/MQA, and VarLen with
// CuSeqlensQ, CuSeqlensK and SeqUsedK. Workers, BlockQ, BlockK and
// CacheBytes tune the CPU kernels and have no effect here (their values
// are still checked), nor has Seed without Dropout. These fields are an
// allow-list: every other option set — TopLeft, Offsets, Sinks, ALiBi,
// Dropout, KVCache, BlockMask, Mask, ScoreMod, VarLen.SeqUsedQ, and any
// field flashattn.Options gains later — is refused with an *ArgError naming
// it ("Options.ALiBi"), never ignored.
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

	// NoPackGQA turns off the forward pass's packing of the query heads
	// that share a KV head (GQA/MQA) into the rows of one query block,
	// which it does when the group's query rows fit one (decoding: H/Hk·Sq
	// ≤ 64 at head dims 64 and 128, ≤ 128 at 256), so that each K/V tile
	// is read once per KV head instead of once per query head. Packed and
	// unpacked results differ by rounding at most. Backward ignores it.
	NoPackGQA bool
}

// checkSplits refuses a NumSplits outside [0, tile.MaxSplits].
func (o *Options) checkSplits() error {
	if o.NumSplits < 0 || o.NumSplits > tile.MaxSplits {
		return argErr("Options.NumSplits", "Options.NumSplits is %d; package gpu takes 0 (automatic), 1 (no split) or up to %d", o.NumSplits, tile.MaxSplits)
	}
	return nil
}

// supportedOptions is the allow-list of the flashattn.Options fields
// package gpu accepts, each with how it honours it. A field set to a
// non-zero value and not listed here — a field added to flashattn.Options
// later too — is refused with an *flashattn.ArgError naming it, never
// ignored. A listed struct field with listed sub-fields ("VarLen.SeqUsedK")
// accepts only those sub-fields.
var supportedOptions = map[string]string{
	"Scale":             "the kernels' scale_log2 (0: 1/sqrt(dim), problem.setScores)",
	"Causal":            "right window side 0, bottom-right aligned (problem.setWindow)",
	"Window":            "the kernels' left and right sides, bottom-right aligned (problem.setWindow)",
	"Window.Left":       "the kernels' left side",
	"Window.Right":      "the kernels' right side",
	"Softcap":           "the kernels' cap_scale and cap_log2 (problem.setScores)",
	"VarLen":            "packed sequences (problem.setGeometry)",
	"VarLen.CuSeqlensQ": "the kernels' cu_q",
	"VarLen.CuSeqlensK": "the kernels' cu_k",
	"VarLen.SeqUsedK":   "the kernels' used_k",
	"Seed":              "seeds dropout, which package gpu refuses: checked, no effect",
	"Workers":           "tunes the CPU kernels: checked, no effect",
	"BlockQ":            "tunes the CPU kernels: checked, no effect",
	"BlockK":            "tunes the CPU kernels: checked, no effect",
	"CacheBytes":        "tunes the CPU kernels: checked, no effect",
}

// unsupported refuses the first option (in field order) that is set and
// that supportedOptions does not list.
func (o *Options) unsupported() error {
	if name := unlisted("", reflect.ValueOf(o.Options)); name != "" {
		return argErr("Options."+name, "Options.%s is not supported by package gpu", name)
	}
	return nil
}

// unlisted returns the path of the first field of struct v (a
// flashattn.Options or one it points to, at path prefix) that is set and
// that supportedOptions does not list, or "". A field is set when it is
// not its zero value; an empty slice is unset, as package flashattn reads
// it (Sinks: []float32{} is no sinks).
func unlisted(prefix string, v reflect.Value) string {
	for _, f := range reflect.VisibleFields(v.Type()) {
		x := v.FieldByIndex(f.Index)
		if f.Anonymous || x.IsZero() || x.Kind() == reflect.Slice && x.Len() == 0 {
			continue
		}
		path := prefix + f.Name
		if _, ok := supportedOptions[path]; !ok {
			return path
		}
		if x.Kind() == reflect.Pointer && x.Elem().Kind() == reflect.Struct && hasSubFields(path) {
			if name := unlisted(path+".", x.Elem()); name != "" {
				return name
			}
		}
	}
	return ""
}

// hasSubFields reports whether supportedOptions lists sub-fields of path.
func hasSubFields(path string) bool {
	for k := range supportedOptions {
		if strings.HasPrefix(k, path+".") {
			return true
		}
	}
	return false
}
