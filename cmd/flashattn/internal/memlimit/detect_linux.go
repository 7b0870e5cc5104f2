package memlimit

import (
	"os"

	"golang.org/x/sys/unix"
)

func detect() Limit {
	if l, ok := fromProc(os.DirFS("/")); ok {
		return l
	}
	// /proc unreadable: sysinfo(2) still tells free and buffer memory.
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		unit := max(int(si.Unit), 1)
		free := Add(Size(si.Freeram).Times(unit), Size(si.Bufferram).Times(unit))
		if free > 0 {
			return Limit{Bytes: free, Source: "free memory from sysinfo"}
		}
	}
	return Limit{}
}
