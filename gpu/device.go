package gpu

import (
	"embed"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/flashattn/flashattn/gpu/internal/cuda"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// ErrNoDevice is wrapped by the error Open returns when there is no CUDA
// driver (libcuda.so.1), no device, or no binding for this platform (or
// the program was built with the nogpu tag).
var ErrNoDevice = cuda.ErrNoDevice

// errNotOpen is the error of a call on a Device that Open did not return
// (nil, as a failed Open returns it, or a zero Device), or on a Stream of
// none.
var errNotOpen = fmt.Errorf("gpu: the Device is nil or was not returned by Open: %w", ErrNoDevice)

// ErrDeviceLost is matched (errors.Is) by the errors of a Device whose
// CUDA context a kernel fault has made unusable (an illegal or misaligned
// address, an illegal instruction, a timeout: CUDA's "sticky" errors). The
// fault is reported by the call that meets it, often a later one than the
// kernel's; from then on every call of the Device fails at once with it.
// Close the Device; no CUDA work is possible in the process any more.
var ErrDeviceLost = cuda.ErrSticky

//go:embed ptx/*.ptx
var ptxFiles embed.FS

// Device is an open GPU: a retained CUDA context, the kernels compiled so
// far and scratch memory reused across calls. Its methods are safe for
// concurrent use; calls queue their kernels one at a time, and wait for
// them (Forward, Backward) without holding the device. The methods of a
// nil Device (what a failed Open returns) or a zero one check their
// arguments and then return an error wrapping ErrNoDevice.
type Device struct {
	ctx  *guard
	info Info

	mu      sync.Mutex
	modules map[string]*module // by PTX file name
	def     *Stream            // the default stream (0) and its scratch
	streams map[*Stream]bool   // streams from NewStream, not closed
	closed  bool

	bufMu sync.Mutex
	bufs  map[*Buffer]bool // live allocations, freed by Close
}

// backend is what a Device needs from the driver: *cuda.Context, or a
// simulator in this package's tests.
type backend interface {
	Alloc(n int) (cuda.Ptr, error)
	Free(p cuda.Ptr) error
	CopyInAsync(dst cuda.Ptr, src unsafe.Pointer, n int, s cuda.Stream) error
	CopyOut(dst unsafe.Pointer, src cuda.Ptr, n int) error
	ZeroAsync(p cuda.Ptr, n int, s cuda.Stream) error
	LoadModule(ptx []byte) (cuda.Module, error)
	Unload(m cuda.Module) error
	Function(m cuda.Module, name string, maxSmem int) (cuda.Function, error)
	Launch(f cuda.Function, grid, block [3]uint32, smem int, args []cuda.Arg, s cuda.Stream) error
	NewStream() (cuda.Stream, error)
	DestroyStream(s cuda.Stream) error
	SyncStream(s cuda.Stream) error
	Synchronize() error
	Close() error
}

// module is a loaded PTX module and its kernels.
type module struct {
	mod cuda.Module
	fns map[string]cuda.Function
}

// Info describes a device.
type Info struct {
	Name              string
	Major, Minor      int // compute capability
	SMs               int
	MemoryBytes       uint64
	MaxSharedPerBlock int // opt-in dynamic shared memory per block, bytes
	ClockHz           float64
	DriverCUDAVersion int // e.g. 13000
}

// Open opens GPU number ordinal (0 for the first). Without a driver or a
// device the error wraps ErrNoDevice. Devices older than compute capability
// 8.0 are refused (the kernels need sm_80's bf16 tensor cores and cp.async).
// A failed Open releases the context it retained. The driver library
// (libcuda) is loaded at the first Open and stays loaded for the life of
// the process: unloading it after cuInit is not safe.
func Open(ordinal int) (*Device, error) {
	drv, err := cuda.Load("")
	if err != nil {
		return nil, err
	}
	ctx, err := drv.Open(ordinal)
	if err != nil {
		return nil, err
	}
	if ctx.Major < 8 {
		ctx.Close()
		return nil, fmt.Errorf("gpu: %s has compute capability %d.%d; the kernels need 8.0 or newer", ctx.Name, ctx.Major, ctx.Minor)
	}
	info := Info{Name: ctx.Name, Major: ctx.Major, Minor: ctx.Minor, SMs: ctx.SMs, MemoryBytes: ctx.Memory,
		MaxSharedPerBlock: ctx.MaxSmem, ClockHz: ctx.ClockHz, DriverCUDAVersion: drv.Version()}
	return newDevice(ctx, info), nil
}

func newDevice(b backend, info Info) *Device {
	d := &Device{ctx: &guard{backend: b}, info: info, modules: map[string]*module{}, streams: map[*Stream]bool{}, bufs: map[*Buffer]bool{}}
	d.def = &Stream{d: d, scratch: map[string]*Buffer{}}
	return d
}

// Info returns the device's description (an empty one for a nil Device).
func (d *Device) Info() Info {
	if d == nil {
		return Info{}
	}
	return d.info
}

// opened returns errNotOpen for a nil Device or one that Open did not
// make: every method that needs the device checks it first (after its
// arguments), so that no call panics without a device.
func (d *Device) opened() error {
	if d == nil || d.ctx == nil {
		return errNotOpen
	}
	return nil
}

// stream returns the default stream, nil for a nil Device.
func (d *Device) stream() *Stream {
	if d == nil {
		return nil
	}
	return d.def
}

// Close waits for the device's work, frees every Buffer still allocated
// (Buffers from Alloc and NewTensor included: they become unusable, and
// freeing them again does nothing), closes the Streams, unloads the
// kernels and releases the context; the driver library stays loaded (see
// Open), so a later Open in the process reuses it. After a kernel fault
// (ErrDeviceLost) it only releases the context.
func (d *Device) Close() error {
	if err := d.opened(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	ok := d.ctx.lost() == nil
	if ok {
		errs = append(errs, d.ctx.Synchronize())
		for s := range d.streams {
			errs = append(errs, d.ctx.DestroyStream(s.s))
			s.closed = true
		}
	}
	errs = append(errs, d.freeAll(ok))
	if ok {
		for _, m := range d.modules {
			errs = append(errs, d.ctx.Unload(m.mod))
		}
	}
	errs = append(errs, d.ctx.backend.Close())
	return errors.Join(errs...)
}

// freeAll frees every live buffer (or, with free false, after a fault,
// only marks them freed) and makes Alloc fail from now on.
func (d *Device) freeAll(free bool) error {
	d.bufMu.Lock()
	defer d.bufMu.Unlock()
	var errs []error
	for b := range d.bufs {
		if free {
			errs = append(errs, d.ctx.Free(b.ptr))
		}
		b.ptr = 0
	}
	d.bufs = nil
	return errors.Join(errs...)
}

// Synchronize waits for all work queued on the device, on every stream.
func (d *Device) Synchronize() error {
	if err := d.opened(); err != nil {
		return err
	}
	return d.ctx.Synchronize()
}

// usable reports why the device cannot run work: closed, or lost to a
// kernel fault. d.mu must be held.
func (d *Device) usable() error {
	if d.closed {
		return errors.New("gpu: device is closed")
	}
	return d.ctx.lost()
}

// moduleFile names the PTX module of (dt, headdim).
func moduleFile(dt DType, d int) string { return fmt.Sprintf("ptx/attn_%s_d%d.ptx", ptxName(dt), d) }

// kernel returns a kernel of the (dt, headdim) module, JIT-compiling the
// module on first use. d.mu must be held.
func (d *Device) kernel(dt DType, hd int, name string) (cuda.Function, int, error) {
	if err := d.usable(); err != nil {
		return 0, 0, err
	}
	file := moduleFile(dt, hd)
	m, ok := d.modules[file]
	if !ok {
		text, err := ptxFiles.ReadFile(file)
		if err != nil {
			return 0, 0, fmt.Errorf("gpu: no kernels for %v headdim %d", dt, hd)
		}
		mod, err := d.ctx.LoadModule(text)
		if err != nil {
			return 0, 0, fmt.Errorf("gpu: compiling %s: %w", file, err)
		}
		m = &module{mod: mod, fns: map[string]cuda.Function{}}
		d.modules[file] = m
	}
	smem := tile.SmemBytes(name, hd)
	if smem > d.info.MaxSharedPerBlock {
		return 0, 0, fmt.Errorf("gpu: kernel %s needs %d bytes of shared memory per block; %s allows %d", name, smem, d.info.Name, d.info.MaxSharedPerBlock)
	}
	f, ok := m.fns[name]
	if !ok {
		var err error
		if f, err = d.ctx.Function(m.mod, name, smem); err != nil {
			return 0, 0, err
		}
		m.fns[name] = f
	}
	return f, smem, nil
}

// launch queues kernel name of the (dt, hd) module on stream s with the
// given grid and block and arguments checked against params. d.mu must be
// held.
func (d *Device) launch(s *Stream, dt DType, hd int, name string, params []tile.Param, a args, grid [3]int, threads int) error {
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return nil
	}
	f, smem, err := d.kernel(dt, hd, name)
	if err != nil {
		return err
	}
	list, err := a.list(params)
	if err != nil {
		return err
	}
	g := [3]uint32{uint32(grid[0]), uint32(grid[1]), uint32(grid[2])}
	if err := d.ctx.Launch(f, g, [3]uint32{uint32(threads), 1, 1}, smem, list, s.s); err != nil {
		return fmt.Errorf("gpu: %s: %w", name, err)
	}
	return nil
}

// guard is the backend with the context's health: the first sticky error
// (errors.Is(err, ErrDeviceLost)) any call meets is kept, and every later
// call fails with it at once.
type guard struct {
	backend
	mu   sync.Mutex
	fail error
}

func (g *guard) lost() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fail
}

// check records a sticky error and returns err, marked so that its text
// says what it means.
func (g *guard) check(err error) error {
	if err == nil || !errors.Is(err, cuda.ErrSticky) {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail == nil {
		g.fail = fmt.Errorf("gpu: %w; %w", err, cuda.ErrSticky)
	}
	return g.fail
}

// run calls f unless the context is lost, and checks its error.
func (g *guard) run(f func() error) error {
	if err := g.lost(); err != nil {
		return err
	}
	return g.check(f())
}

func (g *guard) Alloc(n int) (p cuda.Ptr, err error) {
	err = g.run(func() (e error) { p, e = g.backend.Alloc(n); return e })
	return p, err
}
func (g *guard) Free(p cuda.Ptr) error { return g.run(func() error { return g.backend.Free(p) }) }
func (g *guard) CopyInAsync(dst cuda.Ptr, src unsafe.Pointer, n int, s cuda.Stream) error {
	return g.run(func() error { return g.backend.CopyInAsync(dst, src, n, s) })
}
func (g *guard) CopyOut(dst unsafe.Pointer, src cuda.Ptr, n int) error {
	return g.run(func() error { return g.backend.CopyOut(dst, src, n) })
}
func (g *guard) ZeroAsync(p cuda.Ptr, n int, s cuda.Stream) error {
	return g.run(func() error { return g.backend.ZeroAsync(p, n, s) })
}
func (g *guard) LoadModule(ptx []byte) (m cuda.Module, err error) {
	err = g.run(func() (e error) { m, e = g.backend.LoadModule(ptx); return e })
	return m, err
}
func (g *guard) Unload(m cuda.Module) error {
	return g.run(func() error { return g.backend.Unload(m) })
}
func (g *guard) Function(m cuda.Module, name string, maxSmem int) (f cuda.Function, err error) {
	err = g.run(func() (e error) { f, e = g.backend.Function(m, name, maxSmem); return e })
	return f, err
}
func (g *guard) Launch(f cuda.Function, grid, block [3]uint32, smem int, a []cuda.Arg, s cuda.Stream) error {
	return g.run(func() error { return g.backend.Launch(f, grid, block, smem, a, s) })
}
func (g *guard) NewStream() (s cuda.Stream, err error) {
	err = g.run(func() (e error) { s, e = g.backend.NewStream(); return e })
	return s, err
}
func (g *guard) DestroyStream(s cuda.Stream) error {
	return g.run(func() error { return g.backend.DestroyStream(s) })
}
func (g *guard) SyncStream(s cuda.Stream) error {
	return g.run(func() error { return g.backend.SyncStream(s) })
}
func (g *guard) Synchronize() error { return g.run(g.backend.Synchronize) }
