package gpu

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/cuda"
	"github.com/flashattn/flashattn/gpu/internal/ptxsim"
)

// Close frees the buffers still allocated (the user's and the scratch
// memory) before it releases the context; freeing them again is harmless,
// and a closed device refuses work.
func TestCloseFreesLiveBuffers(t *testing.T) {
	d := newSimDevice()
	m := d.ctx.backend.(*sim).m
	x := flashattn.NewTensor(1, 70, 2, 64)
	if _, _, err := d.ForwardHost(BF16, x, x, x, &Options{}); err != nil {
		t.Fatal(err)
	}
	kept, err := d.NewTensor(BF16, 1, 8, 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	if m.Allocations() == 0 {
		t.Fatal("no live allocation before Close")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := m.Allocations(); n != 0 {
		t.Errorf("%d allocations live after Close", n)
	}
	if err := kept.Free(); err != nil {
		t.Errorf("Free after Close: %v", err)
	}
	if _, err := d.Alloc(16); err == nil {
		t.Error("Alloc on a closed device")
	}
	if err := d.Forward(kept, kept, kept, kept, nil, nil); err == nil {
		t.Error("Forward on a closed device")
	}
}

// A sticky CUDA error (a kernel fault) is reported as ErrDeviceLost, and
// from then on every call fails with it without reaching the driver.
func TestStickyError(t *testing.T) {
	d := newSimDevice()
	s := d.ctx.backend.(*sim)
	x := flashattn.NewTensor(1, 40, 1, 64)
	s.fail = &cuda.Error{Op: "cuLaunchKernel", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS"}
	_, _, err := d.ForwardHost(BF16, x, x, x, nil)
	if !errors.Is(err, ErrDeviceLost) || !strings.Contains(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS") || !strings.Contains(err.Error(), "restart the process") {
		t.Fatalf("faulting launch: %v", err)
	}
	allocs := s.m.Allocations()
	for name, err := range map[string]error{
		"ForwardHost": func() error { _, _, err := d.ForwardHost(BF16, x, x, x, nil); return err }(),
		"Alloc":       func() error { _, err := d.Alloc(64); return err }(),
		"NewStream":   func() error { _, err := d.NewStream(); return err }(),
		"Synchronize": d.Synchronize(),
	} {
		if !errors.Is(err, ErrDeviceLost) {
			t.Errorf("%s after the fault: %v", name, err)
		}
	}
	if s.m.Allocations() != allocs {
		t.Error("a call after the fault reached the driver")
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close after the fault: %v", err)
	}
	// A non-sticky error (out of memory) leaves the device usable.
	d = newSimDevice()
	d.ctx.backend.(*sim).fail = &cuda.Error{Op: "cuLaunchKernel", Code: 701, Name: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"}
	if _, _, err := d.ForwardHost(BF16, x, x, x, nil); err == nil || errors.Is(err, ErrDeviceLost) {
		t.Fatalf("non-sticky failure: %v", err)
	}
	if _, _, err := d.ForwardHost(BF16, x, x, x, nil); err != nil {
		t.Fatalf("after a non-sticky failure: %v", err)
	}
	d.Close()
}

// Work queued on two streams gives the results of the default stream's
// synchronous calls; closing a stream frees its scratch memory.
func TestStreams(t *testing.T) {
	d := newSimDevice()
	defer d.Close()
	streams(t, d)
}

// TestStreamsGPU is TestStreams on the GPU, where the streams' kernels
// really run asynchronously.
func TestStreamsGPU(t *testing.T) { streams(t, openOrSkip(t)) }

// streams checks two streams' queued calls against the default stream's
// and, on the simulator, that closing a stream frees its scratch memory.
func streams(t *testing.T, d *Device) {
	sm, _ := d.ctx.backend.(*sim)
	const B, N, H, D = 1, 50, 2, 64
	rng := rand.New(rand.NewPCG(3, 3))
	mk := func() Tensor {
		x, err := d.NewTensor(BF16, B, N, H, D)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Upload(randRounded(rng, BF16, x.Len(), 1)); err != nil {
			t.Fatal(err)
		}
		return x
	}
	q, k, v, do := mk(), mk(), mk(), mk()
	lse := func() *Buffer {
		b, err := d.Alloc(4 * B * H * N)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	opts := &Options{Options: flashattn.Options{Causal: true}}
	o0, l0, dq0, dk0, dv0 := mk(), lse(), mk(), mk(), mk()
	if err := d.Forward(q, k, v, o0, l0, opts); err != nil {
		t.Fatal(err)
	}
	if err := d.Backward(q, k, v, o0, do, l0, dq0, dk0, dv0, opts); err != nil {
		t.Fatal(err)
	}
	want := downloadAll(t, o0, dq0, dk0, dv0)
	for i := range 2 {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		o, l, dq, dk, dv := mk(), lse(), mk(), mk(), mk()
		if err := s.Forward(q, k, v, o, l, opts); err != nil {
			t.Fatal(err)
		}
		if err := s.Backward(q, k, v, o, do, l, dq, dk, dv, opts); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for j, got := range downloadAll(t, o, dq, dk, dv) {
			for e := range got {
				if got[e] != want[j][e] {
					t.Fatalf("stream %d, output %d element %d: %v, default stream %v", i, j, e, got[e], want[j][e])
				}
			}
		}
		if sm == nil {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			before := sm.m.Allocations()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if after := sm.m.Allocations(); after >= before {
				t.Errorf("stream %d: Close freed no scratch (%d → %d allocations)", i, before, after)
			}
		}
		if err := s.Forward(q, k, v, o, l, opts); err == nil {
			t.Error("Forward on a closed stream")
		}
	}
}

func downloadAll(t *testing.T, ts ...Tensor) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, x := range ts {
		v, err := x.Download()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// waitSim is the simulator with a SyncStream that, once armed, reports
// each waiter on arrived and blocks until release is closed: a stream whose
// kernels take as long as the test wants.
type waitSim struct {
	*sim
	armed   atomic.Bool
	arrived chan struct{}
	release chan struct{}
}

func (w *waitSim) SyncStream(s cuda.Stream) error {
	if w.armed.Load() {
		w.arrived <- struct{}{}
		<-w.release
	}
	return nil
}

// Device.Forward does not hold the device while it waits for its stream:
// a second Forward on the same Device queues its kernels (and reaches its
// own wait) while the first still waits, and both give the serial result.
// Before, the second call blocked on the device lock until the first's
// stream finished.
func TestForwardWaitsUnlocked(t *testing.T) {
	w := &waitSim{sim: &sim{m: ptxsim.New()}, arrived: make(chan struct{}, 2), release: make(chan struct{})}
	d := newDevice(w, newSimDevice().info)
	defer d.Close()
	const B, N, H, D = 1, 40, 2, 64
	rng := rand.New(rand.NewPCG(5, 5))
	mk := func() Tensor {
		x, err := d.NewTensor(BF16, B, N, H, D)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Upload(randRounded(rng, BF16, x.Len(), 1)); err != nil {
			t.Fatal(err)
		}
		return x
	}
	lse := func() *Buffer {
		b, err := d.Alloc(4 * B * H * N)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	q, k, v := mk(), mk(), mk()
	outs := []Tensor{mk(), mk(), mk()}
	lses := []*Buffer{lse(), lse(), lse()}
	opts := &Options{Options: flashattn.Options{Causal: true}}
	if err := d.Forward(q, k, v, outs[2], lses[2], opts); err != nil { // the serial result
		t.Fatal(err)
	}
	w.armed.Store(true)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { errs <- d.Forward(q, k, v, outs[i], lses[i], opts) }()
	}
	for i := range 2 {
		select {
		case <-w.arrived:
		case <-time.After(20 * time.Second):
			close(w.release)
			t.Fatalf("only %d of 2 concurrent Forward calls reached their stream wait: the other is blocked behind the device lock", i)
		}
	}
	close(w.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	w.armed.Store(false)
	want := downloadAll(t, outs[2])[0]
	for i, got := range downloadAll(t, outs[0], outs[1]) {
		for e := range got {
			if got[e] != want[e] {
				t.Fatalf("concurrent call %d, element %d: %v, serial %v", i, e, got[e], want[e])
			}
		}
	}
}
