//go:build nogpu

package cuda

import "fmt"

// Load reports that the program was built without GPU support: with the
// nogpu build tag the driver binding (purego, which needs the dynamic
// loader) is left out, so that CGO_ENABLED=0 builds a static binary.
func Load(path string) (*Driver, error) {
	return nil, fmt.Errorf("%w: built with -tags nogpu, without GPU support", ErrNoDevice)
}

// DefaultLibrary is the driver library Load would open.
const DefaultLibrary = ""

func newArena(size int) ([]byte, func() error, error) {
	return nil, nil, fmt.Errorf("%w: built with -tags nogpu", ErrNoDevice)
}
