//go:build linux && (amd64 || arm64) && !nogpu

package cuda

import (
	"fmt"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

// DefaultLibrary is the driver library Load opens by default.
const DefaultLibrary = "libcuda.so.1"

// Load opens the driver library at path (DefaultLibrary if empty), binds
// its functions and initialises it. A missing library, a missing symbol, a
// failing cuInit or no device give an error wrapping ErrNoDevice.
func Load(path string) (*Driver, error) {
	if path == "" {
		path = DefaultLibrary
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: CUDA driver %s not loadable (%v)", ErrNoDevice, path, err)
	}
	d := &Driver{close: func() error { return purego.Dlclose(lib) }}
	fail := func(err error) (*Driver, error) {
		d.Close() // the handle does not outlive a failed Load
		return nil, err
	}
	for name, fn := range d.symbols() {
		sym, err := purego.Dlsym(lib, name)
		if err != nil || sym == 0 {
			return fail(fmt.Errorf("%w: %s has no %s (driver too old?)", ErrNoDevice, path, name))
		}
		purego.RegisterFunc(fn, sym)
	}
	n, err := d.init()
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return fail(fmt.Errorf("%w: the driver reports no device", ErrNoDevice))
	}
	return d, nil
}

// newArena maps size bytes outside the Go heap.
func newArena(size int) ([]byte, func() error, error) {
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("cuda: mmap: %w", err)
	}
	return b, func() error { return unix.Munmap(b) }, nil
}
