//go:build amd64 && !purego

package kernel

import (
	"sync"
	"syscall"
	"unsafe"
)

// Linux lets a process use the AMX tile data only after it asks:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). Without it the first
// tile instruction raises SIGILL, which Go cannot recover from. The request
// is made once, at first use, and checked with ARCH_GET_XCOMP_PERM.
const (
	sysArchPrctl      = 158 // SYS_arch_prctl on amd64
	archGetXcompPerm  = 0x1022
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

var amxPermitted = sync.OnceValue(func() bool {
	if _, _, errno := syscall.RawSyscall(sysArchPrctl, archReqXcompPerm, xfeatureXtiledata, 0); errno != 0 {
		return false
	}
	var perm uint64
	if _, _, errno := syscall.RawSyscall(sysArchPrctl, archGetXcompPerm, uintptr(unsafe.Pointer(&perm)), 0); errno != 0 {
		return false
	}
	return perm&(1<<xfeatureXtiledata) != 0
})
