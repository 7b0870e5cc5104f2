package kernel

import (
	"errors"
	"flag"
	"testing"
)

// requireSets fails b unless every kernel set that this CPU's features
// offer (the candidates of archImpls, archDecode and archHalf) passed its
// self-check: a benchmark over the available sets, or over Active's,
// would otherwise measure without the rejected one and say nothing (or,
// for a set it names, run an empty or another set's loop).
func requireSets(b *testing.B) {
	b.Helper()
	if rej := registered().rejected; len(rej) > 0 {
		b.Fatalf("kernel sets this CPU has failed their self-check, so they are not benchmarked: %v", errors.Join(rej...))
	}
}

// TestBenchmarksRequireSets: with a set of this CPU's rejected by its
// self-check, each benchmark that iterates kernel sets fails at once
// instead of measuring the others (or nothing) silently.
func TestBenchmarksRequireSets(t *testing.T) {
	r := *registered()
	r.rejected = append(r.rejected[:len(r.rejected):len(r.rejected)], errors.New("decode kernels avx512: self-check: a made-up failure"))
	old := registered
	registered = func() *registry { return &r }
	defer func() { registered = old }()
	bt := flag.Lookup("test.benchtime")
	prev := bt.Value.String()
	if err := bt.Value.Set("1x"); err != nil { // if the check is missing, one iteration per sub-benchmark
		t.Fatal(err)
	}
	defer bt.Value.Set(prev)
	t.Setenv("FLASHATTN_DECODE_BENCH", "1,1024,32") // a small cache, likewise
	for _, c := range []struct {
		name string
		f    func(b *testing.B)
	}{
		{"Decode", BenchmarkDecode}, {"DecodeL2", BenchmarkDecodeL2}, {"Convert", BenchmarkConvert},
		{"MulABt", BenchmarkMulABt}, {"ExpSum", BenchmarkExpSum}, {"PackVNNI", BenchmarkPackVNNI},
		{"TransposeRound", BenchmarkTransposeRound}, {"HalfVsF32", BenchmarkHalfVsF32}, {"HalfPeak", BenchmarkHalfPeak},
	} {
		failed := false
		testing.Benchmark(func(b *testing.B) {
			defer func() { failed = b.Failed() }()
			c.f(b)
		})
		if !failed {
			t.Errorf("Benchmark%s: ran with a rejected set of this CPU's and did not fail", c.name)
		}
	}
}
