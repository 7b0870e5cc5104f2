// Package cuda is a minimal binding of the CUDA driver API (libcuda) for
// flashattn's GPU kernels, loaded at run time with purego: no cgo, nothing to
// install but the NVIDIA driver. Without the driver, or on a platform the
// binding does not support, Load returns an error wrapping ErrNoDevice.
//
// A CUDA context is current per OS thread: callers run every sequence of
// calls on a locked OS thread after SetCurrent (see Driver.Do).
package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDevice is returned (wrapped) when no CUDA driver or device is usable.
var ErrNoDevice = errors.New("no CUDA device")

// ErrSticky is matched (errors.Is) by the driver's "sticky" errors: a
// kernel faulted (illegal or misaligned address, illegal instruction, a
// trap, a timeout) and the context is unusable; every later call in the
// process fails with the same error, and only a new process can use the
// GPU again.
var ErrSticky = errors.New("the CUDA context is unusable (a kernel faulted); restart the process to use the GPU again")

// Result is a CUresult.
type Result int32

// Success is CUDA_SUCCESS.
const Success Result = 0

// Error is a failed driver call.
type Error struct {
	Op   string // the driver function
	Code Result
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
	Desc string // the driver's description, if it gave one
}

// Error formats the failed call, its result name and code, and the
// driver's description.
func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code)
	if e.Desc != "" {
		s += ": " + e.Desc
	}
	return s
}

// Is makes errors.Is(err, ErrNoDevice) true for the driver's "no device"
// and "not initialised" results, and errors.Is(err, ErrSticky) for the
// errors that leave the context unusable.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNoDevice:
		return e.Code == 100 || e.Code == 3 || e.Code == 35 || e.Code == 34
	case ErrSticky:
		return e.Sticky()
	}
	return false
}

// Sticky reports whether the result leaves the context unusable (the CUDA
// driver API documents these as "the process must be terminated and
// relaunched"): illegal address, launch timeout, hardware stack error,
// illegal instruction, misaligned address, invalid address space, invalid
// program counter, and a failed (faulted) launch.
func (e *Error) Sticky() bool {
	switch e.Code {
	case 700, 702, 714, 715, 716, 717, 718, 719:
		return true
	}
	return false
}

// names are the CUresult names of the codes this package meets most, used
// when the driver cannot name a code itself.
var names = map[Result]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	35:  "CUDA_ERROR_INSUFFICIENT_DRIVER",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
	715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	718: "CUDA_ERROR_INVALID_PC",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	999: "CUDA_ERROR_UNKNOWN",
}

// ResultName returns the CUresult name of code from the table of common
// codes, or "CUDA_ERROR_<code>".
func ResultName(code Result) string {
	if n, ok := names[code]; ok {
		return n
	}
	return fmt.Sprintf("CUDA_ERROR_%d", int32(code))
}

// Ptr is a device address (CUdeviceptr).
type Ptr uint64

// Device attributes (CUdevice_attribute) and other driver constants used.
const (
	AttrClockRate         = 13
	AttrSMCount           = 16
	AttrComputeMajor      = 75
	AttrComputeMinor      = 76
	AttrMaxSmemOptin      = 97
	funcAttrMaxThreads    = 0 // CUfunction_attribute values
	funcAttrSharedBytes   = 1
	funcAttrLocalBytes    = 3
	funcAttrNumRegs       = 4
	funcAttrPTXVersion    = 5
	funcAttrBinaryVersion = 6
	funcAttrMaxDynSmem    = 8
	jitInfoLogBuffer      = 3
	jitInfoLogBufferSize  = 4
	jitErrorLogBuffer     = 5
	jitErrorLogBufferSize = 6
)
