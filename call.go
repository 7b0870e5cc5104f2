package flashattn

// call is the pooled memory of one Forward or Backward call: its plan, one
// value per parallel pass (each a runner, passed to the worker pool by
// pointer, so no closure is allocated), and the arena of buffers kept from
// call to call, so that steady-state calls allocate nothing.
type call struct {
	plan   plan
	kv     packedKV
	pack   packPass
	fwd    forwardPass
	merge  mergePass
	rows   rowsPass
	bwd    backwardPass
	lseFix lseFixPass
	dq     dqPass
	arena  arena
}

// arena is the memory a call keeps when it returns to the pool.
type arena struct {
	seqs                []sequence
	blocks              []rowBlock
	fwdTasks, merges    []fwdTask
	bwdTasks            []bwdTask
	delta               []float32
	qPack, doPack       []float32
	qhPack, dohPack     []uint16
	qvPack, dovPack     []uint16
	qvOff, qvLdb        []int
	partO, partM, partL []float32
	kvBuf               []float32
	lseCorr             []float32
	dkvAcc              []float32
	kvOffK, kvOffV      []int
	kvOffKt, kvOffVt    []int
	kvLdb               []int
	kvBuf16             []uint16
	packChunks          []int
	blockTable          []int32
	cacheEnd            []int32
}

var calls freeList[call]

// newCall validates the arguments and returns a pooled call with its plan.
func newCall(q, k, v Tensor, o *Options) (*call, error) {
	c := calls.get()
	if err := newPlan(&c.plan, &c.arena, q, k, v, o); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// release returns c to the pool, dropping its references to the caller's
// tensors and options.
func (c *call) release() {
	a := c.arena
	clear(a.seqs[:cap(a.seqs)])
	*c = call{arena: a}
	calls.put(c)
}

// checkForwardOutputs refuses an out or lse that shares memory with an
// input or with each other (out may be q itself).
func (c *call) checkForwardOutputs(out view, lse []float32) error {
	p := &c.plan
	outs := []named{namedView("out", "q", out), namedSlice("lse", nil)}
	if lse != nil {
		outs[1] = namedSlice("lse", lse[:p.lseLen])
	}
	ins := []named{namedView("q", "", p.q), namedView("k", "", p.kv.k), namedView("v", "", p.kv.v)}
	return checkOutputs(outs, ins)
}
