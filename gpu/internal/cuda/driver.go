package cuda

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Driver is the loaded libcuda: the driver functions flashattn uses.
type Driver struct {
	version int

	cuInit                    func(flags uint32) Result
	cuDriverGetVersion        func(v *int32) Result
	cuDeviceGetCount          func(n *int32) Result
	cuDeviceGet               func(dev *int32, ordinal int32) Result
	cuDeviceGetName           func(name *byte, n int32, dev int32) Result
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) Result
	cuDeviceTotalMem          func(bytes *uint64, dev int32) Result
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) Result
	cuDevicePrimaryCtxRelease func(dev int32) Result
	cuCtxSetCurrent           func(ctx uintptr) Result
	cuCtxSynchronize          func() Result
	cuStreamCreate            func(s *uintptr, flags uint32) Result
	cuStreamDestroy           func(s uintptr) Result
	cuStreamSynchronize       func(s uintptr) Result
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uint64, s uintptr) Result
	cuMemsetD8Async           func(dst uint64, v uint8, n uint64, s uintptr) Result
	cuModuleLoadDataEx        func(mod *uintptr, image *byte, n uint32, opts uintptr, vals uintptr) Result
	cuModuleUnload            func(mod uintptr) Result
	cuModuleGetFunction       func(f *uintptr, mod uintptr, name *byte) Result
	cuFuncSetAttribute        func(f uintptr, attr int32, v int32) Result
	cuFuncGetAttribute        func(v *int32, attr int32, f uintptr) Result
	cuMemAlloc                func(p *uint64, n uint64) Result
	cuMemFree                 func(p uint64) Result
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uint64) Result
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uint64) Result
	cuMemsetD8                func(dst uint64, v uint8, n uint64) Result
	cuMemcpyDtoD              func(dst uint64, src uint64, n uint64) Result
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, smem uint32, stream uintptr, params uintptr, extra uintptr) Result
	cuGetErrorName            func(r Result, s **byte) Result
	cuGetErrorString          func(r Result, s **byte) Result
}

// symbols lists every driver entry point with the field it fills.
func (d *Driver) symbols() map[string]any {
	return map[string]any{
		"cuInit":                       &d.cuInit,
		"cuDriverGetVersion":           &d.cuDriverGetVersion,
		"cuDeviceGetCount":             &d.cuDeviceGetCount,
		"cuDeviceGet":                  &d.cuDeviceGet,
		"cuDeviceGetName":              &d.cuDeviceGetName,
		"cuDeviceGetAttribute":         &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":          &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain":     &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":              &d.cuCtxSetCurrent,
		"cuCtxSynchronize":             &d.cuCtxSynchronize,
		"cuStreamCreate":               &d.cuStreamCreate,
		"cuStreamDestroy_v2":           &d.cuStreamDestroy,
		"cuStreamSynchronize":          &d.cuStreamSynchronize,
		"cuMemcpyHtoDAsync_v2":         &d.cuMemcpyHtoDAsync,
		"cuMemsetD8Async":              &d.cuMemsetD8Async,
		"cuModuleLoadDataEx":           &d.cuModuleLoadDataEx,
		"cuModuleUnload":               &d.cuModuleUnload,
		"cuModuleGetFunction":          &d.cuModuleGetFunction,
		"cuFuncSetAttribute":           &d.cuFuncSetAttribute,
		"cuFuncGetAttribute":           &d.cuFuncGetAttribute,
		"cuMemAlloc_v2":                &d.cuMemAlloc,
		"cuMemFree_v2":                 &d.cuMemFree,
		"cuMemcpyHtoD_v2":              &d.cuMemcpyHtoD,
		"cuMemcpyDtoH_v2":              &d.cuMemcpyDtoH,
		"cuMemsetD8_v2":                &d.cuMemsetD8,
		"cuMemcpyDtoD_v2":              &d.cuMemcpyDtoD,
		"cuLaunchKernel":               &d.cuLaunchKernel,
		"cuGetErrorName":               &d.cuGetErrorName,
		"cuGetErrorString":             &d.cuGetErrorString,
	}
}

// Version returns the driver's CUDA version (e.g. 13000 for 13.0).
func (d *Driver) Version() int { return d.version }

// Close does nothing: the driver library stays loaded for the life of the
// process (see Load), and Load returns this Driver again. Contexts are
// released by Context.Close.
func (d *Driver) Close() error { return nil }

// check turns a result into an error naming the call.
func (d *Driver) check(op string, r Result) error {
	if r == Success {
		return nil
	}
	e := &Error{Op: op, Code: r, Name: ResultName(r)}
	var p *byte
	if d.cuGetErrorName != nil && d.cuGetErrorName(r, &p) == Success && p != nil {
		e.Name = goString(p)
	}
	p = nil
	if d.cuGetErrorString != nil && d.cuGetErrorString(r, &p) == Success && p != nil {
		e.Desc = goString(p)
	}
	return e
}

// goString copies a NUL-terminated C string (at most 4096 bytes).
func goString(p *byte) string {
	n := 0
	for n < 4096 && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cstr returns s as a NUL-terminated byte slice.
func cstr(s string) []byte { return append([]byte(s), 0) }

// init initialises the driver and counts its devices.
func (d *Driver) init() (int, error) {
	if err := d.check("cuInit", d.cuInit(0)); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	var v, n int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	d.version = int(v)
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	return int(n), nil
}

// Devices returns the number of CUDA devices.
func (d *Driver) Devices() (int, error) {
	var n int32
	err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n))
	return int(n), err
}

// Context is a device's primary context, retained, with a small block of
// memory outside the Go heap for launch parameters and JIT logs (the
// driver reads them through raw pointers). Its methods make the context
// current on a locked OS thread for the duration of each call, and are safe
// for concurrent use.
type Context struct {
	d     *Driver
	dev   int32
	ctx   uintptr
	mu    sync.Mutex // guards arena
	arena []byte
	free  func() error

	Name    string // device name
	Major   int    // compute capability
	Minor   int
	SMs     int
	MaxSmem int    // opt-in shared memory per block, bytes
	Memory  uint64 // total device memory, bytes
	ClockHz float64
}

const (
	arenaSize  = 64 << 10
	argsOff    = 0     // parameter values, 8 bytes each
	ptrsOff    = 2048  // pointers to them
	jitOptsOff = 4096  // JIT option keys and values
	infoLogOff = 8192  // 16 KiB info log
	errLogOff  = 24576 // 16 KiB error log
	logSize    = 16 << 10
	maxArgs    = 128
)

// Open retains the primary context of device ordinal.
func (d *Driver) Open(ordinal int) (*Context, error) {
	n, err := d.Devices()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: device %d requested, %d present", ErrNoDevice, ordinal, n)
	}
	c := &Context{d: d}
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&c.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), c.dev)); err != nil {
		return nil, err
	}
	c.Name = strings.TrimRight(string(name), "\x00")
	attr := func(a int) (int, error) {
		var v int32
		err := d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, int32(a), c.dev))
		return int(v), err
	}
	for _, p := range []struct {
		dst  *int
		attr int
	}{{&c.Major, AttrComputeMajor}, {&c.Minor, AttrComputeMinor}, {&c.SMs, AttrSMCount}, {&c.MaxSmem, AttrMaxSmemOptin}} {
		if *p.dst, err = attr(p.attr); err != nil {
			return nil, err
		}
	}
	clk, err := attr(AttrClockRate)
	if err != nil {
		return nil, err
	}
	c.ClockHz = float64(clk) * 1e3
	if err := d.check("cuDeviceTotalMem", d.cuDeviceTotalMem(&c.Memory, c.dev)); err != nil {
		return nil, err
	}
	if c.arena, c.free, err = newArena(arenaSize); err != nil {
		return nil, err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c.ctx, c.dev)); err != nil {
		c.free()
		return nil, err
	}
	return c, nil
}

// Close releases the primary context and the parameter memory. The
// context's allocations must have been freed.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.arena == nil {
		return nil
	}
	err := c.d.check("cuDevicePrimaryCtxRelease", c.d.cuDevicePrimaryCtxRelease(c.dev))
	if ferr := c.free(); err == nil {
		err = ferr
	}
	c.arena = nil
	return err
}

// Do runs f on a locked OS thread with the context current.
func (c *Context) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.d.check("cuCtxSetCurrent", c.d.cuCtxSetCurrent(c.ctx)); err != nil {
		return err
	}
	return f()
}

// Alloc allocates n bytes of device memory.
func (c *Context) Alloc(n int) (Ptr, error) {
	var p uint64
	err := c.Do(func() error { return c.d.check("cuMemAlloc", c.d.cuMemAlloc(&p, uint64(n))) })
	return Ptr(p), err
}

// Free frees device memory from Alloc.
func (c *Context) Free(p Ptr) error {
	return c.Do(func() error { return c.d.check("cuMemFree", c.d.cuMemFree(uint64(p))) })
}

// CopyIn copies n bytes from host memory at src to device address dst. The
// host memory must stay valid during the call (a Go slice's backing array).
func (c *Context) CopyIn(dst Ptr, src unsafe.Pointer, n int) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error { return c.d.check("cuMemcpyHtoD", c.d.cuMemcpyHtoD(uint64(dst), src, uint64(n))) })
}

// CopyOut copies n bytes from device address src to host memory at dst.
func (c *Context) CopyOut(dst unsafe.Pointer, src Ptr, n int) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error { return c.d.check("cuMemcpyDtoH", c.d.cuMemcpyDtoH(dst, uint64(src), uint64(n))) })
}

// CopyDevice queues a copy of n bytes from device address src to dst (the
// driver does not wait for it: Synchronize does).
func (c *Context) CopyDevice(dst, src Ptr, n int) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error { return c.d.check("cuMemcpyDtoD", c.d.cuMemcpyDtoD(uint64(dst), uint64(src), uint64(n))) })
}

// Zero sets n bytes at p to 0.
func (c *Context) Zero(p Ptr, n int) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error { return c.d.check("cuMemsetD8", c.d.cuMemsetD8(uint64(p), 0, uint64(n))) })
}

// Synchronize waits for all work of the context.
func (c *Context) Synchronize() error {
	return c.Do(func() error { return c.d.check("cuCtxSynchronize", c.d.cuCtxSynchronize()) })
}

// Stream is a CUDA stream (CUstream); 0 is the legacy default stream.
type Stream uintptr

// streamNonBlocking is CU_STREAM_NON_BLOCKING: the stream does not
// synchronise with the legacy default stream.
const streamNonBlocking = 1

// NewStream creates a non-blocking stream.
func (c *Context) NewStream() (Stream, error) {
	var s uintptr
	err := c.Do(func() error { return c.d.check("cuStreamCreate", c.d.cuStreamCreate(&s, streamNonBlocking)) })
	return Stream(s), err
}

// DestroyStream destroys a stream from NewStream (work already queued on it
// still runs).
func (c *Context) DestroyStream(s Stream) error {
	return c.Do(func() error { return c.d.check("cuStreamDestroy", c.d.cuStreamDestroy(uintptr(s))) })
}

// SyncStream waits for the work queued on s.
func (c *Context) SyncStream(s Stream) error {
	return c.Do(func() error { return c.d.check("cuStreamSynchronize", c.d.cuStreamSynchronize(uintptr(s))) })
}

// CopyInAsync queues a copy of n bytes from host memory at src to dst on
// s. From pageable memory the driver stages src before returning, so src
// may be reused as soon as it returns.
func (c *Context) CopyInAsync(dst Ptr, src unsafe.Pointer, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error {
		return c.d.check("cuMemcpyHtoDAsync", c.d.cuMemcpyHtoDAsync(uint64(dst), src, uint64(n), uintptr(s)))
	})
}

// ZeroAsync queues setting n bytes at p to 0 on s.
func (c *Context) ZeroAsync(p Ptr, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error {
		return c.d.check("cuMemsetD8Async", c.d.cuMemsetD8Async(uint64(p), 0, uint64(n), uintptr(s)))
	})
}

// Module is a loaded PTX module.
type Module uintptr

// Function is a kernel of a Module.
type Function uintptr

// LoadModule JIT-compiles a PTX text. A compilation error carries the JIT
// log.
func (c *Context) LoadModule(ptx []byte) (Module, error) {
	img := append(append([]byte(nil), ptx...), 0)
	var mod uintptr
	err := c.Do(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		base := uintptr(unsafe.Pointer(&c.arena[0]))
		le := binary.LittleEndian
		opts := c.arena[jitOptsOff:]
		keys := []uint32{jitInfoLogBuffer, jitInfoLogBufferSize, jitErrorLogBuffer, jitErrorLogBufferSize}
		vals := []uint64{uint64(base + infoLogOff), logSize, uint64(base + errLogOff), logSize}
		for i := range keys {
			le.PutUint32(opts[4*i:], keys[i])
			le.PutUint64(opts[64+8*i:], vals[i])
		}
		clear(c.arena[infoLogOff : errLogOff+logSize])
		r := c.d.cuModuleLoadDataEx(&mod, &img[0], uint32(len(keys)), base+jitOptsOff, base+jitOptsOff+64)
		if err := c.d.check("cuModuleLoadDataEx", r); err != nil {
			log := strings.TrimRight(string(c.arena[errLogOff:errLogOff+logSize]), "\x00")
			if log != "" {
				return fmt.Errorf("%w; JIT log: %s", err, strings.TrimSpace(log))
			}
			return err
		}
		return nil
	})
	return Module(mod), err
}

// Unload unloads a module.
func (c *Context) Unload(m Module) error {
	return c.Do(func() error { return c.d.check("cuModuleUnload", c.d.cuModuleUnload(uintptr(m))) })
}

// Function looks up a kernel; maxSmem > 48 KiB raises the kernel's dynamic
// shared-memory limit to it.
func (c *Context) Function(m Module, name string, maxSmem int) (Function, error) {
	var f uintptr
	n := cstr(name)
	err := c.Do(func() error {
		if err := c.d.check("cuModuleGetFunction("+name+")", c.d.cuModuleGetFunction(&f, uintptr(m), &n[0])); err != nil {
			return err
		}
		if maxSmem > 48<<10 {
			return c.d.check("cuFuncSetAttribute("+name+")", c.d.cuFuncSetAttribute(f, funcAttrMaxDynSmem, int32(maxSmem)))
		}
		return nil
	})
	return Function(f), err
}

// FuncInfo is what the JIT compiler gave a kernel
// (cuFuncGetAttribute).
type FuncInfo struct {
	Registers  int // registers per thread (CU_FUNC_ATTRIBUTE_NUM_REGS)
	LocalBytes int // local memory per thread, spills included (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
	StaticSmem int // static shared memory per block, bytes (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
	MaxThreads int // the most threads per block it can be launched with (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
	PTXVersion int // e.g. 80 for PTX ISA 8.0 (CU_FUNC_ATTRIBUTE_PTX_VERSION)
	BinaryArch int // the SASS's compute capability, e.g. 90 (CU_FUNC_ATTRIBUTE_BINARY_VERSION)
}

// FuncInfo returns the kernel's register count, local-memory (spill) size
// and the other figures of FuncInfo.
func (c *Context) FuncInfo(f Function) (FuncInfo, error) {
	var fi FuncInfo
	err := c.Do(func() error {
		for _, a := range []struct {
			dst  *int
			attr int32
		}{{&fi.MaxThreads, funcAttrMaxThreads}, {&fi.StaticSmem, funcAttrSharedBytes}, {&fi.LocalBytes, funcAttrLocalBytes},
			{&fi.Registers, funcAttrNumRegs}, {&fi.PTXVersion, funcAttrPTXVersion}, {&fi.BinaryArch, funcAttrBinaryVersion}} {
			var v int32
			if err := c.d.check("cuFuncGetAttribute", c.d.cuFuncGetAttribute(&v, a.attr, uintptr(f))); err != nil {
				return err
			}
			*a.dst = int(v)
		}
		return nil
	})
	return fi, err
}

// Arg is one kernel argument: its value's bits and size (4 or 8 bytes).
type Arg struct {
	Bits uint64
	Size int
}

// Launch queues f on stream s with the arguments in the order of the
// kernel's parameters. It does not wait for the kernel.
func (c *Context) Launch(f Function, grid, block [3]uint32, smem int, args []Arg, s Stream) error {
	if len(args) > maxArgs {
		return fmt.Errorf("cuda: %d kernel arguments, at most %d", len(args), maxArgs)
	}
	return c.Do(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		base := uintptr(unsafe.Pointer(&c.arena[0]))
		if err := packArgs(c.arena, base, args); err != nil {
			return err
		}
		r := c.d.cuLaunchKernel(uintptr(f), grid[0], grid[1], grid[2], block[0], block[1], block[2], uint32(smem), uintptr(s), base+ptrsOff, 0)
		return c.d.check("cuLaunchKernel", r)
	})
}

// packArgs writes the argument values into arena (8-byte slots from argsOff)
// and, from ptrsOff, the array of their addresses that cuLaunchKernel reads;
// base is the arena's address.
func packArgs(arena []byte, base uintptr, args []Arg) error {
	le := binary.LittleEndian
	for i, a := range args {
		v := arena[argsOff+8*i:]
		switch a.Size {
		case 4:
			le.PutUint32(v, uint32(a.Bits))
		case 8:
			le.PutUint64(v, a.Bits)
		default:
			return fmt.Errorf("cuda: argument %d has size %d", i, a.Size)
		}
		le.PutUint64(arena[ptrsOff+8*i:], uint64(base+argsOff+uintptr(8*i)))
	}
	return nil
}
