//go:build !(linux && (amd64 || arm64)) && !nogpu

package cuda

import (
	"fmt"
	"runtime"
)

// Load reports that this platform has no binding.
func Load(path string) (*Driver, error) {
	return nil, fmt.Errorf("%w: the CUDA driver binding supports linux/amd64 and linux/arm64, not %s/%s", ErrNoDevice, runtime.GOOS, runtime.GOARCH)
}

// DefaultLibrary is the driver library Load would open.
const DefaultLibrary = ""

func newArena(size int) ([]byte, func() error, error) {
	return nil, nil, fmt.Errorf("%w: unsupported platform", ErrNoDevice)
}
