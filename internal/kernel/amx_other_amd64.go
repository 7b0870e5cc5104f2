//go:build amd64 && !linux && !purego

package kernel

// amxPermitted is false outside Linux: this package does not know how
// other kernels grant the AMX tile state, so it never uses AMX there.
func amxPermitted() bool { return false }
