//go:build !unix

package npy

// processAlive cannot tell on this platform, so it says yes: stale
// temporary files are then never removed, rather than removed while in use.
func processAlive(pid int) bool { return true }
