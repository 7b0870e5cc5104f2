package kernel

import (
	"fmt"
	"os"
)

// Available lists the implementations this CPU can run, best first; the
// last is always Generic.
func Available() []Impl {
	return append(archImpls(), Generic)
}

// Lookup returns the available implementation with the given name.
func Lookup(name string) (Impl, error) {
	for _, im := range Available() {
		if im.Name == name {
			return im, nil
		}
	}
	return Impl{}, fmt.Errorf("kernel %q is not available on this CPU", name)
}

// Select returns the implementation to use: the one named by the
// FLASHATTN_KERNEL environment variable if it is set and available, else the
// best one this CPU supports.
func Select() Impl {
	if name := os.Getenv("FLASHATTN_KERNEL"); name != "" {
		if im, err := Lookup(name); err == nil {
			return im
		}
	}
	return Available()[0]
}
