package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
// restores what it replaced; a second signal exits at once (stale
// temporary files are removed by the next run). stop restores the default
// handling.
func interruptible() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(&signalError{sig})
			select {
			case sig := <-ch:
				os.Exit((&signalError{sig}).exitStatus())
			case <-done:
			}
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}
