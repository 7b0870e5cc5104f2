package kernel

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestRegistry: every family lists its pure-Go implementations last, the
// architecture's first, and every candidate the CPU supports passed its
// self-check (none is silently dropped).
func TestRegistry(t *testing.T) {
	r := registered()
	for _, err := range r.rejected {
		t.Errorf("rejected by its self-check: %v", err)
	}
	if got, want := names(Available(), implName), append(names(archImpls(), implName), "generic"); !slices.Equal(got, want) {
		t.Errorf("f32: %v, want %v", got, want)
	}
	if got, want := names(DecodeAvailable(), decodeName), append(names(archDecode(), decodeName), "generic"); !slices.Equal(got, want) {
		t.Errorf("decode: %v, want %v", got, want)
	}
	for _, e := range []Elem{BF16, F16} {
		if got, want := names(HalfAvailable(e), halfName), append(names(archHalf(e), halfName), "f32", "generic"); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", e, got, want)
		}
	}
	for _, name := range expectedHalfPaths() {
		if _, err := LookupHalf(BF16, name); err != nil {
			t.Errorf("the CPU supports the %s path but it is not registered", name)
		}
	}
	if _, err := Lookup("no-such-kernel"); err == nil {
		t.Error("Lookup of an unknown name: no error")
	}
	if _, err := LookupDecode("no-such-kernel"); err == nil {
		t.Error("LookupDecode of an unknown name: no error")
	}
	if _, err := LookupHalf(F16, "avx512bf16"); err == nil {
		t.Error("LookupHalf found a bf16-only path for fp16")
	}
	defer func() {
		if recover() == nil {
			t.Error("HalfAvailable(0): no panic")
		}
	}()
	HalfAvailable(0)
}

func names[T any](xs []T, name func(T) string) []string {
	var s []string
	for _, x := range xs {
		s = append(s, name(x))
	}
	return s
}

// TestDefaultSet: without FLASHATTN_KERNEL the set is the best float32 and
// decode kernels and a measured 16-bit path per type; the spec forces
// families, and what this CPU lacks is ignored.
func TestDefaultSet(t *testing.T) {
	best, bestDecode := Available()[0].Name, DecodeAvailable()[0].Name
	for _, c := range []struct {
		spec                   string
		f32, decode, bf16, f16 string // "" : the default (for bf16/f16: any registered path)
	}{
		{spec: ""},
		{spec: "generic", f32: "generic", decode: "generic", bf16: "generic", f16: "generic"},
		{spec: " generic , f32 = " + best + ",", f32: best, decode: "generic", bf16: "generic", f16: "generic"},
		{spec: "bf16=generic,f16=f32", bf16: "generic", f16: "f32"},
		{spec: "f32", bf16: "f32", f16: "f32"},
		{spec: "f32=generic", f32: "generic"},
		{spec: "decode=generic,bf16=f32", decode: "generic", bf16: "f32"},
		// Ignored: unknown names and families, empty items, a path the
		// family does not have.
		{spec: "no-such-kernel"},
		{spec: "f32=no-such-kernel,gpu=generic,=generic,bf16=,,"},
		{spec: "f32=f32,decode=amx"},
		{spec: "generic,f16=avx512bf16", f32: "generic", decode: "generic", bf16: "generic", f16: "generic"},
	} {
		s := defaultSet(c.spec)
		want := func(v, def string) string {
			if v == "" {
				return def
			}
			return v
		}
		if s.Impl.Name != want(c.f32, best) || s.Decode.Name != want(c.decode, bestDecode) {
			t.Errorf("%q: %v", c.spec, s)
		}
		for _, e := range []Elem{BF16, F16} {
			v := c.bf16
			if e == F16 {
				v = c.f16
			}
			got := s.Half(e).Name
			if _, err := LookupHalf(e, got); err != nil || got != want(v, got) || s.Half(e).Elem != e {
				t.Errorf("%q: %s path %s", c.spec, e, got)
			}
		}
	}
}

// TestEnvReadOnce runs this test binary again with FLASHATTN_KERNEL set:
// the first Active call reads it, and changing it later changes nothing.
func TestEnvReadOnce(t *testing.T) {
	if os.Getenv("KERNEL_TEST_ENV_CHILD") == "1" {
		s := Active().String()
		os.Setenv("FLASHATTN_KERNEL", "f32=no-such-kernel,bf16=f32,f16=f32")
		os.Stdout.WriteString("\nset " + s + " then " + Active().String() + " " + Active().Impl.Name + " " + Active().Half(F16).Name + "\n")
		return
	}
	if testing.Short() {
		t.Skip("runs the test binary again")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvReadOnce$", "-test.v")
	cmd.Env = append(os.Environ(), "KERNEL_TEST_ENV_CHILD=1", "FLASHATTN_KERNEL=generic,bf16=f32")
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.ENOEXEC) {
		// An emulated test binary (go test -exec qemu-aarch64-static)
		// where the kernel has no binfmt_misc entry for it.
		t.Skipf("cannot run the test binary again here: %v", err)
	}
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "set f32=generic,decode=generic,bf16=f32,f16=generic then f32=generic,decode=generic,bf16=f32,f16=generic generic generic"
	if !strings.Contains(string(out), want) {
		t.Errorf("output %q, want a line %q", out, want)
	}
}

// TestForce: Force changes only the families its spec names, nests, and
// restores; an unavailable name is an error that changes nothing; the
// wrappers return the active set's parts.
func TestForce(t *testing.T) {
	orig := Active()
	if Active() != orig {
		t.Fatal("Active changed between calls")
	}
	for _, im := range Available() {
		restore, err := Force("f32=" + im.Name + ",bf16=f32")
		if err != nil {
			t.Fatal(err)
		}
		s := Active()
		if s.Impl.Name != im.Name || Active().Impl.Name != im.Name || s.Decode.Name != orig.Decode.Name || Active().Decode.Name != orig.Decode.Name ||
			Active().Half(BF16).Name != "f32" || Active().Half(F16).Name != orig.F16.Name {
			t.Errorf("forced f32=%s,bf16=f32: %v", im.Name, s)
		}
		// Nested: generic everywhere, then back.
		inner, err := Force("generic")
		if err != nil {
			t.Fatal(err)
		}
		if got := Active().String(); got != "f32=generic,decode=generic,bf16=generic,f16=generic" {
			t.Errorf("nested generic: %s", got)
		}
		inner()
		if Active() != s {
			t.Errorf("restoring the nested set gives %v, want %v", Active(), s)
		}
		restore()
		if Active() != orig {
			t.Errorf("restoring gives %v, want %v", Active(), orig)
		}
	}
	for _, spec := range []string{"no-such-kernel", "f32=amx", "bf16=avx2", "gpu=generic", "generic,f32=no-such-kernel", "=generic", "f16=avx512bf16"} {
		restore, err := Force(spec)
		if err == nil {
			t.Errorf("Force(%q): no error", spec)
		}
		restore()
		if Active() != orig {
			t.Errorf("Force(%q) changed the active set", spec)
		}
	}
	// Every set round-trips through its String.
	for _, s := range []*Set{orig, defaultSet("generic"), defaultSet("bf16=f32,f16=f32")} {
		u, err := orig.With(s.String())
		if err != nil || u.String() != s.String() {
			t.Errorf("With(%q) = %v, %v", s.String(), u, err)
		}
	}
}

// TestSetBindsF32Path: the "f32" 16-bit path of a set runs the set's own
// float32 kernels, whatever it ran before the set was derived.
func TestSetBindsF32Path(t *testing.T) {
	calls := 0
	counting := Generic
	counting.Name = "counting"
	counting.MulAddAB = func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
		calls++
		Generic.MulAddAB(c, ldc, a, lda, b, ldb, m, n, k)
	}
	s := &Set{Impl: Available()[0], Decode: GenericDecode, BF16: f32Half(BF16, Available()[0]), F16: GenericHalf(F16)}
	s.Impl = counting
	s.bind()
	c, a, b := make([]float32, 16), make([]uint16, 2), make([]uint16, 32)
	s.BF16.Mul(c, 16, a, 2, b, 32, 1, 16, 2)
	s.F16.Mul(c, 16, a, 2, b, 32, 1, 16, 2)
	if calls != 1 {
		t.Errorf("the f32 path of a set ran its float32 kernels %d times, want 1", calls)
	}
	for _, im := range Available() {
		u, err := Active().With("f32=" + im.Name + ",bf16=f32,f16=f32")
		if err != nil {
			t.Fatal(err)
		}
		v, err := u.With("f32=generic")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []Elem{BF16, F16} {
			x, y := make([]float32, 48*64), make([]float32, 48*64)
			for _, run := range []struct {
				s   *Set
				out []float32
				im  Impl
			}{{u, x, im}, {v, y, Generic}} {
				r := make([]float32, 48*64)
				sampleProduct(e, run.s.Half(e), run.out)
				sampleProduct(e, f32Half(e, run.im), r)
				if !slices.Equal(run.out, r) {
					t.Errorf("%s: the f32 path of %v does not run %s", e, run.s, run.im.Name)
				}
			}
		}
	}
}

// sampleProduct runs h.Mul on a fixed 48×64×64 product into c.
func sampleProduct(e Elem, h Half, c []float32) {
	const m, n, k = 48, 64, 64
	a := make([]uint16, m*k)
	for i := range a {
		a[i] = e.FromF32(float32(i%7) - 3.3)
	}
	bf := make([]float32, k*n)
	for i := range bf {
		bf[i] = float32(i%11)*0.37 - 1
	}
	b := make([]uint16, VNNILen(k, n))
	PackVNNI(b, bf, n, k, n, false, e)
	h.Mul(c, n, a, k, b, W*k, m, n, k)
}

// TestMeasureHalf: every registered path is timed, fastest first.
func TestMeasureHalf(t *testing.T) {
	for _, e := range []Elem{BF16, F16} {
		hs := HalfAvailable(e)
		times := MeasureHalf(e)
		if len(times) != len(hs) {
			t.Fatalf("%s: measured %d paths of %d", e, len(times), len(hs))
		}
		for i, x := range times {
			if !(x.GFLOPS > 0) || i > 0 && x.GFLOPS > times[i-1].GFLOPS {
				t.Fatalf("%s: timings not positive and sorted: %v", e, times)
			}
		}
		t.Logf("%s: measured %v; active %s", e, times, Active())
	}
}
