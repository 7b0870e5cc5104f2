package flashattn

import (
	"math"
	"sync/atomic"

	"github.com/flashattn/flashattn/internal/dropout"
	"github.com/flashattn/flashattn/internal/kernel"
)

// plan is a validated call, shared read-only by every pass of the call:
// its geometry (tiling: from the shapes and options alone), its operands
// (the checked views of the tensors) and its numerics (kernels, compute
// type, scale, score modifiers, dropout).
type plan struct {
	tiling
	operands
	numerics
}

// operands are the checked views of a call's inputs.
type operands struct {
	q          view
	k, v       view // the keys and values, or the KV cache
	knew, vnew view // a KV-cache call's new keys and values; zero views when none
}

// numerics is how a call computes: the kernels, the type the products
// round to, and everything that turns a product into a score.
type numerics struct {
	kern    kernel.Impl
	dec     kernel.Decode // decoding kernels (KV caches)
	halfMul kernel.Half   // the 16-bit products, when native
	ct      DType         // compute type: the products' operands are rounded to it
	native  bool          // ct is 16-bit and its products run natively (not widened to float32)
	scale   float32
	sinks   []float32 // Options.Sinks: one logit per query head, or nil
	mods    scoreMods
	dropOn  bool
	drop    dropout.Mask
	workers int
	stop    *atomic.Bool // set once the call's context is done; nil without one
	// serial runs every pass's tasks on the calling goroutine (Reserve
	// sizing one worker's workspace at a time); the tasks stay those of
	// workers.
	serial bool
}

// newPlan validates q, k, v and the options and builds the plan in p,
// reusing p's buffers.
func newPlan(p *plan, q, k, v Tensor, o *Options) error {
	if o == nil {
		o = &Options{}
	}
	if err := o.validate(); err != nil {
		return err
	}
	qv, err := q.check("q", false, -1, -1, -1, -1)
	if err != nil {
		return err
	}
	kv, err := k.check("k", false, -1, -1, -1, q.Dim)
	if err != nil {
		return err
	}
	ct, err := computeType(q, k, v)
	if err != nil {
		return err
	}
	if q.DType().cacheOnly() || o.KVCache == nil && (k.DType().cacheOnly() || v.DType().cacheOnly()) {
		return argErr("k", "q8_0, q4_0 and fp8 tensors are only accepted as the k and v of a KVCache call (a quantised cache)")
	}
	n := &p.numerics
	ks := kernel.Active() // the kernels of this process, chosen once
	*n = numerics{kern: ks.Impl, dec: ks.Decode, ct: ct, workers: o.workers()}
	if ct != Float32 {
		n.halfMul = ks.Half(ct.elem())
		n.native = n.halfMul.Name != "f32"
	}
	s := shapeOf(q, k, v)
	l2 := o.CacheBytes
	if l2 == 0 {
		_, l2 = cacheSizes()
	}
	if err := p.tiling.build(s, o, tileParams{cacheBytes: l2, native: n.native, fitBackward: true}); err != nil {
		return err
	}
	vv, err := v.check("v", false, k.Batch, k.Seq, k.Heads, -1)
	if err != nil {
		return err
	}
	p.operands = operands{q: qv, k: kv, v: vv}
	if c := o.KVCache; c != nil {
		p.knew, p.vnew, _ = newKeyViews(c, s) // checked by the tiling
		if err := p.checkAppend(); err != nil {
			return err
		}
	}
	n.scale = o.Scale
	if n.scale == 0 {
		n.scale = float32(1 / math.Sqrt(float64(q.Dim)))
	}
	n.mods = scoreMods{softcap: o.Softcap, heads: p.heads, user: o.ScoreMod}
	n.sinks = o.Sinks
	if len(o.ALiBi) > 0 {
		n.mods.alibi, n.mods.alibiBatch = o.ALiBi, len(o.ALiBi) != p.heads
	}
	if o.Dropout > 0 {
		n.dropOn = true
		n.drop = dropout.NewMask(o.Seed, o.Dropout)
	}
	p.routeKV()
	return nil
}
