//go:build linux && (amd64 || arm64) && !nogpu

package cuda

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// buildFake builds testdata/fakecuda.c (with the extra compiler flags) into
// a shared library, or skips the test if there is no C compiler.
func buildFake(t *testing.T, name string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the fake driver")
	}
	lib := filepath.Join(t.TempDir(), name)
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", lib}, flags...)
	if out, err := exec.Command(cc, append(args, "testdata/fakecuda.c")...).CombinedOutput(); err != nil {
		t.Skipf("cannot build the fake driver: %v\n%s", err, out)
	}
	return lib
}

// fakeDriver builds the fake driver and loads it with Load.
func fakeDriver(t *testing.T) (*Driver, uintptr) {
	t.Helper()
	lib := buildFake(t, "libfakecuda.so")
	d, err := Load(lib)
	if err != nil {
		t.Fatalf("Load(fake): %v", err)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	return d, h
}

// Every driver entry point, called through purego against a C library with
// the driver's signatures: arguments arrive in the right order and width,
// out-parameters come back, and errors carry the driver's names.
func TestFakeDriver(t *testing.T) {
	d, h := fakeDriver(t)
	var lastLaunch func(dims *uint32, args *uint64)
	var attr func(v *int32) int32
	var retained func() int32
	purego.RegisterLibFunc(&lastLaunch, h, "fake_last_launch")
	purego.RegisterLibFunc(&attr, h, "fake_attr")
	purego.RegisterLibFunc(&retained, h, "fake_retained")

	if d.Version() != 12080 {
		t.Errorf("Version = %d", d.Version())
	}
	if _, err := d.Open(1); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open(1) on a one-device driver: %v", err)
	}
	c, err := d.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "Fake GPU 9000" || c.Major != 9 || c.Minor != 0 || c.SMs != 132 || c.MaxSmem != 232448 || c.Memory != 80<<30 || c.ClockHz != 1.98e9 {
		t.Errorf("context = %+v", c)
	}
	if retained() != 1 {
		t.Errorf("primary context retained %d times", retained())
	}

	// Memory round trip.
	src := []float32{1, 2, 3, float32(math.Pi)}
	p, err := c.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CopyIn(p, unsafe.Pointer(&src[0]), 16); err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, 4)
	if err := c.CopyOut(unsafe.Pointer(&dst[0]), p, 16); err != nil || dst[3] != float32(math.Pi) || dst[0] != 1 {
		t.Errorf("round trip: %v %v", dst, err)
	}
	p2, err := c.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	cp := make([]float32, 4)
	if err := c.CopyDevice(p2, p, 16); err != nil || c.CopyOut(unsafe.Pointer(&cp[0]), p2, 16) != nil || cp[3] != float32(math.Pi) || cp[1] != 2 {
		t.Errorf("CopyDevice: %v %v", cp, err)
	}
	c.Free(p2)
	if err := c.Zero(p, 8); err != nil {
		t.Fatal(err)
	}
	c.CopyOut(unsafe.Pointer(&dst[0]), p, 16)
	if dst[0] != 0 || dst[1] != 0 || dst[2] != 3 {
		t.Errorf("after Zero(8): %v", dst)
	}
	if err := c.Free(p); err != nil {
		t.Fatal(err)
	}
	_, err = c.Alloc(1 << 40)
	var e *Error
	if !errors.As(err, &e) || e.Code != 2 || e.Name != "CUDA_ERROR_OUT_OF_MEMORY" || e.Desc != "out of memory" {
		t.Errorf("huge Alloc: %v", err)
	}

	// Modules, functions, launches.
	_, err = c.LoadModule([]byte(".version 7.0\nFAIL\n"))
	if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_PTX") || !strings.Contains(err.Error(), "JIT log: ptxas fatal   : fake error in line 3") {
		t.Errorf("failing JIT: %v", err)
	}
	m, err := c.LoadModule([]byte(".visible .entry kern(\n)"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Function(m, "missing", 0); err == nil {
		t.Error("a missing kernel was found")
	}
	f, err := c.Function(m, "kern", 100000)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := c.FuncInfo(f); err != nil || fi != (FuncInfo{Registers: 104, LocalBytes: 103, StaticSmem: 101, MaxThreads: 168, PTXVersion: 105, BinaryArch: 106}) {
		t.Errorf("FuncInfo = %+v, %v", fi, err)
	}
	var v int32
	if a := attr(&v); a != funcAttrMaxDynSmem || v != 100000 {
		t.Errorf("cuFuncSetAttribute got attribute %d value %d", a, v)
	}
	args := []Arg{{0x0123456789abcdef, 8}, {0xfedcba98, 4}, {uint64(math.Float32bits(-2.5)), 4}}
	for i := 3; i < 16; i++ {
		args = append(args, Arg{uint64(i), 4 + 4*(i%2)})
	}
	var streams func() int32
	var lastStream func() uintptr
	purego.RegisterLibFunc(&streams, h, "fake_streams")
	purego.RegisterLibFunc(&lastStream, h, "fake_last_stream")
	s, err := c.NewStream()
	if err != nil || s == 0 || streams() != 1 {
		t.Fatalf("NewStream = %#x, %v; %d streams", s, err, streams())
	}
	if err := c.Launch(f, [3]uint32{5, 6, 7}, [3]uint32{128, 1, 1}, 99000, args, s); err != nil {
		t.Fatal(err)
	}
	if lastStream() != uintptr(s) {
		t.Errorf("launch on stream %#x, want %#x", lastStream(), s)
	}
	var dims [7]uint32
	var got [16]uint64
	lastLaunch(&dims[0], &got[0])
	if dims != [7]uint32{5, 6, 7, 128, 1, 1, 99000} {
		t.Errorf("launch dims %v", dims)
	}
	for i, a := range args {
		mask := uint64(math.MaxUint64)
		if a.Size == 4 {
			mask = math.MaxUint32
		}
		if got[i]&mask != a.Bits {
			t.Errorf("argument %d: kernel saw %#x, want %#x", i, got[i]&mask, a.Bits)
		}
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	q, _ := c.Alloc(16)
	if err := c.CopyInAsync(q, unsafe.Pointer(&src[0]), 16, s); err != nil || lastStream() != uintptr(s) {
		t.Errorf("CopyInAsync: %v, stream %#x", err, lastStream())
	}
	if err := c.ZeroAsync(q, 16, s); err != nil || c.SyncStream(s) != nil {
		t.Errorf("ZeroAsync: %v", err)
	}
	c.CopyOut(unsafe.Pointer(&dst[0]), q, 16)
	if dst[3] != 0 {
		t.Errorf("after ZeroAsync: %v", dst)
	}
	c.Free(q)
	if err := c.DestroyStream(s); err != nil || streams() != 0 {
		t.Errorf("DestroyStream: %v, %d streams left", err, streams())
	}
	if err := c.Unload(m); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil || retained() != 0 {
		t.Errorf("Close: %v, retained %d", err, retained())
	}
	if err := d.Close(); err != nil {
		t.Errorf("Driver.Close: %v", err)
	}
}

// A library that lacks a driver symbol is refused, and Load does not keep
// it open: it is no longer mapped into the process afterwards.
func TestLoadReleasesLibrary(t *testing.T) {
	lib := buildFake(t, "libfakecuda_old.so", "-DFAKE_MISSING_SYMBOL")
	_, err := Load(lib)
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "cuStreamCreate") {
		t.Fatalf("Load of a driver without cuStreamCreate: %v", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	if strings.Contains(string(maps), lib) {
		t.Errorf("%s is still mapped after the failed Load (dlopen handle leaked)", lib)
	}
}

// The driver library is loaded once per process: after cuInit it is never
// unloaded (unloading and reloading libcuda has crashed other projects), so
// closing the Driver and loading again gives the same Driver, without a
// second cuInit, and the library stays mapped.
func TestLoadOncePerProcess(t *testing.T) {
	lib := buildFake(t, "libfakecuda_once.so")
	d, err := Load(lib)
	if err != nil {
		t.Fatalf("Load(fake): %v", err)
	}
	c, err := d.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(maps), lib) {
		t.Fatalf("%s was unloaded by Driver.Close after cuInit", lib)
	}
	d2, err := Load(lib)
	if err != nil {
		t.Fatalf("second Load: %v", err)
	}
	if d2 != d {
		t.Error("a second Load of the same library gave a new Driver")
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	var inits func() int32
	purego.RegisterLibFunc(&inits, h, "fake_inits")
	if n := inits(); n != 1 {
		t.Errorf("cuInit ran %d times, want once", n)
	}
}
