//go:build linux && (amd64 || arm64) && !nogpu

package cuda

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

// DefaultLibrary is the driver library Load opens by default.
const DefaultLibrary = "libcuda.so.1"

// Load opens the driver library at path (DefaultLibrary if empty), binds
// its functions and initialises it. A missing library, a missing symbol, a
// failing cuInit or no device give an error wrapping ErrNoDevice.
//
// The library is loaded once per process and path: a successful Load
// returns the same *Driver to every later call, and once cuInit has run
// the library is never unloaded (Driver.Close releases nothing).
// Unloading libcuda after cuInit and loading it again in one process is
// not something the driver supports: it has crashed other projects (e.g.
// JuliaGPU/CUDA.jl#1848). Only a library refused before cuInit (not
// loadable, or lacking a symbol) is closed again.
func Load(path string) (*Driver, error) {
	if path == "" {
		path = DefaultLibrary
	}
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if d, ok := loaded[path]; ok {
		return d, nil
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: CUDA driver %s not loadable (%v)", ErrNoDevice, path, err)
	}
	d := &Driver{}
	for name, fn := range d.symbols() {
		sym, err := purego.Dlsym(lib, name)
		if err != nil || sym == 0 {
			purego.Dlclose(lib) // the handle does not outlive a failed Load
			return nil, fmt.Errorf("%w: %s has no %s (driver too old?)", ErrNoDevice, path, name)
		}
		purego.RegisterFunc(fn, sym)
	}
	// From here on the library stays loaded, whatever cuInit says.
	n, err := d.init()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the driver reports no device", ErrNoDevice)
	}
	loaded[path] = d
	return d, nil
}

// loaded holds the drivers Load returned, by library path.
var (
	loadedMu sync.Mutex
	loaded   = map[string]*Driver{}
)

// newArena maps size bytes outside the Go heap.
func newArena(size int) ([]byte, func() error, error) {
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("cuda: mmap: %w", err)
	}
	return b, func() error { return unix.Munmap(b) }, nil
}
