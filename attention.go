package flashattn

// Forward computes attention O = softmax(mask(scale·QKᵀ))·V for q
// [batch, seqlen_q, heads, dim] and k, v [batch, seqlen_k, kv_heads, dim]
// and returns O (shaped like q, dense, of q's element type) and the
// log-sum-exp of every score row,
// LSE [batch, heads, seqlen_q] (with VarLen: [heads, total_q]). opts may be
// nil for the defaults. See ForwardInto to reuse output buffers.
func Forward(q, k, v Tensor, opts *Options) (out Tensor, lse []float32, err error) {
	defer recoverPanic(&err)
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return Tensor{}, nil, err
	}
	defer c.release()
	out = NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, v.Dim)
	lse = make([]float32, c.plan.lseLen)
	ov, _ := out.check("out", true, -1, -1, -1, -1) // its own dense shape: cannot fail
	if err := c.forward(ov, lse); err != nil {
		return Tensor{}, nil, err
	}
	return out, lse, nil
}

// ForwardInto is Forward writing into caller-owned buffers: out must have
// q's shape (any non-overlapping strides) and lse, unless nil, at least
// batch·heads·seqlen_q elements. out and lse must not share memory with the
// inputs or with each other, except that out may be q itself (the very same
// view: O then overwrites Q). Repeated calls allocate nothing (the
// workspaces and packed K/V buffers are pooled), so it suits hot loops.
func ForwardInto(out Tensor, lse []float32, q, k, v Tensor, opts *Options) (err error) {
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
	if ov.dt == Q8_0 {
		return argErr("out", "out cannot be q8_0 (a cache format)")
	}
	if lse != nil && len(lse) < c.plan.lseLen {
		return argErr("lse", "lse has %d elements, want %d", len(lse), c.plan.lseLen)
	}
	if err := c.checkForwardOutputs(ov, lse); err != nil {
		return err
	}
	return c.forward(ov, lse)
}

// Backward computes the gradients of attention with respect to q, k and v
// for the upstream gradient dout, given the forward's inputs, its output out
// and its lse, and the same options. P is recomputed tile by tile from q, k
// and lse (FA2's backward): no seqlen_q × seqlen_k matrix is stored. With
// GQA/MQA, dk and dv sum over the query heads that share a KV head. The
// gradients have the element types of q, k and v; they are accumulated in
// float32 and rounded once.
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
// like q), dk and dv (shaped like k). The gradients must not share memory
// with any input or with each other; they may be interleaved views of one
// buffer (PackedQKV of a gradient buffer). Repeated calls allocate nothing.
func BackwardInto(dq, dk, dv Tensor, q, k, v, out, dout Tensor, lse []float32, opts *Options) (err error) {
	defer recoverPanic(&err)
	if opts != nil && opts.KVCache != nil {
		return argErr("Options.KVCache", "Backward does not take a KVCache (decoding is inference only)")
	}
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return err
	}
	defer c.release()
	g := &c.bwd.grads
	B, Sq, H, D, DV, Sk, Hk := q.Batch, q.Seq, q.Heads, q.Dim, v.Dim, k.Seq, k.Heads
	for _, t := range []struct {
		dst        *view
		t          Tensor
		name       string
		output     bool
		b, s, h, d int
	}{
		{&g.o, out, "out", false, B, Sq, H, DV},
		{&g.do, dout, "dout", false, B, Sq, H, DV},
		{&g.dq, dq, "dq", true, B, Sq, H, D},
		{&g.dk, dk, "dk", true, B, Sk, Hk, D},
		{&g.dv, dv, "dv", true, B, Sk, Hk, DV},
	} {
		if *t.dst, err = t.t.check(t.name, t.output, t.b, t.s, t.h, t.d); err != nil {
			return err
		}
	}
	if len(lse) < c.plan.lseLen {
		return argErr("lse", "lse has %d elements, want %d", len(lse), c.plan.lseLen)
	}
	for _, x := range []struct {
		v    view
		name string
	}{{g.dq, "dq"}, {g.dk, "dk"}, {g.dv, "dv"}, {g.o, "out"}, {g.do, "dout"}} {
		if x.v.dt == Q8_0 {
			return argErr(x.name, "%s cannot be q8_0 (a cache format)", x.name)
		}
	}
	g.lse = lse
	if err := c.checkBackwardOutputs(); err != nil {
		return err
	}
	return c.backward()
}
