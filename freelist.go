package flashattn

import "sync"

// freeList keeps up to maxFree values of T for reuse: the calls' arenas,
// the workers' workspaces and the jobs. Unlike a sync.Pool it hands back a
// kept value whichever processor the caller runs on, so that a repeated call
// allocates nothing (a sync.Pool allocates when the goroutine moved to
// another P since its last Put); what it keeps is bounded by maxFree, about
// what concurrent calls on this machine use.
type freeList[T any] struct {
	mu    sync.Mutex
	items []*T
}

// maxFree bounds the values a freeList keeps.
var maxFree = 2*workersDefault() + 2

func (f *freeList[T]) get() *T {
	f.mu.Lock()
	if n := len(f.items); n > 0 {
		x := f.items[n-1]
		f.items[n-1] = nil
		f.items = f.items[:n-1]
		f.mu.Unlock()
		return x
	}
	f.mu.Unlock()
	return new(T)
}

func (f *freeList[T]) put(x *T) {
	f.mu.Lock()
	if len(f.items) < maxFree {
		f.items = append(f.items, x)
	}
	f.mu.Unlock()
}
