package kernel

import (
	"fmt"
	"slices"
	"sync"
)

// The registry: every implementation of the four kernel families that
// this CPU runs, by name, best first. It is built once, at first use:
//
//	family   type    implementations
//	f32      Impl    the architecture's (amd64: "avx512", "avx2"), "generic"
//	decode   Decode  the architecture's (amd64: "avx512bf16", "avx512", "avx2"), "generic"
//	bf16     Half    the architecture's (amd64: "amx", "avx512bf16"), "f32", "generic"
//	f16      Half    the architecture's (amd64: "amx"), "f32", "generic"
//
// The architecture's implementations are the candidates its hooks
// (archImpls, archDecode, archHalf) return for this CPU, each kept only if
// it passes its self-check against the pure-Go twin (selfCheck,
// selfCheckDecode, selfCheckHalf); the pure-Go ones are always there. A
// Set takes one implementation of each family.

// registry is what registered returns.
type registry struct {
	impls   []Impl    // f32
	decodes []Decode  // decode
	halves  [2][]Half // bf16, f16 (index e-1); "f32" over impls[0]

	// rejected holds the self-check failures of the candidates that were
	// left out (none, on a CPU the assembly is right on).
	rejected []error
}

// registered returns the registry, built at the first call.
var registered = sync.OnceValue(func() *registry {
	r := &registry{}
	r.impls = append(passing(r, archImpls(), selfCheck), Generic)
	r.decodes = append(passing(r, archDecode(), selfCheckDecode), GenericDecode)
	for _, e := range []Elem{BF16, F16} {
		hs := passing(r, archHalf(e), selfCheckHalf)
		r.halves[e-1] = append(hs, f32Half(e, r.impls[0]), GenericHalf(e))
	}
	return r
})

// passing returns the candidates that pass their self-check, in order,
// adding the failures to r.rejected.
func passing[T any](r *registry, candidates []T, check func(T) error) []T {
	var ok []T
	for _, c := range candidates {
		if err := check(c); err != nil {
			r.rejected = append(r.rejected, err)
			continue
		}
		ok = append(ok, c)
	}
	return ok
}

// find returns the element of xs whose name is name.
func find[T any](xs []T, nameOf func(T) string, name string) (T, bool) {
	for _, x := range xs {
		if nameOf(x) == name {
			return x, true
		}
	}
	var zero T
	return zero, false
}

// lookup is find for the Lookup functions: the element of xs named name,
// or the error notFound (a format of one %q, given name).
func lookup[T any](xs []T, nameOf func(T) string, name, notFound string) (T, error) {
	x, ok := find(xs, nameOf, name)
	if !ok {
		return x, fmt.Errorf(notFound, name)
	}
	return x, nil
}

func implName(im Impl) string     { return im.Name }
func decodeName(dk Decode) string { return dk.Name }
func halfName(h Half) string      { return h.Name }

// Available lists the float32 implementations this CPU runs (the family
// "f32"), best first; the last is always Generic.
func Available() []Impl {
	return slices.Clone(registered().impls)
}

// Lookup returns the available float32 implementation with the given name.
func Lookup(name string) (Impl, error) {
	return lookup(registered().impls, implName, name, "kernel %q is not available on this CPU")
}

// DecodeAvailable lists the decode kernel sets this CPU runs (the family
// "decode"), best first; the last is always GenericDecode.
func DecodeAvailable() []Decode {
	return slices.Clone(registered().decodes)
}

// LookupDecode returns the available decode kernel set with the given name.
func LookupDecode(name string) (Decode, error) {
	return lookup(registered().decodes, decodeName, name, "decode kernels %q are not available on this CPU")
}

// HalfAvailable lists the half-precision paths for e that this CPU runs
// (the family "bf16" or "f16"): the assembly ones (amd64: "amx",
// "avx512bf16") that passed their self-check, then "f32" and "generic",
// which are always there. The "f32" path listed here runs the best float32
// kernels; the one of a Set runs the Set's.
func HalfAvailable(e Elem) []Half {
	checkElem(e)
	return slices.Clone(registered().halves[e-1])
}

// LookupHalf returns the available path for e with the given name.
func LookupHalf(e Elem, name string) (Half, error) {
	checkElem(e)
	return lookup(registered().halves[e-1], halfName, name, e.String()+" path %q is not available on this CPU")
}
