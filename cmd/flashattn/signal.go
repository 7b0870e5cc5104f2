package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalError is the cause of a write stopped by a signal.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string {
	return fmt.Sprintf("interrupted (%v)", e.sig)
}

// exitStatus is the shell's convention for a process ended by a signal:
// 128 + its number (130 for SIGINT, 143 for SIGTERM).
func (e *signalError) exitStatus() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// interruptible returns a context that the first SIGINT or SIGTERM cancels
// with a *signalError cause, so that the write in progress stops and
// leaves the output directory as it was, and critical, the write's
// npy.WriteOptions.Critical. A later signal exits at once (what the write
// had made so far is only temporary files, which the next run removes),
// except inside the critical section of the commit, a few renames, where
// the destinations are being replaced or restored: there every further
// signal is ignored, the write is undone (or, if the first signal came
// after its last rename, finished), and the exit status follows the first
// signal. stop restores the default handling.
func interruptible() (ctx context.Context, critical func(enter bool), stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var (
		mu     sync.Mutex
		inside bool // in the critical section
		seen   bool // a signal has canceled ctx
	)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				mu.Lock()
				first, exit := !seen, seen && !inside
				seen = true
				if exit {
					// Exit while holding mu: critical(true) cannot
					// start the commit in the meantime.
					os.Exit((&signalError{sig}).exitStatus())
				}
				mu.Unlock()
				if first {
					cancel(&signalError{sig})
				}
			case <-done:
				return
			}
		}
	}()
	critical = func(enter bool) {
		mu.Lock()
		inside = enter
		mu.Unlock()
	}
	return ctx, critical, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
