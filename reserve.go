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
	if err := c.reserveWorkspaces(ov); err != nil {
		return err
	}
	return c.forward(ov, nil) // on the workers: their pool starts now
}

// reserveWorkspaces runs the forward on one goroutine once per worker of
// the call, holding each run's workspace so that the next run sizes
// another: every workspace a worker of the call may pick is then sized for
// every task (the tasks do not depend on the worker count).
func (c *call) reserveWorkspaces(out view) error {
	workers := c.plan.workers
	n := min(workers, maxFree)
	c.plan.workers = 1
	defer func() { c.plan.workers = workers }()
	held := make([]*workspace, 0, n)
	defer func() {
		for _, ws := range held {
			workspaces.put(ws)
		}
	}()
	for range n {
		if err := c.forward(out, nil); err != nil {
			return err
		}
		held = append(held, workspaces.get()) // the run's: on top of the free list
	}
	return nil
}
