package flashattn

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// runner is a set of independent tasks; run(ws, t) does task t with the
// calling goroutine's workspace.
type runner interface {
	run(ws *workspace, t int)
}

// job is one parallel loop handed to the worker pool.
type job struct {
	next atomic.Int64
	n    int
	r    runner
	wg   sync.WaitGroup
}

// do takes tasks in index order until none is left.
func (j *job) do() {
	ws := workspaces.Get().(*workspace)
	for {
		t := int(j.next.Add(1) - 1)
		if t >= j.n {
			break
		}
		j.r.run(ws, t)
	}
	workspaces.Put(ws)
}

var jobs = sync.Pool{New: func() any { return new(job) }}

// workerPool is started on first use: GOMAXPROCS goroutines that wait for
// jobs. Goroutines are not started per call or per tile.
var workerPool = sync.OnceValue(func() chan *job {
	c := make(chan *job)
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for j := range c {
				j.do()
				j.wg.Done()
			}
		}()
	}
	return c
})

// parallel runs r's tasks 0..n-1 on up to workers goroutines: the caller
// and idle pool workers. Tasks are taken in index order, so callers list
// heavy tasks first. When the pool is busy (many concurrent calls) the
// caller does the remaining work itself, so calls never wait on each other.
// The result never depends on the number of workers: a task's output is
// written by that task alone.
func parallel(workers, n int, r runner) {
	if n == 0 {
		return
	}
	j := jobs.Get().(*job)
	j.n, j.r = n, r
	j.next.Store(0)
	if helpers := min(workers, n) - 1; helpers > 0 {
		pool := workerPool()
		for range helpers {
			j.wg.Add(1)
			select {
			case pool <- j:
			default:
				j.wg.Done()
			}
		}
	}
	j.do()
	j.wg.Wait()
	j.r = nil
	jobs.Put(j)
}
