package flashattn

// Reserve prepares the pooled memory that a Forward or ForwardInto call
// with these arguments uses — the call's plan and task lists, the packed
// K/V buffers, the key splits' partial results and the workers'
// workspaces, and the worker goroutines themselves — so that the first such
// call (a server's first request) is not slower than the next: ForwardInto
// then allocates nothing, Forward only its out and lse.
//
// Reserve is a warm-up call: it validates the arguments as Forward does
// (its error is Forward's), then runs the forward into scratch output it
// drops, once per worker on one goroutine (so that every worker's
// workspace is sized for every task) and once more on the workers (about
// Options.Workers+1 times one call's CPU time). It does not append Options.KVCache's new keys: the cache is
// left as it is. The pooled buffers only grow, so
// reserving the largest batch and sequence lengths a server accepts (same
// head dims, element types and options) covers the smaller calls; the pools
// keep the memory of about 2·GOMAXPROCS concurrent calls, and Reserve
// prepares one.
func Reserve(q, k, v Tensor, opts *Options) (err error) {
	defer recoverPanic(&err)
	c, err := newCall(q, k, v, opts)
	if err != nil {
		return err
	}
	defer c.release()
	out := NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, v.Dim)
	ov, _ := out.check("out", true, -1, -1, -1, -1) // its own dense shape: cannot fail
	if err := c.checkForwardOperands(opts, ov, nil); err != nil {
		return err
	}
	c.reserving = true
	return c.reserveWorkspaces(func() error { return c.forward(ov, nil) })
}

// ReserveBackward is Reserve for the backward of a training step: it
// prepares the pooled memory that a BackwardInto or BackwardGrads call
// with these q, k, v and options uses (the backward's task lists, the
// packed Q, dO, K and V, D = rowsum(dO∘O), the float32 accumulators of
// 16-bit gradients, the dQ pass and the workers' workspaces), so that the
// first such call allocates (nearly) nothing. With Options.Sinks it
// reserves for Grads.DSinks too, and with a *Bias ScoreMod for
// Grads.DBias.
//
// Like Reserve it validates the arguments (its error is Backward's for
// them) and runs the call to scratch tensors it drops: a Forward for out
// and lse, then the backward once per worker on one goroutine and once on
// the workers (about Options.Workers+2 times one backward's CPU time). Call
// Reserve as well for the forward's memory. The rows whose |LSE| is 16 or
// more (large scores), whose probabilities the backward corrects for the
// LSE's float32 rounding, take an extra pass with memory of its own,
// reserved only if the q, k and v given have such rows.
func ReserveBackward(q, k, v Tensor, opts *Options) (err error) {
	defer recoverPanic(&err)
	if err := checkNoKVCache(opts); err != nil {
		return err // Backward's error, before a Forward that would take the cache
	}
	out, lse, err := Forward(q, k, v, opts)
	if err != nil {
		return err
	}
	dout := NewTensorOf(out.DType(), out.Batch, out.Seq, out.Heads, out.Dim)
	g := Grads{
		DQ: NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, q.Dim),
		DK: NewTensorOf(k.DType(), k.Batch, k.Seq, k.Heads, k.Dim),
		DV: NewTensorOf(v.DType(), v.Batch, v.Seq, v.Heads, v.Dim),
	}
	if opts != nil && opts.Sinks != nil {
		g.DSinks = make([]float32, q.Heads)
	}
	if opts != nil {
		if b, ok := opts.ScoreMod.(*Bias); ok && b != nil {
			g.DBias = make([]float32, b.len())
		}
	}
	c, err := newBackwardCall(g, q, k, v, out, dout, lse, nil, opts)
	if err != nil {
		return err
	}
	defer c.release()
	return c.reserveWorkspaces(c.backward)
}

// reserveWorkspaces runs pass (the call's forward or backward) on one
// goroutine once per worker of the call, holding each run's workspace so
// that the next run sizes another: every workspace a worker of the call
// may pick is then sized for every task (the tasks stay those of the
// call's worker count). It then runs pass once more on the workers: their
// pool starts now.
func (c *call) reserveWorkspaces(pass func() error) error {
	if err := c.serialRuns(pass); err != nil {
		return err
	}
	return pass()
}

// serialRuns runs pass on the calling goroutine once per worker of the
// call (at most maxFree times), each on a fresh workspace: the runs hold
// their workspaces until the last has run.
func (c *call) serialRuns(pass func() error) error {
	n := min(c.plan.workers, maxFree)
	held := make([]*workspace, 0, n)
	c.plan.serial = true
	defer func() {
		c.plan.serial = false
		for _, ws := range held {
			workspaces.put(ws)
		}
	}()
	for range n {
		if err := pass(); err != nil {
			return err
		}
		held = append(held, workspaces.get()) // the run's: on top of the free list
	}
	return nil
}
