package flashattn

// call is the pooled memory of one Forward or Backward call: its plan and
// one value per parallel pass (each a runner, passed to the worker pool by
// pointer, so no closure is allocated). Each owns the buffers it needs and
// keeps them when the call returns to the pool, so that steady-state calls
// allocate nothing.
type call struct {
	plan   plan
	pack   packPass
	fwd    forwardPass
	rows   rowsPass
	bwd    backwardPass
	lseFix lseFixPass
	dq     dqPass
	ops    []named // the operands' list (callOperands), kept from call to call
	// reserving: the call is Reserve's warm-up, which does not append to
	// the KV cache.
	reserving bool
}

var calls freeList[call]

// newCall validates the arguments and returns a pooled call with its plan.
func newCall(q, k, v Tensor, o *Options) (*call, error) {
	c := calls.get()
	if err := newPlan(&c.plan, q, k, v, o); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// release returns c to the pool, dropping its references to the caller's
// tensors and options and keeping every pass's buffers.
func (c *call) release() {
	tm := c.plan.mem
	clear(tm.seqs[:cap(tm.seqs)]) // they hold the caller's masks
	clear(c.ops[:cap(c.ops)])     // and these its tensors
	*c = call{
		plan:   plan{tiling: tiling{mem: tm}},
		pack:   packPass{mem: c.pack.mem},
		fwd:    forwardPass{mem: c.fwd.mem},
		rows:   rowsPass{mem: c.rows.mem},
		bwd:    backwardPass{mem: c.bwd.mem},
		lseFix: lseFixPass{mem: c.lseFix.mem},
		dq:     dqPass{mem: c.dq.mem},
		ops:    c.ops[:0],
	}
	calls.put(c)
}

// checkForwardOperands refuses an out, lse or KV-cache append that shares
// memory with another operand of the call (out may be q itself).
func (c *call) checkForwardOperands(o *Options, out view, lse []float32) error {
	p := &c.plan
	if lse != nil {
		lse = lse[:p.lseLen]
	}
	c.ops = callOperands(c.ops[:0], &p.operands, o, p.cache.newRows > 0, &forwardOutputs{out: out, lse: lse}, nil, nil)
	return checkOperands(c.ops)
}
