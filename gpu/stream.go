package gpu

import (
	"errors"
	"unsafe"

	"github.com/flashattn/flashattn/gpu/internal/cuda"
)

// Stream is a CUDA stream of a Device: the kernels of the calls made on it
// run in order, and concurrently with other streams' work. Stream.Forward
// and Stream.Backward queue the kernels and return without waiting;
// Synchronize waits for them. Each stream has its own scratch memory, so
// calls on different streams do not share workspaces; a Stream's methods
// are safe for concurrent use, but concurrent calls on one stream still
// run in the order they take its lock.
//
// Device.Forward and Device.Backward run on the device's default stream
// and wait for that stream only (not for the whole device).
type Stream struct {
	d       *Device
	s       cuda.Stream // 0 for the default stream
	scratch map[string]*Buffer
	closed  bool
}

// NewStream creates a stream that does not synchronise with the default
// stream (CU_STREAM_NON_BLOCKING). Close it when done; Device.Close closes
// the streams still open.
func (d *Device) NewStream() (*Stream, error) {
	if err := d.opened(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return nil, err
	}
	s, err := d.ctx.NewStream()
	if err != nil {
		return nil, err
	}
	st := &Stream{d: d, s: s, scratch: map[string]*Buffer{}}
	d.streams[st] = true
	return st, nil
}

// Synchronize waits for the work queued on the stream.
func (s *Stream) Synchronize() error {
	if err := s.opened(); err != nil {
		return err
	}
	if s.closed {
		return errors.New("gpu: stream is closed")
	}
	return s.d.ctx.SyncStream(s.s)
}

// Close waits for the stream's work, frees its scratch memory and destroys
// it. Closing the default stream is not possible (use Device.Close).
func (s *Stream) Close() error {
	if err := s.opened(); err != nil {
		return err
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed || !d.streams[s] {
		return nil
	}
	s.closed = true
	delete(d.streams, s)
	errs := []error{d.ctx.SyncStream(s.s)}
	for _, b := range s.scratch {
		errs = append(errs, b.Free())
	}
	errs = append(errs, d.ctx.DestroyStream(s.s))
	return errors.Join(errs...)
}

// opened returns errNotOpen for a nil Stream or one that NewStream did not
// make (nor a Device, its default stream).
func (s *Stream) opened() error {
	if s == nil {
		return errNotOpen
	}
	return s.d.opened()
}

// begin checks that the stream and its device can run work. d.mu must be
// held.
func (s *Stream) begin() error {
	if s.closed {
		return errors.New("gpu: stream is closed")
	}
	return s.d.usable()
}

// scratchBuf returns a workspace of at least n bytes named name, reused
// across the stream's calls (stream order keeps a call from overwriting
// what an earlier call's kernels still read). d.mu must be held.
func (s *Stream) scratchBuf(name string, n int) (*Buffer, error) {
	if b, ok := s.scratch[name]; ok && b.n >= n {
		return b, nil
	} else if ok {
		// An earlier call's kernels may still use it: wait before freeing.
		if err := s.d.ctx.SyncStream(s.s); err != nil {
			return nil, err
		}
		if err := b.Free(); err != nil {
			return nil, err
		}
		delete(s.scratch, name)
	}
	b, err := s.d.Alloc(max(n, 256))
	if err != nil {
		return nil, err
	}
	s.scratch[name] = b
	return b, nil
}

// zero queues clearing n bytes of b.
func (s *Stream) zero(b *Buffer, n int) error { return s.d.ctx.ZeroAsync(b.ptr, n, s.s) }

// uploadCu queues the copy of the varlen sequence starts to the device (0
// if dense). d.mu must be held.
func (s *Stream) uploadCu(p *problem) (uint64, error) {
	if !p.varlen {
		return 0, nil
	}
	cu := p.cuInts()
	b, err := s.scratchBuf("cu", 4*len(cu))
	if err != nil {
		return 0, err
	}
	if err := s.d.ctx.CopyInAsync(b.ptr, unsafe.Pointer(&cu[0]), 4*len(cu), s.s); err != nil {
		return 0, err
	}
	return uint64(b.ptr), nil
}
