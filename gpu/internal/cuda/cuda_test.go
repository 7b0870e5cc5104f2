package cuda

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// A library that does not exist is the "no driver" path: an error wrapping
// ErrNoDevice, never a crash.
func TestLoadMissingLibrary(t *testing.T) {
	_, err := Load("libflashattn-no-such-driver.so.9")
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Load of a missing library: %v, want ErrNoDevice", err)
	}
	if DefaultLibrary != "" && !strings.Contains(err.Error(), "not loadable") {
		t.Errorf("message %q does not say the driver could not be loaded", err)
	}
}

// A library without the driver's symbols is refused the same way.
func TestLoadWrongLibrary(t *testing.T) {
	if DefaultLibrary == "" {
		t.Skip("no driver binding on this platform")
	}
	_, err := Load("libc.so.6")
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Load(libc.so.6): %v, want ErrNoDevice", err)
	}
	if !strings.Contains(err.Error(), "has no cu") {
		t.Errorf("message %q does not name the missing symbol", err)
	}
}

// The default library either loads (a machine with a GPU) or reports
// ErrNoDevice.
func TestLoadDefault(t *testing.T) {
	d, err := Load("")
	if err != nil {
		if !errors.Is(err, ErrNoDevice) {
			t.Fatalf("Load: %v, want nil or ErrNoDevice", err)
		}
		t.Logf("no driver here: %v", err)
		return
	}
	if n, err := d.Devices(); err != nil || n < 1 {
		t.Fatalf("Devices = %d, %v after a successful Load", n, err)
	}
	if d.Version() < 11000 {
		t.Errorf("driver version %d predates CUDA 11", d.Version())
	}
}

func TestErrorText(t *testing.T) {
	d := &Driver{} // no driver functions: names come from the table
	err := d.check("cuMemAlloc", 2)
	var e *Error
	if !errors.As(err, &e) || e.Code != 2 {
		t.Fatalf("check: %v", err)
	}
	if got := err.Error(); got != "cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)" {
		t.Errorf("Error() = %q", got)
	}
	if d.check("x", Success) != nil {
		t.Error("Success gave an error")
	}
	if !errors.Is(d.check("cuInit", 100), ErrNoDevice) || errors.Is(d.check("cuMemAlloc", 2), ErrNoDevice) {
		t.Error("only no-device results should match ErrNoDevice")
	}
	if !errors.Is(d.check("cuCtxSynchronize", 700), ErrSticky) || !errors.Is(d.check("cuLaunchKernel", 719), ErrSticky) ||
		errors.Is(d.check("cuMemAlloc", 2), ErrSticky) || errors.Is(d.check("cuLaunchKernel", 701), ErrSticky) {
		t.Error("only the faults that leave the context unusable should match ErrSticky")
	}
	if got := ResultName(12345); got != "CUDA_ERROR_12345" {
		t.Errorf("ResultName(12345) = %q", got)
	}
}

func TestPackArgs(t *testing.T) {
	arena := make([]byte, arenaSize)
	const base = 0x7000_0000
	args := []Arg{{0x1122334455667788, 8}, {0xdeadbeef, 4}, {0xffffffff, 4}}
	if err := packArgs(arena, base, args); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if le.Uint64(arena[0:]) != 0x1122334455667788 || le.Uint32(arena[8:]) != 0xdeadbeef || le.Uint32(arena[16:]) != 0xffffffff {
		t.Error("values not in their slots")
	}
	for i := range args {
		if p := le.Uint64(arena[ptrsOff+8*i:]); p != base+uint64(8*i) {
			t.Errorf("pointer %d = %#x, want %#x", i, p, base+8*i)
		}
	}
	if packArgs(arena, base, []Arg{{1, 2}}) == nil {
		t.Error("a 2-byte argument was accepted")
	}
}
