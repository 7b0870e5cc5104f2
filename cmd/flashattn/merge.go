package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
)

// runMerge merges the out.npy/lse.npy pairs of attn runs over disjoint key
// sets (split-K, sequence parallelism, prefix caching) into OUTDIR.
func runMerge(args []string, stdout, stderr io.Writer, sm seams) error {
	var outDir string
	fs := newFlags("merge", stderr, "-o OUTDIR DIR...\n\n"+
		"Merges the results of attn runs with the same queries over disjoint sets of keys: each DIR\n"+
		"holds out.npy ([batch, seqlen, heads, headdim], or [total, heads, headdim]; float32 '<f4' or\n"+
		"float16 '<f2') and lse.npy ([batch, heads, seqlen] or [heads, total], natural log, '<f4').\n"+
		"Writes OUTDIR/out.npy and OUTDIR/lse.npy, the attention over the union of the keys, all or\n"+
		"nothing; out.npy is '<f2' when every input out.npy is, '<f4' otherwise (sums in float64).\n")
	fs.StringVar(&outDir, "o", "", "output `DIR` (created if missing; required)")
	if err := parseArgs(fs, args, stderr); err != nil {
		return err
	}
	dirs := fs.Args()
	switch {
	case outDir == "":
		return fmt.Errorf("-o is required")
	case len(dirs) == 0:
		return fmt.Errorf("give at least one DIR holding out.npy and lse.npy")
	}
	if err := npy.Recover(outDir); err != nil { // a write into -o that was killed
		return err
	}
	var parts []flashattn.Tensor
	var lses [][]float32
	var oshape, lshape []int
	allF16 := true
	for _, dir := range dirs {
		op, lp := filepath.Join(dir, "out.npy"), filepath.Join(dir, "lse.npy")
		oa, err := npy.ReadFloat(op)
		if err != nil {
			return err
		}
		os_ := oa.Shape
		l, ls, err := npy.ReadFloat32(lp)
		if err != nil {
			return err
		}
		if len(os_) != 4 && len(os_) != 3 {
			return fmt.Errorf("%s: shape %v, want [batch, seqlen, heads, headdim] or [total, heads, headdim]", op, os_)
		}
		if err := emptyDim(op, os_); err != nil {
			return err
		}
		if oshape == nil {
			oshape, lshape = os_, ls
		}
		if !slices.Equal(os_, oshape) {
			return fmt.Errorf("%s: shape %v, want %v (the shape of %s)", op, os_, oshape, filepath.Join(dirs[0], "out.npy"))
		}
		b, s, h, d := dims(os_)
		want := []int{b, h, s}
		if len(os_) == 3 { // packed
			want = []int{h, s}
		}
		if !slices.Equal(ls, want) {
			return fmt.Errorf("%s: shape %v does not fit %s %v (want [batch, heads, seqlen] or [heads, total])", lp, ls, op, os_)
		}
		if oa.F16 != nil {
			parts = append(parts, flashattn.DenseOf(oa.F16, b, s, h, d))
		} else {
			parts, allF16 = append(parts, flashattn.Dense(oa.F32, b, s, h, d)), false
		}
		lses = append(lses, l)
	}
	b, s, h, d := dims(oshape)
	dt := flashattn.Float32
	if allF16 {
		dt = flashattn.Float16
	}
	out := flashattn.NewTensorOf(dt, b, s, h, d)
	lse := make([]float32, b*h*s)
	if err := flashattn.MergeStates(out, lse, parts, lses); err != nil {
		return cleanErr(err)
	}
	oa, err := outArray(out, oshape, false)
	if err != nil {
		return err
	}
	return writeOutputs(outDir, map[string]npy.Array{
		filepath.Join(outDir, "out.npy"): oa,
		filepath.Join(outDir, "lse.npy"): {Shape: lshape, F32: lse},
	}, sm)
}

// dims reads a 4-D dense or 3-D packed output shape as batch, seq, heads, dim.
func dims(shape []int) (b, s, h, d int) {
	if len(shape) == 3 {
		return 1, shape[0], shape[1], shape[2]
	}
	return shape[0], shape[1], shape[2], shape[3]
}
