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
// driver (libcuda.so.1), no device, or no binding for this platform.
var ErrNoDevice = cuda.ErrNoDevice

//go:embed ptx/*.ptx
var ptxFiles embed.FS

// Device is an open GPU: a retained CUDA context, the kernels compiled so
// far and scratch memory reused across calls. Its methods are safe for
// concurrent use; calls that run kernels are serialised.
type Device struct {
	ctx  backend
	info Info

	mu      sync.Mutex
	modules map[string]*module // by PTX file name
	scratch map[string]*Buffer // backward and varlen workspaces, grown on demand
	closed  bool
}

// backend is what a Device needs from the driver: *cuda.Context, or a
// simulator in this package's tests.
type backend interface {
	Alloc(n int) (cuda.Ptr, error)
	Free(p cuda.Ptr) error
	CopyIn(dst cuda.Ptr, src unsafe.Pointer, n int) error
	CopyOut(dst unsafe.Pointer, src cuda.Ptr, n int) error
	Zero(p cuda.Ptr, n int) error
	LoadModule(ptx []byte) (cuda.Module, error)
	Unload(m cuda.Module) error
	Function(m cuda.Module, name string, maxSmem int) (cuda.Function, error)
	Launch(f cuda.Function, grid, block [3]uint32, smem int, args []cuda.Arg) error
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
	return &Device{ctx: b, info: info, modules: map[string]*module{}, scratch: map[string]*Buffer{}}
}

// Info returns the device's description.
func (d *Device) Info() Info { return d.info }

// Close unloads the kernels, frees the scratch memory and releases the
// context. Buffers from Alloc must be freed before.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, b := range d.scratch {
		errs = append(errs, b.Free())
	}
	for _, m := range d.modules {
		errs = append(errs, d.ctx.Unload(m.mod))
	}
	errs = append(errs, d.ctx.Close())
	return errors.Join(errs...)
}

// Synchronize waits for all work queued on the device.
func (d *Device) Synchronize() error { return d.ctx.Synchronize() }

// moduleFile names the PTX module of (dt, headdim).
func moduleFile(dt DType, d int) string { return fmt.Sprintf("ptx/attn_%s_d%d.ptx", dt, d) }

// kernel returns a kernel of the (dt, headdim) module, JIT-compiling the
// module on first use. d.mu must be held.
func (d *Device) kernel(dt DType, hd int, name string) (cuda.Function, int, error) {
	if d.closed {
		return 0, 0, errors.New("gpu: device is closed")
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

// launch runs kernel name of the (dt, hd) module with the given grid and
// block and arguments checked against params.
func (d *Device) launch(dt DType, hd int, name string, params []tile.Param, a args, grid [3]int, threads int) error {
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
	if err := d.ctx.Launch(f, g, [3]uint32{uint32(threads), 1, 1}, smem, list); err != nil {
		return fmt.Errorf("gpu: %s: %w", name, err)
	}
	return nil
}

// scratchBuf returns a device workspace of at least n bytes named name,
// reusing it across calls. d.mu must be held.
func (d *Device) scratchBuf(name string, n int) (*Buffer, error) {
	if b, ok := d.scratch[name]; ok && b.n >= n {
		return b, nil
	} else if ok {
		if err := b.Free(); err != nil {
			return nil, err
		}
		delete(d.scratch, name)
	}
	b, err := d.Alloc(max(n, 256))
	if err != nil {
		return nil, err
	}
	d.scratch[name] = b
	return b, nil
}
