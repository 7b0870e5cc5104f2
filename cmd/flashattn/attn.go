package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/gpu"
)

// attnFlags are the flags of "flashattn attn": the input files (NumPy
// '<f4' or '<f2' arrays, '<i4' for index files), the options, and OUTDIR,
// which receives out.npy and lse.npy (and dq, dk, dv.npy with -dout, and
// dsinks.npy with -sinks and -dout, dbias.npy with -bias and -dout). A bad file or value is one line on
// stderr naming the file or flag. v may have another head dim than q and k
// (MLA): out, dout and dv have v's.
type attnFlags struct {
	q, k, v, out, dout        string
	causal, topLeft           bool
	sinks, dlse, seqUsedQ     string
	bias                      string
	scale, softcap, dropout   float64
	windowLeft, windowRight   int
	alibi, cuQ, cuK, seqUsedK string
	cacheSeqlens, blockTable  string
	seed                      uint64
	workers                   int
	masks                     maskFlags
	cache                     cacheFlags
	maxMem                    *memlimit.Flag
	gpu                       *gpuFlags
	dt, kvdt                  flashattn.DType // what q and the cache are loaded as
	f16out                    bool            // write float32 results as '<f2' (the GPU's f16)
	rd                        npy.Reader      // reads the inputs within the memory limit
	dlseVals                  []float32       // the values of -dlse, read by load
	badCu                     bool            // the cu_seqlens do not describe sequences: the call refuses them
	set                       map[string]bool // flags given on the command line
}

func runAttn(args []string, stdout, stderr io.Writer, sm seams) error {
	f := attnFlags{maxMem: memlimit.NewFlag("-max-memory")}
	fs := newFlags("attn", stderr, "-q q.npy -k k.npy -v v.npy -o OUTDIR [options]\n\n"+
		"Writes OUTDIR/out.npy and OUTDIR/lse.npy; with -dout also OUTDIR/dq.npy, dk.npy, dv.npy (and\n"+
		"dsinks.npy with -sinks, dbias.npy with -bias); with -k-new also OUTDIR/k_cache.npy and v_cache.npy. Dense arrays are\n"+
		"[batch, seqlen, heads, headdim]; with -cu-seqlens-q/-k they are packed [total, heads, headdim]\n"+
		"(with -cache-seqlens and -cu-seqlens-q, q, out, -k-new and -v-new are packed, k and v stay the cache).\n"+
		"v may have another head dim than q and k (MLA): out, dout and dv then have v's. Inputs are float32 ('<f4') or\n"+
		"float16 ('<f2') and are converted to -dtype; out, dq, dk, dv are written as '<f2' for f16 and as\n"+
		"'<f4' holding the exact bf16 values for bf16 (NumPy has no bfloat16); lse is always '<f4'.\n"+
		"All outputs are written atomically, all or none: on any failure or interruption (SIGINT,\n"+
		"SIGTERM, however many) every file in OUTDIR is left as it was; after a run killed outright,\n"+
		"the next run into OUTDIR completes or undoes its write first.\n")
	fs.StringVar(&f.q, "q", "", "queries `q.npy` [batch, seqlen_q, heads, headdim] (required)")
	fs.StringVar(&f.k, "k", "", "keys `k.npy` [batch, seqlen_k, kv_heads, headdim] (required)")
	fs.StringVar(&f.v, "v", "", "values `v.npy`, shaped like k except that its head dim may differ (MLA: out, dout and dv then have v's) (required)")
	fs.StringVar(&f.out, "o", "", "output `DIR` (created if missing; required)")
	fs.StringVar(&f.dout, "dout", "", "upstream gradient `dout.npy`, shaped like out (q's shape with v's head dim): also run the backward pass")
	fs.BoolVar(&f.causal, "causal", false, "causal mask, aligned to the bottom-right corner (see -top-left)")
	fs.BoolVar(&f.topLeft, "top-left", false, "align -causal, the window and ALiBi's distances to the top-left corner instead: query row i sits at key position i "+
		"(PyTorch's is_causal when seqlen_q ≠ seqlen_k)")
	fs.StringVar(&f.sinks, "sinks", "", "learnable attention sinks: float32 `sinks.npy` [heads], one logit per query head that every row's softmax "+
		"also sums (gpt-oss); with -dout also writes OUTDIR/dsinks.npy [heads], float32, the gradient summed over batch and rows")
	fs.StringVar(&f.bias, "bias", "", "additive attention bias: float32 `bias.npy` [batch|1, heads|1, seqlen_q|1, seqlen_k|1] added to the scaled scores "+
		"(after -softcap and -alibi; -Inf hides a position), a dimension of size 1 broadcasting (PyTorch's attn_mask rule: [batch, 1, 1, seqlen_k] "+
		"is a key-padding mask); with -dout also writes OUTDIR/dbias.npy, float32 of the bias's shape, the gradient summed over the broadcast dimensions")
	fs.StringVar(&f.dlse, "dlse", "", "with -dout: the loss's gradient with respect to lse, float32 `dlse.npy` in lse's layout ([batch, heads, seqlen_q]; "+
		"[heads, total_q] with -cu-seqlens-q/-k): the backward differentiates sum(out·dout) + sum(lse·dlse)")
	fs.Float64Var(&f.scale, "scale", 0, "softmax scale (0: 1/sqrt(headdim))")
	fs.IntVar(&f.windowLeft, "window-left", -1, "sliding window: keys visible to the left (-1: unbounded)")
	fs.IntVar(&f.windowRight, "window-right", -1, "sliding window: keys visible to the right (-1: unbounded)")
	fs.Float64Var(&f.softcap, "softcap", 0, "soft-cap the scores: softcap*tanh(x/softcap) (0: off)")
	fs.StringVar(&f.alibi, "alibi", "", "ALiBi slopes `slopes.npy`, float32 [heads] or [batch, heads]")
	fs.StringVar(&f.cuQ, "cu-seqlens-q", "", "varlen: int32 `cu_q.npy` [batch+1] of sequence starts in packed q "+
		"(with -cache-seqlens, continuous batching: q, out and dout packed, k and v the cache; see -cu-seqlens-k-new)")
	fs.StringVar(&f.cuK, "cu-seqlens-k", "", "varlen: int32 `cu_k.npy` [batch+1] of sequence starts in packed k, v")
	fs.StringVar(&f.seqUsedK, "seqused-k", "", "varlen: int32 `used_k.npy` [batch], keys used per sequence (optional)")
	fs.StringVar(&f.seqUsedQ, "seqused-q", "", "varlen: int32 `used_q.npy` [batch], query rows used per sequence (optional; the others get out 0, lse -Inf, dq 0)")
	fs.StringVar(&f.cacheSeqlens, "cache-seqlens", "", "KV cache: int32 `lens.npy` [batch], keys in the cache per sequence; k, v are the cache")
	fs.StringVar(&f.blockTable, "block-table", "", "paged KV cache: int32 `table.npy` [batch, blocks_per_seq]; k, v are [num_blocks, block_size, kv_heads, dim]")
	fs.Float64Var(&f.dropout, "dropout", 0, "dropout probability in [0, 1)")
	fs.Uint64Var(&f.seed, "seed", 0, "dropout seed: the same seed gives identical files")
	fs.IntVar(&f.workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	f.masks.register(fs)
	f.cache.register(fs)
	fs.Var(f.maxMem, "max-memory", "refuse a run whose estimated peak memory exceeds this `size` (e.g. 512M, 4G; default: the memory available now)")
	f.gpu = addGPUFlags(fs, "element `type` of the computation: f32, bf16 or f16 (default f32; with -device gpu bf16 or f16, default bf16); "+
		"inputs are rounded to it, products accumulate in float32", false)
	var err error
	if f.set, err = parseSet(fs, args, stderr); err != nil {
		return err
	}
	if err := npy.Recover(f.out); err != nil { // a write into -o that was killed
		return err
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	limit := f.maxMem.Limit()
	if err := f.checkMemory(limit); err != nil {
		return err
	}
	f.rd = npy.Reader{Limit: limit}
	q, k, v, dout, err := f.load(opts)
	if err != nil {
		return err
	}
	forward, backward, done, err := f.gpu.attnFuncs()
	if err != nil {
		return err
	}
	defer done()
	out, lse, err := forward(q, k, v, opts)
	if err != nil {
		return f.callErr(err, q, v)
	}
	if f.badCu { // not reached: the call checks cu_seqlens
		return fmt.Errorf("%s, %s: not valid cu_seqlens for %s and %s", f.cuQ, f.cuK, f.q, f.k)
	}
	files := map[string]npy.Array{filepath.Join(f.out, "lse.npy"): {Shape: lseShape(q, opts), F32: lse}}
	add := func(name string, t flashattn.Tensor, shape []int) error {
		a, err := outArray(t, shape, f.f16out)
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		files[filepath.Join(f.out, name)] = a
		return nil
	}
	if err := add("out.npy", out, shapeOf(out, opts)); err != nil {
		return err
	}
	if f.dout != "" {
		var dq, dk, dv flashattn.Tensor
		var dsinks, dbias []float32
		if f.gpu.on() { // -sinks, -bias and -dlse were refused (gpuUnsupported)
			dq, dk, dv, err = backward(q, k, v, out, dout, lse, opts)
		} else {
			dq, dk, dv, dsinks, dbias, err = backwardGrads(q, k, v, out, dout, lse, f.dlseVals, opts)
		}
		if err != nil {
			return f.callErr(err, q, v)
		}
		for _, r := range []struct {
			name string
			t    flashattn.Tensor
		}{{"dq.npy", dq}, {"dk.npy", dk}, {"dv.npy", dv}} {
			if err := add(r.name, r.t, shapeOf(r.t, opts)); err != nil {
				return err
			}
		}
		if dsinks != nil {
			files[filepath.Join(f.out, "dsinks.npy")] = npy.Array{Shape: []int{len(dsinks)}, F32: dsinks}
		}
		if dbias != nil {
			b, h, sq, sk := opts.ScoreMod.(*flashattn.Bias).Shape()
			files[filepath.Join(f.out, "dbias.npy")] = npy.Array{Shape: []int{b, h, sq, sk}, F32: dbias}
		}
	}
	if f.cache.kNew != "" { // the caches, updated in place
		for _, r := range []struct {
			name string
			t    flashattn.Tensor
		}{{"k_cache.npy", k}, {"v_cache.npy", v}} {
			if err := add(r.name, r.t, []int{r.t.Batch, r.t.Seq, r.t.Heads, r.t.Dim}); err != nil {
				return err
			}
		}
	}
	return writeOutputs(f.out, files, sm)
}

// backwardGrads is the CPU's backward pass: flashattn.BackwardGrads with
// the gradients in the types of q, k and v (as flashattn.Backward returns
// them), dlse (nil: none) and, with sinks, their gradient, with a bias
// (-bias: a *flashattn.Bias as the ScoreMod), its gradient.
func backwardGrads(q, k, v, out, dout flashattn.Tensor, lse, dlse []float32, o *flashattn.Options) (dq, dk, dv flashattn.Tensor, dsinks, dbias []float32, err error) {
	g := flashattn.Grads{
		DQ: flashattn.NewTensorOf(q.DType(), q.Batch, q.Seq, q.Heads, q.Dim),
		DK: flashattn.NewTensorOf(k.DType(), k.Batch, k.Seq, k.Heads, k.Dim),
		DV: flashattn.NewTensorOf(v.DType(), v.Batch, v.Seq, v.Heads, v.Dim),
	}
	if o.Sinks != nil {
		g.DSinks = make([]float32, len(o.Sinks))
	}
	if b, ok := o.ScoreMod.(*flashattn.Bias); ok {
		nb, h, sq, sk := b.Shape()
		g.DBias = make([]float32, nb*h*sq*sk)
	}
	if err := flashattn.BackwardGrads(context.Background(), g, q, k, v, out, dout, lse, dlse, o); err != nil {
		return dq, dk, dv, nil, nil, err
	}
	return g.DQ, g.DK, g.DV, g.DSinks, g.DBias, nil
}

// callErr is the error of a forward or backward call, naming the file or
// flag it comes from: the library's *ArgError through argFile, and an
// error of the GPU when v's head dim differs from q's (which the GPU
// refuses with an error that names no file) prefixed with the file of v.
func (f *attnFlags) callErr(err error, q, v flashattn.Tensor) error {
	var ae *flashattn.ArgError
	if !errors.As(err, &ae) && f.gpu.on() && v.Dim != q.Dim {
		return fmt.Errorf("%s (head dim %d; %s has %d): %v", f.v, v.Dim, f.q, q.Dim, cleanErr(err))
	}
	return f.argFile(err)
}

// writeOutputs writes the files of attn or merge, all or nothing, into
// dir (-o), creating it if needed (and removing it again on failure).
// SIGINT and SIGTERM during the write stop it and restore dir, however
// many arrive; the error then carries the first signal.
func writeOutputs(dir string, files map[string]npy.Array, sm seams) error {
	ctx, critical, stop := interruptible()
	defer stop()
	_, err := os.Stat(dir)
	created := errors.Is(err, fs.ErrNotExist)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-o %s: %v", dir, err)
	}
	err = npy.WriteAll(ctx, files, npy.WriteOptions{Hook: sm.writeHook, Critical: critical})
	if err != nil && created {
		os.Remove(dir)
	}
	return err
}

// cleanErr drops the library's "flashattn: " prefix: the CLI adds its own.
func cleanErr(err error) error {
	const p = "flashattn: "
	if s := err.Error(); len(s) > len(p) && s[:len(p)] == p {
		return fmt.Errorf("%s", s[len(p):])
	}
	return err
}

// emptyDim refuses the shape of file path if a dimension is 0 (an array
// with no elements), naming the file.
func emptyDim(path string, shape []int) error {
	if slices.Contains(shape, 0) {
		return fmt.Errorf("%s: shape %v has an empty dimension", path, shape)
	}
	return nil
}

// options turns the flags into library options, checking every value.
func (f *attnFlags) options() (*flashattn.Options, error) {
	for _, r := range []struct{ name, val string }{{"-q", f.q}, {"-k", f.k}, {"-v", f.v}, {"-o", f.out}} {
		if r.val == "" {
			return nil, fmt.Errorf("%s is required", r.name)
		}
	}
	// The values of -scale, -softcap, -dropout, -window-left/-right and
	// -workers are checked by the library (flashattn.Forward returns an
	// *ArgError that argFile maps back to the flag); here only the flag
	// combinations that decide how the files are read.
	switch {
	case f.cacheSeqlens != "" && f.cuK != "":
		return nil, fmt.Errorf("-cu-seqlens-k cannot be combined with -cache-seqlens: the keys are the cache's (packed queries take -cu-seqlens-q, packed new keys -cu-seqlens-k-new)")
	case (f.cuQ == "") != (f.cuK == "") && f.cacheSeqlens == "":
		return nil, fmt.Errorf("-cu-seqlens-q and -cu-seqlens-k must be given together")
	case f.seqUsedK != "" && f.cuK == "":
		return nil, fmt.Errorf("-seqused-k needs -cu-seqlens-q and -cu-seqlens-k")
	case f.seqUsedQ != "" && f.cuQ == "":
		return nil, fmt.Errorf("-seqused-q needs -cu-seqlens-q and -cu-seqlens-k")
	case f.dlse != "" && f.dout == "":
		return nil, fmt.Errorf("-dlse needs -dout (it is part of the backward pass's loss)")
	case f.blockTable != "" && f.cacheSeqlens == "":
		return nil, fmt.Errorf("-block-table needs -cache-seqlens")
	case f.cacheSeqlens != "" && f.cuQ != "" && slices.ContainsFunc(f.masks.inputs(), func(p string) bool { return p != "" }):
		return nil, fmt.Errorf("-block-mask and -segment-ids-q/-k cannot be combined with -cache-seqlens and -cu-seqlens-q")
	case f.cacheSeqlens != "" && f.dout != "":
		return nil, fmt.Errorf("-dout cannot be combined with -cache-seqlens: decoding from a KV cache is forward only")
	}
	if err := f.masks.validate(f.set); err != nil {
		return nil, err
	}
	if err := f.cache.validate(f); err != nil {
		return nil, err
	}
	if err := f.types(); err != nil {
		return nil, err
	}
	if err := f.gpuUnsupported(); err != nil {
		return nil, err
	}
	o := &flashattn.Options{
		Scale: float32(f.scale), Causal: f.causal, TopLeft: f.topLeft, Softcap: float32(f.softcap),
		Dropout: float32(f.dropout), Seed: f.seed, Workers: f.workers,
	}
	// The flags are float64 and the options float32: a value that changes
	// meaning in the conversion (a scale or softcap that rounds to 0, which
	// means "default" or "off", or to ±Inf; a dropout that rounds to 1) is
	// refused here, since the library only sees the rounded value.
	if changed(f.scale, o.Scale) {
		return nil, fmt.Errorf("-scale %v: out of float32 range", f.scale)
	}
	if changed(f.softcap, o.Softcap) {
		return nil, fmt.Errorf("-softcap %v: out of float32 range", f.softcap)
	}
	if f.dropout < 1 && o.Dropout >= 1 {
		return nil, fmt.Errorf("-dropout %v: must be in [0, 1) (rounds to 1 in float32)", f.dropout)
	}
	if f.windowLeft != -1 || f.windowRight != -1 {
		o.Window = &flashattn.Window{Left: f.windowLeft, Right: f.windowRight}
	}
	return o, nil
}

// gpuUnsupported refuses, with -device gpu, the flags whose options the
// GPU's kernels do not implement and gpu.Options has no field for (the
// conversion to gpu.Options would drop them silently): -sinks, -bias, -dlse,
// -top-left and -seqused-q. (-alibi, -dropout and -cache-seqlens are
// refused by the conversion itself; a v with another head dim by the GPU,
// see callErr.)
func (f *attnFlags) gpuUnsupported() error {
	if !f.gpu.on() {
		return nil
	}
	for _, x := range []struct {
		name string
		set  bool
	}{{"-sinks", f.sinks != ""}, {"-bias", f.bias != ""}, {"-dlse", f.dlse != ""}, {"-top-left", f.topLeft}, {"-seqused-q", f.seqUsedQ != ""}} {
		if x.set {
			return fmt.Errorf("%s is not supported with -device gpu", x.name)
		}
	}
	return nil
}

// changed reports whether x, a finite nonzero float64, became 0 or ±Inf as
// the float32 y.
func changed(x float64, y float32) bool {
	finite := !math.IsNaN(x) && !math.IsInf(x, 0)
	return finite && x != 0 && (y == 0 || math.IsInf(float64(y), 0))
}

// types resolves -dtype and -kv-dtype into the types the inputs are
// loaded as. On the GPU everything is loaded as float32 (the GPU rounds to
// its -dtype itself), and its float16 results are written as '<f2'.
func (f *attnFlags) types() error {
	if err := f.gpu.check(); err != nil {
		return err
	}
	if f.gpu.on() {
		dt, _ := f.gpu.gpuType()
		f.dt, f.kvdt, f.f16out = flashattn.Float32, flashattn.Float32, dt == gpu.F16
		return nil
	}
	f.dt, _ = f.gpu.cpuType()
	f.kvdt = f.dt
	if f.cache.kvDtype != "" {
		var err error
		if f.kvdt, err = parseDType("-kv-dtype", f.cache.kvDtype, true); err != nil {
			return err
		}
	}
	if is16(f.dt) && is16(f.kvdt) && f.dt != f.kvdt {
		return fmt.Errorf("-kv-dtype %s with -dtype %s: a 16-bit cache and 16-bit queries must share one type (make one of them f32)", dtypeName(f.kvdt), dtypeName(f.dt))
	}
	return nil
}

// load reads the input files and checks that their shapes fit together,
// naming the file that does not.
func (f *attnFlags) load(o *flashattn.Options) (q, k, v, dout flashattn.Tensor, err error) {
	varlen := f.cuQ != ""
	packedKV := varlen && f.cacheSeqlens == "" // with a cache, k and v are the cache, not packed
	rank, rankKV := 4, 4
	if varlen {
		rank = 3
	}
	if packedKV {
		rankKV = 3
	}
	read := func(path string, rank int) (npy.Array, []int, error) {
		a, err := f.rd.ReadFloat(path)
		if err != nil {
			return a, nil, err
		}
		shape := a.Shape
		if len(shape) != rank {
			what := "[batch, seqlen, heads, headdim]"
			if rank == 3 {
				what = "[total, heads, headdim] (varlen)"
			}
			return a, nil, fmt.Errorf("%s: shape %v, want %d dimensions %s", path, shape, rank, what)
		}
		if err := emptyDim(path, shape); err != nil {
			return a, nil, err
		}
		if rank == 3 {
			shape = append([]int{1}, shape...)
		}
		return a, shape, nil
	}
	var qa, ka, va, da npy.Array
	var qs, ks, vs []int
	if qa, qs, err = read(f.q, rank); err != nil {
		return
	}
	if ka, ks, err = read(f.k, rankKV); err != nil {
		return
	}
	if va, vs, err = read(f.v, rankKV); err != nil {
		return
	}
	show := func(s []int) []int { return s[4-rank:] }
	showKV := func(s []int) []int { return s[4-rankKV:] }
	ownBatch := f.blockTable != "" || f.cache.batchIdx != "" // k's batch is num_blocks or cache rows
	switch {
	case ks[0] != qs[0] && !varlen && !ownBatch:
		err = fmt.Errorf("%s: batch %d does not match %s's %d", f.k, ks[0], f.q, qs[0])
	case ks[3] != qs[3]:
		err = fmt.Errorf("%s: headdim %d does not match %s's %d", f.k, ks[3], f.q, qs[3])
	case qs[2]%ks[2] != 0:
		err = fmt.Errorf("%s: %d heads do not divide %s's %d query heads (GQA needs heads %% kv_heads == 0)", f.k, ks[2], f.q, qs[2])
	case fmt.Sprint(vs[:3]) != fmt.Sprint(ks[:3]):
		// v's head dim may differ from k's (MLA); the rest is k's shape.
		err = fmt.Errorf("%s: shape %v, want the shape of %s %v (the head dim may differ)", f.v, showKV(vs), f.k, showKV(ks))
	}
	if err != nil {
		return
	}
	// out, and so dout, have q's shape with v's head dim.
	outShape := [4]int{qs[0], qs[1], qs[2], vs[3]}
	if f.dout != "" {
		var ds []int
		if da, ds, err = read(f.dout, rank); err != nil {
			return
		}
		if fmt.Sprint(ds) != fmt.Sprint(outShape[:]) {
			if vs[3] == qs[3] {
				err = fmt.Errorf("%s: shape %v, want the shape of %s %v", f.dout, show(ds), f.q, show(qs))
			} else {
				err = fmt.Errorf("%s: shape %v, want %v (the shape of %s with the head dim %d of %s)", f.dout, show(ds), show(outShape[:]), f.q, vs[3], f.v)
			}
			return
		}
	}
	if blk := dtypeBlock(f.kvdt); blk > 1 {
		for _, x := range []struct {
			path string
			d    int
		}{{f.k, ks[3]}, {f.v, vs[3]}} {
			if x.d%blk != 0 {
				err = fmt.Errorf("-kv-dtype %s: the headdim %d of %s is not a multiple of %d (%s quantises blocks of %[4]d values of a row)", dtypeName(f.kvdt), x.d, x.path, blk, dtypeName(f.kvdt))
				return
			}
		}
	}
	if q, err = arrayTensor(f.q, qa, [4]int(qs), f.dt, 0); err != nil {
		return
	}
	if k, err = arrayTensor(f.k, ka, [4]int(ks), f.kvdt, float32(f.cache.kScale)); err != nil {
		return
	}
	if v, err = arrayTensor(f.v, va, [4]int(vs), f.kvdt, float32(f.cache.vScale)); err != nil {
		return
	}
	if f.dout != "" {
		if dout, err = arrayTensor(f.dout, da, outShape, f.dt, 0); err != nil {
			return
		}
	}
	nb := qs[0]
	if varlen {
		vl := &flashattn.VarLen{}
		if vl.CuSeqlensQ, err = f.readCu(f.cuQ); err != nil {
			return
		}
		o.VarLen = vl
		if !packedKV && !partition(vl.CuSeqlensQ, qs[1]) {
			// The per-sequence cache files are laid out along it.
			err = fmt.Errorf("%s: %v does not cut the %d rows of %s into sequences (want 0, …, %d, never decreasing)", f.cuQ, vl.CuSeqlensQ, qs[1], f.q, qs[1])
			return
		}
		if packedKV {
			if vl.CuSeqlensK, err = f.readCu(f.cuK); err != nil {
				return
			}
		}
		if packedKV && !partitions(vl.CuSeqlensQ, vl.CuSeqlensK, qs[1], ks[1]) {
			// The library refuses these cu_seqlens with an error naming
			// the file (argFile). The files read per sequence cannot be
			// laid out without them: stop here and let the call report it.
			f.badCu = true
			return q, k, v, dout, nil
		}
		nb = len(vl.CuSeqlensQ) - 1
		if f.seqUsedK != "" {
			if vl.SeqUsedK, err = f.readPerSeq(f.seqUsedK, nb); err != nil {
				return
			}
		}
		if f.seqUsedQ != "" {
			if vl.SeqUsedQ, err = f.readPerSeq(f.seqUsedQ, nb); err != nil {
				return
			}
		}
	}
	if f.cacheSeqlens != "" {
		if o.KVCache, err = f.readCache(nb, ks); err != nil {
			return
		}
	}
	g := f.maskGeometry(o, qs, ks, nb)
	if err = f.masks.load(f, o, g); err != nil {
		return
	}
	if f.alibi != "" {
		var shape []int
		if o.ALiBi, shape, err = f.rd.ReadFloat32(f.alibi); err != nil {
			return
		}
		ok := (len(shape) == 1 && shape[0] == qs[2]) || (len(shape) == 2 && shape[0] == nb && shape[1] == qs[2])
		if !ok {
			err = fmt.Errorf("%s: shape %v, want [%d] (heads) or [%d, %d] (batch, heads)", f.alibi, shape, qs[2], nb, qs[2])
			return
		}
	}
	if f.sinks != "" {
		var shape []int
		if o.Sinks, shape, err = f.rd.ReadFloat32(f.sinks); err != nil {
			return
		}
		if len(shape) != 1 || shape[0] != qs[2] {
			err = fmt.Errorf("%s: shape %v, want [%d] (one logit per query head)", f.sinks, shape, qs[2])
			return
		}
	}
	if f.bias != "" {
		if o.ScoreMod, err = f.loadBias(g); err != nil {
			return
		}
	}
	if f.dlse != "" {
		var shape []int
		if f.dlseVals, shape, err = f.rd.ReadFloat32(f.dlse); err != nil {
			return
		}
		want, what := []int{qs[0], qs[2], qs[1]}, "[batch, heads, seqlen_q]"
		if varlen {
			want, what = []int{qs[2], qs[1]}, "[heads, total_q]"
		}
		if !slices.Equal(shape, want) {
			err = fmt.Errorf("%s: shape %v, want %v (lse's layout %s)", f.dlse, shape, want, what)
			return
		}
	}
	return q, k, v, dout, nil
}

// maskGeometry describes the sequences that the mask files must fit.
func (f *attnFlags) maskGeometry(o *flashattn.Options, qs, ks []int, nb int) maskGeometry {
	g := maskGeometry{heads: qs[2], batch: nb, seqQ: qs[1], seqK: ks[1]}
	if c := o.KVCache; c != nil && c.BlockTable != nil {
		g.seqK = c.BlocksPerSeq * ks[1] // checked against 2^31 by readCache
	}
	if vl := o.VarLen; vl != nil && vl.CuSeqlensK != nil { // no masks with packed queries on a cache (options)
		g.varlen = true
		g.seqQ, g.seqK = 1, 1
		for b := 0; b < nb; b++ {
			nq, nk := int(vl.CuSeqlensQ[b+1]-vl.CuSeqlensQ[b]), int(vl.CuSeqlensK[b+1]-vl.CuSeqlensK[b])
			g.nq, g.nk = append(g.nq, nq), append(g.nk, nk)
			g.seqQ, g.seqK = max(g.seqQ, nq), max(g.seqK, nk)
		}
	}
	return g
}

// readCu reads a cu_seqlens file: a 1-D int32 array. Its values (from 0,
// non-decreasing, ending at the packed length) are the library's to check.
func (f *attnFlags) readCu(path string) ([]int32, error) {
	cu, shape, err := f.rd.ReadInt32(path)
	if err != nil {
		return nil, err
	}
	if len(shape) != 1 {
		return nil, fmt.Errorf("%s: shape %v, want [batch+1]", path, shape)
	}
	return cu, nil
}

// partitions reports whether cuQ and cuK, of equal length ≥ 2, cut the
// packed lengths totalQ and totalK into sequences (from 0, non-decreasing,
// to the total): whether the per-sequence files can be laid out along them.
func partitions(cuQ, cuK []int32, totalQ, totalK int) bool {
	return len(cuQ) == len(cuK) && partition(cuQ, totalQ) && partition(cuK, totalK)
}

// partition reports whether cu, of length ≥ 2, cuts the packed length
// total into sequences: from 0, non-decreasing, to total.
func partition(cu []int32, total int) bool {
	if len(cu) < 2 || cu[0] != 0 || int(cu[len(cu)-1]) != total {
		return false
	}
	for i := 1; i < len(cu); i++ {
		if cu[i] < cu[i-1] {
			return false
		}
	}
	return true
}

// shapeOf is the .npy shape of a result tensor: 4-D dense, 3-D varlen.
func shapeOf(t flashattn.Tensor, o *flashattn.Options) []int {
	if o.VarLen != nil {
		return []int{t.Seq, t.Heads, t.Dim}
	}
	return []int{t.Batch, t.Seq, t.Heads, t.Dim}
}

// lseShape is [batch, heads, seqlen_q], or [heads, total_q] for varlen.
func lseShape(q flashattn.Tensor, o *flashattn.Options) []int {
	if o.VarLen != nil {
		return []int{q.Heads, q.Seq}
	}
	return []int{q.Batch, q.Heads, q.Seq}
}

// checkMemory reads the header of every input file (checking each as
// reading it would) and refuses the run, before any data is read, if its
// inputs (with their copies converted to -dtype or -kv-dtype), outputs and
// the library's work buffers would not fit in limit.
func (f *attnFlags) checkMemory(limit memlimit.Limit) error {
	var n need
	infos := map[string]npy.Info{}
	biggest := ""
	inputs := append([]string{f.q, f.k, f.v, f.dout, f.alibi, f.cuQ, f.cuK, f.seqUsedK, f.seqUsedQ, f.sinks, f.bias, f.dlse, f.cacheSeqlens, f.blockTable}, f.masks.inputs()...)
	for _, p := range append(inputs, f.cache.inputs()...) {
		if p == "" {
			continue
		}
		info, err := npy.Stat(p)
		if err != nil {
			return err
		}
		if _, seen := infos[p]; seen { // one file given twice is read twice
			n.add("inputs", info.Bytes())
			continue
		}
		infos[p] = info
		n.add("inputs", info.Bytes())
		if slices.Contains(f.masks.inputs(), p) {
			n.add("masks", info.Bytes()) // the library's copy
		}
		if biggest == "" || info.Bytes() > infos[biggest].Bytes() {
			biggest = p
		}
	}
	// Tensors whose file type differs from the type they are loaded as
	// are converted into a copy.
	for _, c := range []struct {
		path string
		dt   flashattn.DType
	}{{f.q, f.dt}, {f.dout, f.dt}, {f.k, f.kvdt}, {f.v, f.kvdt}, {f.cache.kNew, f.dt}, {f.cache.vNew, f.dt}} {
		if info, ok := infos[c.path]; ok && info.Descr != fileDescr(c.dt) {
			n.add("inputs", typedBytes(c.dt, info.Shape...))
		}
	}
	qs, ks, vs := infos[f.q].Shape, infos[f.k].Shape, infos[f.v].Shape
	if f.cuQ != "" {
		qs = append([]int{1}, qs...)
	}
	if f.cuK != "" {
		ks, vs = append([]int{1}, ks...), append([]int{1}, vs...)
	}
	if len(qs) == 4 && len(ks) == 4 && len(vs) == 4 {
		b, sq, h, d, dv := qs[0], qs[1], qs[2], qs[3], vs[3]
		hk, sk := ks[2], ks[1]
		// Results in the types the library returns them in, plus the
		// float32 copies bf16 (and q8_0) results are written from. out,
		// dv (and dout) have v's head dim.
		wide := f.dt == flashattn.BFloat16
		n.add("outputs", typedBytes(f.dt, b, sq, h, dv))
		n.floats("outputs", b, h, sq)
		if wide {
			n.floats("outputs", b, sq, h, dv)
		}
		if f.dout != "" {
			n.add("outputs", typedBytes(f.dt, b, sq, h, d))
			n.add("outputs", typedBytes(f.kvdt, ks[0], sk, hk, d))
			n.add("outputs", typedBytes(f.kvdt, ks[0], sk, hk, dv))
			n.floats("outputs", h) // dsinks
			if info, ok := infos[f.bias]; ok {
				n.add("outputs", info.Bytes()) // dbias, the bias's shape
			}
			if wide {
				n.floats("outputs", b, sq, h, d)
				n.floats("outputs", ks[0], sk, hk, d)
				n.floats("outputs", ks[0], sk, hk, dv)
			}
		}
		if f.cache.kNew != "" && f.kvdt != flashattn.Float32 && f.kvdt != flashattn.Float16 {
			n.floats("outputs", ks[0], sk, hk, d) // k_cache.npy and v_cache.npy widened
			n.floats("outputs", ks[0], sk, hk, dv)
		}
		if ts := infos[f.blockTable].Shape; len(ts) == 2 {
			sk = int(min(memlimit.Mul(ts[1], ks[1]), math.MaxInt))
		}
		n.addFlashWork(b, sq, sk, h, hk, d, dv, f.workers, f.dout != "")
		// The partial results of the key splits (a larger -num-splits is
		// refused by the call).
		if s := min(f.cache.numSplits, maxNumSplits); s > 0 {
			blocks, rows := b, 256
			if memlimit.Mul(sq, h) > 64 {
				blocks = int(min(memlimit.Mul(b, h, (sq+63)/64), math.MaxInt))
			}
			n.add("work", memlimit.Mul(s, blocks, rows, pad16(dv)+2, 4))
		}
	}
	return n.check(limit, fmt.Sprintf("%s (shape %v)", biggest, infos[biggest].Shape), "-max-memory overrides")
}

// fileDescr is the .npy dtype a tensor of dt is read from without a copy.
func fileDescr(dt flashattn.DType) string {
	switch dt {
	case flashattn.Float32:
		return "<f4"
	case flashattn.Float16:
		return "<f2"
	}
	return ""
}

// loadBias reads -bias, float32 [batch|1, heads|1, seqlen_q|1,
// seqlen_k|1], as a Bias: each dimension 1 (broadcast) or the call's, as
// the mask files' geometry g says (PyTorch's rule): a dimension larger than
// the call's, which the library accepts (it reads the first rows and
// columns), is refused here as the mismatched shape it is; the call
// refuses smaller ones and other head counts (an error it names the file
// in, see argFile).
func (f *attnFlags) loadBias(g maskGeometry) (*flashattn.Bias, error) {
	data, shape, err := f.rd.ReadFloat32(f.bias)
	if err != nil {
		return nil, err
	}
	if len(shape) != 4 {
		return nil, fmt.Errorf("%s: shape %v, want 4 dimensions [batch|1, heads|1, seqlen_q|1, seqlen_k|1]", f.bias, shape)
	}
	for i, n := range []int{g.batch, 0, g.seqQ, g.seqK} {
		if i != 1 && shape[i] > n { // smaller ones, and heads, are the library's to refuse
			return nil, fmt.Errorf("%s: shape %v, want [1 or %d, 1 or %d, 1 or %d, 1 or %d] (batch, heads, seqlen_q, seqlen_k)",
				f.bias, shape, g.batch, g.heads, g.seqQ, g.seqK)
		}
	}
	b, err := flashattn.NewBias(data, shape[0], shape[1], shape[2], shape[3])
	if err != nil {
		return nil, fmt.Errorf("%s: %v", f.bias, cleanErr(err))
	}
	return b, nil
}
