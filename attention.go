package flashattn

import (
	"context"
	"sync/atomic"
)

// attention.go holds the entry points: Forward and Backward and their
// forms that write into caller-owned buffers, take a context or return
// more gradients.

// Forward computes attention O = softmax(mask(scale·QKᵀ))·V for q
// [batch, seqlen_q, heads, dim], k [batch, seqlen_k, kv_heads, dim] and v
// [batch, seqlen_k, kv_heads, dim_v] (dim_v is usually dim; MLA's differs)
// and returns O [batch, seqlen_q, heads, dim_v] (dense, of q's element
// type) and the log-sum-exp of every score row, LSE [batch, heads,
// seqlen_q] (with VarLen: [heads, total_q]). opts may be nil for the
// defaults. See ForwardInto to reuse output buffers.
func Forward(q, k, v Tensor, opts *Options) (out Tensor, lse []float32, err error) {
	return ForwardContext(context.Background(), q, k, v, opts)
}

// ForwardContext is Forward that stops early when ctx is done; see
// ForwardIntoContext.
func ForwardContext(ctx context.Context, q, k, v Tensor, opts *Options) (out Tensor, lse []float32, err error) {
	defer recoverPanic(&err)
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return Tensor{}, nil, err
	}
	defer c.release()
	out = NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, v.Dim)
	lse = make([]float32, c.plan.lseLen)
	ov, _ := out.check("out", true, -1, -1, -1, -1) // its own dense shape: cannot fail
	if err := c.checkForwardOperands(opts, ov, lse); err != nil {
		return Tensor{}, nil, err // a KV-cache append into an option's slice
	}
	if err := c.run(ctx, func() error { return c.forward(ov, lse) }); err != nil {
		return Tensor{}, nil, err
	}
	return out, lse, nil
}

// ForwardInto is Forward writing into caller-owned buffers: out must have
// q's shape with V's head dim (any non-overlapping strides) and lse, unless
// nil, at least batch·heads·seqlen_q elements. out and lse must not share
// memory with the inputs (the tensors and every slice of opts) or with each
// other, except that out may be q
// itself (the very same view: O then overwrites Q). Repeated calls
// allocate nothing (the workspaces and packed K/V buffers are pooled), so
// it suits hot loops.
func ForwardInto(out Tensor, lse []float32, q, k, v Tensor, opts *Options) error {
	return ForwardIntoContext(context.Background(), out, lse, q, k, v, opts)
}

// ForwardIntoContext is ForwardInto that stops early when ctx is done: the
// workers check it between tiles, and the call then returns ctx.Err(). out
// and lse hold unspecified values after such a return (some rows final,
// others not), and a KV-cache call may already have appended its new keys.
// A context that is never done (context.Background()) costs nothing.
func ForwardIntoContext(ctx context.Context, out Tensor, lse []float32, q, k, v Tensor, opts *Options) (err error) {
	defer recoverPanic(&err)
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return err
	}
	defer c.release()
	ov, err := out.check("out", true, q.Batch, q.Seq, q.Heads, v.Dim)
	if err != nil {
		return err
	}
	if ov.dt.cacheOnly() {
		return argErr("out", "out cannot be %v (a cache format)", ov.dt)
	}
	if lse != nil && len(lse) < c.plan.lseLen {
		return argErr("lse", "lse has %d elements, want %d", len(lse), c.plan.lseLen)
	}
	if err := c.checkForwardOperands(opts, ov, lse); err != nil {
		return err
	}
	return c.run(ctx, func() error { return c.forward(ov, lse) })
}

// run runs f, the call's passes, watching ctx: once it is done the passes
// stop at the next tile or task boundary and run returns ctx.Err(). A nil
// ctx is refused (context.Background() is the context that is never done).
func (c *call) run(ctx context.Context, f func() error) error {
	if ctx == nil {
		return argErr("ctx", "ctx is nil: pass context.Background() for a call that is never cancelled")
	}
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		stop := new(atomic.Bool) // not pooled: the callback may outlive the call
		c.plan.stop = stop
		defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	}
	err := f()
	if c.plan.stopped() {
		return ctx.Err()
	}
	return err
}

// Backward computes the gradients of attention with respect to q, k and v
// for the upstream gradient dout, given the forward's inputs, its output out
// and its lse, and the same options. P is recomputed tile by tile from q, k
// and lse (FA2's backward): no seqlen_q × seqlen_k matrix is stored. With
// GQA/MQA, dk and dv sum over the query heads that share a KV head. The
// gradients have the element types of q, k and v; they are accumulated in
// float32 and rounded once. See BackwardGrads for the gradient of a loss
// that also depends on LSE, of Options.Sinks, accumulation and
// cancellation.
func Backward(q, k, v, out, dout Tensor, lse []float32, opts *Options) (dq, dk, dv Tensor, err error) {
	dq = NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, q.Dim)
	dk = NewTensorOf(k.DType(), k.Batch, k.Seq, k.Heads, k.Dim)
	dv = NewTensorOf(v.DType(), v.Batch, v.Seq, v.Heads, v.Dim)
	if err := BackwardInto(dq, dk, dv, q, k, v, out, dout, lse, opts); err != nil {
		return Tensor{}, Tensor{}, Tensor{}, err
	}
	return dq, dk, dv, nil
}

// BackwardInto is Backward writing into caller-owned gradients dq (shaped
// like q), dk (shaped like k) and dv (shaped like v). The gradients must
// not share memory with any input (the tensors, lse, dlse and every slice
// of opts) or with each other; they may be
// interleaved views of one buffer (PackedQKV of a gradient buffer).
// Repeated calls allocate nothing.
func BackwardInto(dq, dk, dv Tensor, q, k, v, out, dout Tensor, lse []float32, opts *Options) error {
	return BackwardGrads(context.Background(), Grads{DQ: dq, DK: dk, DV: dv}, q, k, v, out, dout, lse, nil, opts)
}

// Grads are the gradients a backward pass writes, and how.
type Grads struct {
	// DQ, DK and DV receive the gradients with respect to q, k and v:
	// shaped like them, any non-overlapping strides, sharing no memory with
	// an input or with each other.
	DQ, DK, DV Tensor
	// DSinks, if not nil, receives the gradient with respect to
	// Options.Sinks ([heads]), summed over the batch and the rows.
	DSinks []float32
	// DBias, if not nil, receives the gradient with respect to the values
	// of the Bias that Options.ScoreMod must then be: the Bias's shape
	// (Bias.Shape, its broadcast dimensions of size 1), the score
	// gradients dS at the biased scores summed over the broadcast
	// dimensions (and over the rows and keys that read one value). The sums
	// are the same bit for bit for any number of workers. Computing it
	// costs a pass that recomputes two of the backward's five tile
	// products.
	DBias []float32
	// Accumulate adds the gradients to what DQ, DK, DV, DSinks and DBias hold
	// instead of overwriting it (16-bit gradients are read, summed in
	// float32 and rounded once): for a loss computed in parts — the shards
	// of a sequence across calls or machines, gradient accumulation.
	Accumulate bool
}

// BackwardGrads is BackwardInto for a loss that may depend on LSE as well
// as on O, with the gradient of learnable sinks, accumulation and
// cancellation. dlse, if not nil (LSE's layout), is the loss's gradient
// with respect to lse: the score gradients become dS = P∘(dP − D + dLSE),
// which is what differentiating through MergeStates, ring attention's
// merges or a loss on the LSE needs. Rows that see no key take no part.
//
// BackwardGrads takes a context (as ForwardContext does; it has no Context
// suffix because there is no variant without one): when ctx is done the
// call stops between tiles and returns ctx.Err(); the gradients then hold
// unspecified values (with Accumulate, some of the sums have been added).
func BackwardGrads(ctx context.Context, g Grads, q, k, v, out, dout Tensor, lse, dlse []float32, opts *Options) (err error) {
	defer recoverPanic(&err)
	c, err := newBackwardCall(g, q, k, v, out, dout, lse, dlse, opts)
	if err != nil {
		return err
	}
	defer c.release()
	return c.run(ctx, c.backward)
}

// checkNoKVCache returns the error of a backward given opts with a
// KVCache (nil if it has none).
func checkNoKVCache(opts *Options) error {
	if opts != nil && opts.KVCache != nil {
		return argErr("Options.KVCache", "Backward does not take a KVCache (decoding is inference only)")
	}
	return nil
}

// newBackwardCall validates BackwardGrads's arguments and returns a pooled
// call ready to run the backward (c.backward).
func newBackwardCall(g Grads, q, k, v, out, dout Tensor, lse, dlse []float32, opts *Options) (c *call, err error) {
	if err := checkNoKVCache(opts); err != nil {
		return nil, err
	}
	if c, err = newCall(q, k, v, opts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.release()
			c = nil
		}
	}()
	gv := &c.bwd.grads
	B, Sq, H, D, DV, Sk, Hk := q.Batch, q.Seq, q.Heads, q.Dim, v.Dim, k.Seq, k.Heads
	for _, t := range []struct {
		dst        *view
		t          Tensor
		name       string
		output     bool
		b, s, h, d int
	}{
		{&gv.o, out, "out", false, B, Sq, H, DV},
		{&gv.do, dout, "dout", false, B, Sq, H, DV},
		{&gv.dq, g.DQ, "dq", true, B, Sq, H, D},
		{&gv.dk, g.DK, "dk", true, B, Sk, Hk, D},
		{&gv.dv, g.DV, "dv", true, B, Sk, Hk, DV},
	} {
		if *t.dst, err = t.t.check(t.name, t.output, t.b, t.s, t.h, t.d); err != nil {
			return c, err
		}
	}
	n := c.plan.lseLen
	if len(lse) < n {
		return c, argErr("lse", "lse has %d elements, want %d", len(lse), n)
	}
	if dlse != nil && len(dlse) < n {
		return c, argErr("dlse", "dlse has %d elements, want %d (LSE's layout)", len(dlse), n)
	}
	if g.DSinks != nil && len(g.DSinks) != H {
		return c, argErr("DSinks", "DSinks has %d elements, want %d (one per query head)", len(g.DSinks), H)
	}
	for _, x := range []struct {
		v    view
		name string
	}{{gv.dq, "dq"}, {gv.dk, "dk"}, {gv.dv, "dv"}, {gv.o, "out"}, {gv.do, "dout"}} {
		if x.v.dt.cacheOnly() {
			return c, argErr(x.name, "%s cannot be %v (a cache format)", x.name, x.v.dt)
		}
	}
	gv.lse = lse[:n]
	if dlse != nil {
		gv.dlse = dlse[:n]
	}
	gv.dsinks, gv.accumulate = g.DSinks, g.Accumulate
	if opts != nil {
		gv.sinks = opts.Sinks
	}
	if g.DBias != nil {
		var bias *Bias
		if opts != nil {
			bias, _ = opts.ScoreMod.(*Bias)
		}
		if bias == nil {
			return c, argErr("DBias", "DBias is the gradient of a Bias, but Options.ScoreMod is not a *Bias")
		}
		if len(g.DBias) != bias.len() {
			return c, argErr("DBias", "DBias has %d elements, want %d (the Bias's %d×%d×%d×%d)", len(g.DBias), bias.len(), bias.batch, bias.heads, bias.seqQ, bias.seqK)
		}
		gv.bias, gv.dbias = bias, g.DBias
	}
	return c, c.checkBackwardOperands(opts, &g)
}
