//go:build !unix

package npy

// processExists cannot tell on this platform, so it says yes: stale
// temporary files are then never removed, rather than removed while in use.
func processExists(pid int) bool { return true }
