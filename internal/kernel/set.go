package kernel

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Set is one implementation of each kernel family: everything an attention
// call computes with. Sets are values, built from the registry; the
// process has one active set (Active), chosen once.
type Set struct {
	Impl   Impl   // family "f32": the float32 microkernels, converters and packers
	Decode Decode // family "decode": the KV-cache products of decoding
	BF16   Half   // family "bf16": the bfloat16 products
	F16    Half   // family "f16": the fp16 products

	// A Half named "f32" in a Set runs the Set's own Impl: every way of
	// building a Set (With, the default) binds it.
}

// Half returns the half-precision path of s for e (BF16 or F16).
func (s *Set) Half(e Elem) Half {
	checkElem(e)
	if e == F16 {
		return s.F16
	}
	return s.BF16
}

// String returns s in the syntax of FLASHATTN_KERNEL, every family named:
// "f32=avx512,decode=avx512,bf16=avx512bf16,f16=f32" for instance.
// Active().With(s.String()) is s again.
func (s *Set) String() string {
	return fmt.Sprintf("f32=%s,decode=%s,bf16=%s,f16=%s", s.Impl.Name, s.Decode.Name, s.BF16.Name, s.F16.Name)
}

// With returns a copy of s with the implementations that spec names, in
// the syntax of FLASHATTN_KERNEL (see the package doc): "generic",
// "f32=avx2,decode=avx2", "bf16=amx" and so on. Unlike the environment
// variable it is strict: if an item names a family or an implementation
// that this CPU does not have, With returns an error.
func (s *Set) With(spec string) (*Set, error) {
	t := *s
	r := registered()
	if _, bad := r.apply(&t, spec); len(bad) > 0 {
		return nil, fmt.Errorf("kernel: %q: not available on this CPU: %s", spec, strings.Join(bad, ", "))
	}
	t.bind()
	return &t, nil
}

// setHalf sets the path of s for e.
func (s *Set) setHalf(e Elem, h Half) {
	if e == F16 {
		s.F16 = h
	} else {
		s.BF16 = h
	}
}

// bind makes the "f32" 16-bit paths of s run s.Impl.
func (s *Set) bind() {
	for _, e := range []Elem{BF16, F16} {
		if s.Half(e).Name == "f32" {
			s.setHalf(e, f32Half(e, s.Impl))
		}
	}
}

// The families, in the order of Set.String; a spec's keys.
const (
	famF32 = iota
	famDecode
	famBF16
	famF16
	numFamilies
)

var familyNames = [numFamilies]string{"f32", "decode", "bf16", "f16"}

// pick sets family fam of s to its implementation named name and reports
// whether this CPU has one.
func (r *registry) pick(s *Set, fam int, name string) bool {
	switch fam {
	case famF32:
		im, ok := find(r.impls, implName, name)
		if ok {
			s.Impl = im
		}
		return ok
	case famDecode:
		dk, ok := find(r.decodes, decodeName, name)
		if ok {
			s.Decode = dk
		}
		return ok
	case famBF16, famF16:
		e := Elem(fam - famBF16 + 1)
		h, ok := find(r.halves[e-1], halfName, name)
		if ok {
			s.setHalf(e, h)
		}
		return ok
	}
	return false
}

// apply sets in s, left to right, the implementations spec names. It
// returns which families it set and the items it could not apply (an
// unknown family, or a name that no family this item covers has on this
// CPU), which leave s as it was.
func (r *registry) apply(s *Set, spec string) (set [numFamilies]bool, bad []string) {
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, name, keyed := strings.Cut(item, "=")
		key, name = strings.TrimSpace(key), strings.TrimSpace(name)
		if !keyed { // a bare name: every family that has it
			name = key
		}
		ok := false
		for fam, fn := range familyNames {
			if keyed && key != fn {
				continue
			}
			if r.pick(s, fam, name) {
				set[fam], ok = true, true
			}
		}
		if !ok {
			bad = append(bad, item)
		}
	}
	return set, bad
}

// defaultSet returns the set the process starts with, for the value spec
// of FLASHATTN_KERNEL: the implementations spec names where this CPU has
// them (other items are ignored), and for the other families the best
// self-checked one (f32, decode) or the fastest measured on this machine
// with the set's float32 kernels (bf16, f16; a few milliseconds).
func defaultSet(spec string) *Set {
	r := registered()
	s := &Set{Impl: r.impls[0], Decode: r.decodes[0]}
	set, _ := r.apply(s, spec)
	for _, e := range []Elem{BF16, F16} {
		if set[famBF16+int(e)-1] {
			continue
		}
		h, ok := find(r.halves[e-1], halfName, measureHalf(e, s.Impl)[0].Name)
		if !ok {
			bad("measured a path that is not registered")
		}
		s.setHalf(e, h)
	}
	s.bind()
	return s
}

var (
	active     atomic.Pointer[Set]
	activeOnce sync.Once
)

// Active returns the active kernel set. The first call chooses it (see
// defaultSet), reading FLASHATTN_KERNEL (the only time the environment is
// read); later calls cost an atomic load. The set must not be modified:
// derive others with With.
func Active() *Set {
	if s := active.Load(); s != nil {
		return s
	}
	activeOnce.Do(func() {
		active.CompareAndSwap(nil, defaultSet(os.Getenv("FLASHATTN_KERNEL")))
	})
	return active.Load()
}

// ForceSet makes s the active set and returns a function that makes the
// previous one active again, with Force's rules. It is for tests that run a
// set of their own making (Active's kernels wrapped, to count the work a
// call gives them); s must not be modified while it is active.
func ForceSet(s *Set) (restore func()) {
	prev := Active()
	active.Store(s)
	return func() { active.Store(prev) }
}

// Force makes Active().With(spec) the active set and returns a function
// that makes the previous one active again: how tests run every
// implementation in one process (as crypto/internal/impl.Select does), as
// in
//
//	restore, err := kernel.Force("f32=avx2,decode=avx2")
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(restore)
//
// Forcing nests: a Force on top of another changes only the families its
// spec names. On an error (spec names something this CPU lacks) nothing
// changes and restore does nothing. The active set belongs to the whole
// process: a test that forces one must not run in parallel with tests
// that use another (the rule of t.Setenv), and calls already running keep
// the set they read.
func Force(spec string) (restore func(), err error) {
	prev := Active()
	s, err := prev.With(spec)
	if err != nil {
		return func() {}, err
	}
	active.Store(s)
	return func() { active.Store(prev) }, nil
}
