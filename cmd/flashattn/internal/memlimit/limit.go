package memlimit

import (
	"fmt"
)

// Limit is the memory a run may use and where that figure came from.
type Limit struct {
	// Bytes is the limit; 0 means unknown (no check is possible).
	Bytes Size
	// Source says where Bytes came from, for messages: "MemAvailable",
	// "cgroup memory.max", "-max-memory", ...
	Source string
}

// Known reports whether the limit is known.
func (l Limit) Known() bool { return l.Bytes > 0 }

// Check returns nil if need fits in the limit (or the limit is unknown) and
// otherwise one line such as "needs 4.0 TiB of memory, 20.1 GiB available
// (MemAvailable)", prefixed by what.
func (l Limit) Check(what string, need Size) error {
	if !l.Known() || need <= l.Bytes {
		return nil
	}
	if what != "" {
		what += ": "
	}
	return &Error{What: what, Need: need, Limit: l}
}

// Error is the error of a run that does not fit in memory.
type Error struct {
	What  string // prefix naming the file or the run, ending in ": " (or empty)
	Need  Size
	Limit Limit
}

func (e *Error) Error() string {
	return fmt.Sprintf("%sneeds %v of memory, but only %v is available (%s)", e.What, e.Need, e.Limit.Bytes, e.Limit.Source)
}

// Detect returns the memory this process can still allocate: the smallest
// of the machine's MemAvailable and, for every cgroup the process is in
// (v1 or v2, and their ancestors), the cgroup's limit minus its usage (page
// cache that can be reclaimed does not count as used). Where none of this
// can be read (not Linux, or /proc hidden), it falls back to what sysinfo(2)
// reports free on Linux, and to an unknown limit elsewhere.
func Detect() Limit {
	return detect()
}
