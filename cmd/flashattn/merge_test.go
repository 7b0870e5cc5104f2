package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/npy"
)

// TestMergeCommand: attention over three disjoint key ranges, written as
// attn would, merged by the command, equals attention over all keys.
func TestMergeCommand(t *testing.T) {
	const b, sq, sk, h, d = 2, 3, 200, 2, 16
	r := rand.New(rand.NewPCG(1, 5))
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
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
	if code, _, errs := runCLI(append([]string{"merge", "-o", outDir}, dirs...)...); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, errs)
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
		code, _, errs := runCLI(args...)
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
