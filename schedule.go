package flashattn

import (
	"sync"
	"sync/atomic"
)

// parallel runs task(ws, t) for every t in [0, n) on up to workers
// goroutines (the caller's among them). Tasks are taken in index order, so
// callers list heavy tasks first. Each goroutine has its own workspace.
// The result never depends on the number of workers: a task's output is
// written by that task alone.
func parallel(workers, n int, task func(ws *workspace, t int)) {
	if n == 0 {
		return
	}
	workers = max(1, min(workers, n))
	var next atomic.Int64
	run := func() {
		ws := workspaces.Get().(*workspace)
		defer workspaces.Put(ws)
		for {
			t := int(next.Add(1) - 1)
			if t >= n {
				return
			}
			task(ws, t)
		}
	}
	if workers == 1 {
		run()
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	run()
	wg.Wait()
}
