package flashattn

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// runner is one parallel pass: a set of independent tasks; runTask(ws, t)
// does task t with the calling goroutine's workspace.
type runner interface {
	runTask(ws *workspace, t int)
}

// job is one parallel pass handed to the worker pool.
type job struct {
	next  atomic.Int64
	n     int
	r     runner
	stop  *atomic.Bool // set when the call's context is done: no task starts
	wg    sync.WaitGroup
	mu    sync.Mutex
	fault error // the first panic of a task, as an error
}

// do takes tasks in index order until none is left. A panic in a task (a
// bug) is recovered: it stops the pass and becomes the pass's error, so that
// it never kills the process from a goroutine the caller cannot guard.
func (j *job) do() {
	ws := workspaces.get()
	defer func() {
		if v := recover(); v != nil {
			j.mu.Lock()
			if j.fault == nil {
				j.fault = fmt.Errorf("%w: a worker panicked%s: %v", ErrInternal, panicSite(), v)
			}
			j.mu.Unlock()
			j.next.Store(int64(j.n)) // the other workers stop after their task
		}
		workspaces.put(ws)
	}()
	for {
		t := int(j.next.Add(1) - 1)
		if t >= j.n || j.stop != nil && j.stop.Load() {
			break
		}
		j.r.runTask(ws, t)
	}
}

var jobs freeList[job]

// workersDefault is the number of workers when Options.Workers is 0.
func workersDefault() int { return runtime.GOMAXPROCS(0) }

// workerPool is started on first use: GOMAXPROCS goroutines that wait for
// jobs. Goroutines are not started per call or per tile.
var workerPool = sync.OnceValue(func() chan *job {
	c := make(chan *job)
	for range workersDefault() {
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
// written by that task alone. It returns an error wrapping ErrInternal if a
// task panicked.
func parallel(workers, n int, r runner) error { return parallelStop(workers, n, r, nil) }

// parallelStop is parallel with a stop flag: once it is set no more task
// starts (a cancelled call).
func parallelStop(workers, n int, r runner, stop *atomic.Bool) error {
	if n == 0 {
		return nil
	}
	j := jobs.get()
	j.n, j.r, j.fault, j.stop = n, r, nil, stop
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
	err := j.fault
	j.r, j.fault, j.stop = nil, nil, nil
	jobs.put(j)
	return err
}

// parallel runs one pass of the call's tasks on its workers, stopping at a
// task boundary once the call is cancelled.
func (p *plan) parallel(n int, r runner) error {
	if p.serial {
		return parallelStop(1, n, r, p.stop)
	}
	return parallelStop(p.workers, n, r, p.stop)
}

// stopped reports whether the call's context is done: tasks check it
// between tiles and return early.
func (p *plan) stopped() bool { return p.stop != nil && p.stop.Load() }

// recoverPanic, deferred by an entry point, turns a panic in the calling
// goroutine — a user's Mask, BlockClassifier or ScoreMod called while the
// call is planned, or a bug — into an error wrapping ErrInternal in *err.
func recoverPanic(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%w: panic%s: %v", ErrInternal, panicSite(), v)
	}
}

// recoverCallback, deferred around code that calls a user's callback
// outside a call (a mask, classifier or block function while a BlockMask
// is built), turns its panic into an error wrapping ErrInternal in *err;
// what names the callback ("NewBlockMask: a mask").
func recoverCallback(err *error, what string) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("%w: %s panicked%s: %v", ErrInternal, what, panicSite(), v)
	}
}

// panicSite returns " at FILE:LINE" of the innermost frame of this module
// below the recovering defer, for the error of a recovered panic.
func panicSite() string {
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "flashattn/flashattn") && !strings.Contains(f.Function, "panicSite") {
			return fmt.Sprintf(" at %s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}
