package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/half"
)

// TestMergeCommand: attention over three disjoint key ranges, written as
// attn would, merged by the command, equals attention over all keys.
func TestMergeCommand(t *testing.T) {
	const b, sq, sk, h, d = 2, 3, 200, 2, 16
	r := rand.New(rand.NewPCG(1, 5))
	rnd := func(n int) []float32 { return atRand(r, n) }
	q := flashattn.Dense(rnd(b*sq*h*d), b, sq, h, d)
	k, v := flashattn.Dense(rnd(b*sk*h*d), b, sk, h, d), flashattn.Dense(rnd(b*sk*h*d), b, sk, h, d)
	full, fullLSE, err := flashattn.Forward(q, k, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	var dirs []string
	for i, rg := range [][2][]int32{{{0, 0}, {70, 0}}, {{70, 0}, {150, 0}}, {{150, 0}, {200, 200}}} {
		out, lse, err := flashattn.Forward(q, k, v, &flashattn.Options{KVCache: &flashattn.KVCache{LeftPad: rg[0], SeqLens: rg[1]}})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, string(rune('a'+i)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		must(t, npy.WriteFloat32(filepath.Join(dir, "out.npy"), out.Data, []int{b, sq, h, d}))
		must(t, npy.WriteFloat32(filepath.Join(dir, "lse.npy"), lse, []int{b, h, sq}))
		dirs = append(dirs, dir)
	}
	outDir := filepath.Join(root, "merged")
	if code, _, errs := atRun(append([]string{"merge", "-o", outDir}, dirs...)...); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, errs)
	}
	// Flags after the directories (Go's flag package alone stopped at the
	// first directory: "-o is required"), and "--" ending the flags.
	for i, args := range [][]string{
		append(append([]string{"merge"}, dirs...), "-o", outDir+"-late"),
		append([]string{"merge", dirs[0], "-o", outDir + "-mid", "--"}, dirs[1:]...),
	} {
		if code, _, errs := atRun(args...); code != 0 {
			t.Fatalf("merge with flags among the directories (%d): exit %d: %s", i, code, errs)
		}
		for _, f := range []string{"out.npy", "lse.npy"} {
			a, _ := os.ReadFile(filepath.Join(outDir, f))
			b, err := os.ReadFile(filepath.Join(args[slices.Index(args, "-o")+1], f))
			if err != nil || !bytes.Equal(a, b) {
				t.Fatalf("merge with flags among the directories (%d): %s differs from the flags-first run (%v)", i, f, err)
			}
		}
	}
	if code, _, _ := atRun("merge", dirs[0], "--", "-o", outDir+"-dash"); code == 0 {
		t.Fatal(`merge a -- -o m: "-o" after "--" is a directory, yet merge succeeded`)
	}
	o, _, err := npy.ReadFloat32(filepath.Join(outDir, "out.npy"))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := npy.ReadFloat32(filepath.Join(outDir, "lse.npy"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range o {
		if math.Abs(float64(o[i]-full.Data[i])) > 2e-6 {
			t.Fatalf("out %d: %v, full %v", i, o[i], full.Data[i])
		}
	}
	for i := range l {
		if math.Abs(float64(l[i]-fullLSE[i])) > 2e-6 {
			t.Fatalf("lse %d: %v, full %v", i, l[i], fullLSE[i])
		}
	}
	// Errors: one line naming the file, nothing written.
	bad := filepath.Join(root, "bad")
	must(t, os.MkdirAll(bad, 0o755))
	must(t, npy.WriteFloat32(filepath.Join(bad, "out.npy"), make([]float32, 12), []int{1, 3, 2, 2}))
	for _, args := range [][]string{
		{"merge", "-o", filepath.Join(root, "x")},
		{"merge", dirs[0]},
		{"merge", "-o", filepath.Join(root, "x"), dirs[0], bad},
		{"merge", "-o", filepath.Join(root, "x"), filepath.Join(root, "missing")},
	} {
		code, _, errs := atRun(args...)
		if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
		if _, err := os.Stat(filepath.Join(root, "x")); err == nil {
			t.Errorf("%v: wrote output despite failing", args)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMergeFloat16: '<f2' out.npy files (as "attn -dtype f16" writes them)
// merge into a '<f2' out.npy holding the exact merge rounded once; a mix
// of '<f2' and '<f4' parts gives '<f4'; an lse.npy must be '<f4'.
func TestMergeFloat16(t *testing.T) {
	const b, sq, sk, h, d = 2, 3, 120, 2, 16
	r := rand.New(rand.NewPCG(3, 5))
	root := t.TempDir()
	p := func(n string) string { return filepath.Join(root, n) }
	rnd := func(n int) []float32 { return atRand(r, n) }
	atWriteF32(t, p("q.npy"), rnd(b*sq*h*d), b, sq, h, d)
	atWriteF32(t, p("k.npy"), rnd(b*sk*h*d), b, sk, h, d)
	atWriteF32(t, p("v.npy"), rnd(b*sk*h*d), b, sk, h, d)
	// Three key ranges per sequence through -cache-leftpad and
	// -cache-seqlens; the middle one is empty for sequence 1.
	ranges := [][2][]int32{{{0, 0}, {50, 40}}, {{50, 40}, {90, 40}}, {{90, 40}, {120, 120}}}
	var dirs []string
	for i, rg := range ranges {
		atWriteI32(t, p("pad.npy"), rg[0], b)
		atWriteI32(t, p("lens.npy"), rg[1], b)
		dir := p(string(rune('a' + i)))
		args := []string{"attn", "-q", p("q.npy"), "-k", p("k.npy"), "-v", p("v.npy"), "-o", dir,
			"-cache-seqlens", p("lens.npy"), "-cache-leftpad", p("pad.npy"), "-dtype", "f16"}
		if code, _, stderr := atRun(args...); code != 0 {
			t.Fatalf("part %d: exit %d: %s", i, code, stderr)
		}
		dirs = append(dirs, dir)
	}
	full := p("full")
	if code, _, stderr := atRun("attn", "-q", p("q.npy"), "-k", p("k.npy"), "-v", p("v.npy"), "-o", full, "-dtype", "f16"); code != 0 {
		t.Fatalf("full: exit %d: %s", code, stderr)
	}
	merged := p("merged")
	if code, _, stderr := atRun(append([]string{"merge", "-o", merged}, dirs...)...); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	// The exact merge of the parts' files, in float64, rounded once.
	var parts, lses [][]float32
	for _, dir := range dirs {
		parts = append(parts, atReadTyped(t, filepath.Join(dir, "out.npy"), "<f2", b, sq, h, d))
		lses = append(lses, atReadTyped(t, filepath.Join(dir, "lse.npy"), "<f4", b, h, sq))
	}
	o := atReadTyped(t, filepath.Join(merged, "out.npy"), "<f2", b, sq, h, d)
	l := atReadTyped(t, filepath.Join(merged, "lse.npy"), "<f4", b, h, sq)
	fo := atReadTyped(t, filepath.Join(full, "out.npy"), "<f2", b, sq, h, d)
	fl := atReadTyped(t, filepath.Join(full, "lse.npy"), "<f4", b, h, sq)
	for bb := 0; bb < b; bb++ {
		for s := 0; s < sq; s++ {
			for hh := 0; hh < h; hh++ {
				li := (bb*h+hh)*sq + s
				m := math.Inf(-1)
				for _, x := range lses {
					m = max(m, float64(x[li]))
				}
				var sum float64
				for _, x := range lses {
					sum += math.Exp(float64(x[li]) - m)
				}
				lse := m + math.Log(sum)
				if math.Abs(float64(l[li])-lse) > 1e-6 || math.Abs(float64(l[li]-fl[li])) > 1e-3 {
					t.Fatalf("lse %d: %v, exact merge %v, unsplit %v", li, l[li], lse, fl[li])
				}
				for dd := 0; dd < d; dd++ {
					oi := ((bb*sq+s)*h+hh)*d + dd
					var acc float64
					for pi, x := range parts {
						acc += math.Exp(float64(lses[pi][li])-lse) * float64(x[oi])
					}
					want := float64(half.NewF16(float32(acc)).Float32())
					if d := math.Abs(float64(o[oi]) - want); d > 1e-3*math.Abs(want)+1e-7 {
						t.Fatalf("out %d: %v, exact merge rounded %v", oi, o[oi], want)
					}
					if d := math.Abs(float64(o[oi] - fo[oi])); d > 4e-3 {
						t.Fatalf("out %d: merged %v, unsplit %v", oi, o[oi], fo[oi])
					}
				}
			}
		}
	}
	// A '<f4' part makes the result '<f4'.
	f4 := p("f4")
	must(t, os.MkdirAll(f4, 0o755))
	must(t, npy.WriteFloat32(filepath.Join(f4, "out.npy"), parts[2], []int{b, sq, h, d}))
	must(t, npy.WriteFloat32(filepath.Join(f4, "lse.npy"), lses[2], []int{b, h, sq}))
	mixed := p("mixed")
	if code, _, stderr := atRun("merge", "-o", mixed, dirs[0], dirs[1], f4); code != 0 {
		t.Fatalf("mixed merge: exit %d: %s", code, stderr)
	}
	om := atReadTyped(t, filepath.Join(mixed, "out.npy"), "<f4", b, sq, h, d)
	for i := range om {
		if math.Abs(float64(om[i]-o[i])) > 1e-3*math.Abs(float64(o[i]))+1e-6 {
			t.Fatalf("mixed out %d: %v, all-f16 merge %v", i, om[i], o[i])
		}
	}
	// An lse.npy of float16 is refused, naming it; nothing is written.
	bad := p("badlse")
	must(t, os.MkdirAll(bad, 0o755))
	must(t, npy.WriteFloat16(filepath.Join(bad, "out.npy"), make([]half.F16, b*sq*h*d), []int{b, sq, h, d}))
	must(t, npy.WriteFloat16(filepath.Join(bad, "lse.npy"), make([]half.F16, b*h*sq), []int{b, h, sq}))
	code, _, stderr := atRun("merge", "-o", p("x"), dirs[0], bad)
	if code == 0 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, filepath.Join(bad, "lse.npy")) {
		t.Errorf("f16 lse: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(p("x")); err == nil {
		t.Error("wrote output despite failing")
	}
}

// TestMergeEmptyShape: an out.npy with an empty dimension is refused in one
// line naming the file, as attn refuses one (before, the line named the
// merged "out", no file).
func TestMergeEmptyShape(t *testing.T) {
	root := t.TempDir()
	for i, c := range []struct{ out, lse []int }{
		{[]int{1, 0, 2, 4}, []int{1, 2, 0}},
		{[]int{1, 2, 2, 0}, []int{1, 2, 2}},
		{[]int{0, 2, 4}, []int{2, 0}},
	} {
		dir := filepath.Join(root, string(rune('a'+i)))
		must(t, os.MkdirAll(dir, 0o755))
		op := filepath.Join(dir, "out.npy")
		must(t, npy.WriteFloat32(op, nil, c.out))
		must(t, npy.WriteFloat32(filepath.Join(dir, "lse.npy"), make([]float32, c.lse[0]*c.lse[1]*c.lse[len(c.lse)-1]), c.lse))
		code, _, errs := atRun("merge", "-o", filepath.Join(root, "x"), dir)
		if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, op+": ") {
			t.Errorf("out.npy %v: exit %d, stderr %q, want one line naming %s", c.out, code, errs, op)
		}
		if _, err := os.Stat(filepath.Join(root, "x")); err == nil {
			t.Errorf("out.npy %v: wrote output despite failing", c.out)
		}
	}
}
