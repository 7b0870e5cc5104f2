package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/npy"
)

// runMerge merges the out.npy/lse.npy pairs of attn runs over disjoint key
// sets (split-K, sequence parallelism, prefix caching) into OUTDIR.
func runMerge(args []string, stdout, stderr io.Writer) error {
	var outDir string
	fs := newFlags("merge", stderr, "-o OUTDIR DIR...\n\n"+
		"Merges the results of attn runs with the same queries over disjoint sets of keys: each DIR\n"+
		"holds out.npy ([batch, seqlen, heads, headdim], or [total, heads, headdim]) and lse.npy\n"+
		"([batch, heads, seqlen] or [heads, total], natural log). Writes OUTDIR/out.npy and\n"+
		"OUTDIR/lse.npy, the attention over the union of the keys, atomically.\n")
	fs.StringVar(&outDir, "o", "", "output `DIR` (created if missing; required)")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		fs.SetOutput(stderr)
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		fmt.Fprintf(stderr, "flashattn merge: %v (see -h)\n", err)
		return errUsage
	}
	dirs := fs.Args()
	switch {
	case outDir == "":
		return fmt.Errorf("-o is required")
	case len(dirs) == 0:
		return fmt.Errorf("give at least one DIR holding out.npy and lse.npy")
	}
	var parts []flashattn.Tensor
	var lses [][]float32
	var oshape, lshape []int
	for _, dir := range dirs {
		op, lp := filepath.Join(dir, "out.npy"), filepath.Join(dir, "lse.npy")
		o, os_, err := npy.ReadFloat32(op)
		if err != nil {
			return err
		}
		l, ls, err := npy.ReadFloat32(lp)
		if err != nil {
			return err
		}
		if len(os_) != 4 && len(os_) != 3 {
			return fmt.Errorf("%s: shape %v, want [batch, seqlen, heads, headdim] or [total, heads, headdim]", op, os_)
		}
		if oshape == nil {
			oshape, lshape = os_, ls
		}
		if fmt.Sprint(os_) != fmt.Sprint(oshape) {
			return fmt.Errorf("%s: shape %v, want %v (the shape of %s)", op, os_, oshape, filepath.Join(dirs[0], "out.npy"))
		}
		b, s, h, d := dims(os_)
		if want := []int{b, h, s}; len(os_) == 3 && fmt.Sprint(ls) != fmt.Sprint([]int{h, s}) || len(os_) == 4 && fmt.Sprint(ls) != fmt.Sprint(want) {
			return fmt.Errorf("%s: shape %v does not fit %s %v (want [batch, heads, seqlen] or [heads, total])", lp, ls, op, os_)
		}
		parts = append(parts, flashattn.Dense(o, b, s, h, d))
		lses = append(lses, l)
	}
	b, s, h, d := dims(oshape)
	out := flashattn.NewTensor(b, s, h, d)
	lse := make([]float32, b*h*s)
	if err := flashattn.MergeStates(out, lse, parts, lses); err != nil {
		return cleanErr(err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("-o %s: %v", outDir, err)
	}
	return npy.WriteFiles(map[string]npy.Array{
		filepath.Join(outDir, "out.npy"): {Shape: oshape, F32: out.Data},
		filepath.Join(outDir, "lse.npy"): {Shape: lshape, F32: lse},
	})
}

// dims reads a 4-D dense or 3-D packed output shape as batch, seq, heads, dim.
func dims(shape []int) (b, s, h, d int) {
	if len(shape) == 3 {
		return 1, shape[0], shape[1], shape[2]
	}
	return shape[0], shape[1], shape[2], shape[3]
}
