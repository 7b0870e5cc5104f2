package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/internal/npy"
)

// attnFlags are the flags of "flashattn attn" (SPEC §3).
type attnFlags struct {
	q, k, v, out, dout        string
	causal                    bool
	scale, softcap, dropout   float64
	windowLeft, windowRight   int
	alibi, cuQ, cuK, seqUsedK string
	cacheSeqlens, blockTable  string
	seed                      uint64
	workers                   int
	masks                     maskFlags
	maxMem                    *memlimit.Flag
	rd                        npy.Reader      // reads the inputs within the memory limit
	set                       map[string]bool // flags given on the command line
}

func runAttn(args []string, stdout, stderr io.Writer, sm seams) error {
	f := attnFlags{maxMem: memlimit.NewFlag("-max-memory")}
	fs := newFlags("attn", stderr, "-q q.npy -k k.npy -v v.npy -o OUTDIR [options]\n\n"+
		"Writes OUTDIR/out.npy and OUTDIR/lse.npy; with -dout also OUTDIR/dq.npy, dk.npy, dv.npy.\n"+
		"Dense arrays are float32 [batch, seqlen, heads, headdim]; with -cu-seqlens-q/-k they are\n"+
		"packed [total, heads, headdim]. All outputs are written atomically, all or none: on any\n"+
		"failure or interruption (SIGINT, SIGTERM) every file in OUTDIR is left as it was.\n")
	fs.StringVar(&f.q, "q", "", "queries `q.npy` [batch, seqlen_q, heads, headdim] (required)")
	fs.StringVar(&f.k, "k", "", "keys `k.npy` [batch, seqlen_k, kv_heads, headdim] (required)")
	fs.StringVar(&f.v, "v", "", "values `v.npy`, shaped like k (required)")
	fs.StringVar(&f.out, "o", "", "output `DIR` (created if missing; required)")
	fs.StringVar(&f.dout, "dout", "", "upstream gradient `dout.npy`, shaped like q: also run the backward pass")
	fs.BoolVar(&f.causal, "causal", false, "causal mask, aligned to the bottom-right corner")
	fs.Float64Var(&f.scale, "scale", 0, "softmax scale (0: 1/sqrt(headdim))")
	fs.IntVar(&f.windowLeft, "window-left", -1, "sliding window: keys visible to the left (-1: unbounded)")
	fs.IntVar(&f.windowRight, "window-right", -1, "sliding window: keys visible to the right (-1: unbounded)")
	fs.Float64Var(&f.softcap, "softcap", 0, "soft-cap the scores: softcap*tanh(x/softcap) (0: off)")
	fs.StringVar(&f.alibi, "alibi", "", "ALiBi slopes `slopes.npy`, float32 [heads] or [batch, heads]")
	fs.StringVar(&f.cuQ, "cu-seqlens-q", "", "varlen: int32 `cu_q.npy` [batch+1] of sequence starts in packed q")
	fs.StringVar(&f.cuK, "cu-seqlens-k", "", "varlen: int32 `cu_k.npy` [batch+1] of sequence starts in packed k, v")
	fs.StringVar(&f.seqUsedK, "seqused-k", "", "varlen: int32 `used_k.npy` [batch], keys used per sequence (optional)")
	fs.StringVar(&f.cacheSeqlens, "cache-seqlens", "", "KV cache: int32 `lens.npy` [batch], keys in the cache per sequence; k, v are the cache")
	fs.StringVar(&f.blockTable, "block-table", "", "paged KV cache: int32 `table.npy` [batch, blocks_per_seq]; k, v are [num_blocks, block_size, kv_heads, dim]")
	fs.Float64Var(&f.dropout, "dropout", 0, "dropout probability in [0, 1)")
	fs.Uint64Var(&f.seed, "seed", 0, "dropout seed: the same seed gives identical files")
	fs.IntVar(&f.workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	f.masks.register(fs)
	fs.Var(f.maxMem, "max-memory", "refuse a run whose estimated peak memory exceeds this `size` (e.g. 512M, 4G; default: the memory available now)")
	gf := addGPUFlags(fs)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
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
	forward, backward, done, err := gf.attnFuncs()
	if err != nil {
		return err
	}
	defer done()
	out, lse, err := forward(q, k, v, opts)
	if err != nil {
		return f.argFile(err)
	}
	files := map[string]npy.Array{
		filepath.Join(f.out, "out.npy"): {Shape: shapeOf(out, opts), F32: out.Data},
		filepath.Join(f.out, "lse.npy"): {Shape: lseShape(q, opts), F32: lse},
	}
	if f.dout != "" {
		dq, dk, dv, err := backward(q, k, v, out, dout, lse, opts)
		if err != nil {
			return f.argFile(err)
		}
		files[filepath.Join(f.out, "dq.npy")] = npy.Array{Shape: shapeOf(dq, opts), F32: dq.Data}
		files[filepath.Join(f.out, "dk.npy")] = npy.Array{Shape: shapeOf(dk, opts), F32: dk.Data}
		files[filepath.Join(f.out, "dv.npy")] = npy.Array{Shape: shapeOf(dv, opts), F32: dv.Data}
	}
	return f.write(files, sm)
}

// write writes the outputs all or nothing, creating OUTDIR if needed (and
// removing it again on failure). SIGINT and SIGTERM during the write stop
// it and restore OUTDIR; the error then carries the signal.
func (f *attnFlags) write(files map[string]npy.Array, sm seams) error {
	ctx, stop := interruptible()
	defer stop()
	_, err := os.Stat(f.out)
	created := errors.Is(err, fs.ErrNotExist)
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("-o %s: %v", f.out, err)
	}
	err = npy.WriteAll(ctx, files, npy.WriteOptions{Hook: sm.writeHook})
	if err != nil && created {
		os.Remove(f.out)
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

// options turns the flags into library options, checking every value.
func (f *attnFlags) options() (*flashattn.Options, error) {
	for _, r := range []struct{ name, val string }{{"-q", f.q}, {"-k", f.k}, {"-v", f.v}, {"-o", f.out}} {
		if r.val == "" {
			return nil, fmt.Errorf("%s is required", r.name)
		}
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(f.scale) || f.scale < 0:
		return nil, fmt.Errorf("-scale %v: must be a finite number > 0 (0: 1/sqrt(headdim))", f.scale)
	case !finite(f.softcap) || f.softcap < 0:
		return nil, fmt.Errorf("-softcap %v: must be a finite number ≥ 0 (0: off)", f.softcap)
	case math.IsNaN(f.dropout) || f.dropout < 0 || f.dropout >= 1:
		return nil, fmt.Errorf("-dropout %v: must be in [0, 1)", f.dropout)
	case f.windowLeft < -1:
		return nil, fmt.Errorf("-window-left %d: must be ≥ 0 or -1 (unbounded)", f.windowLeft)
	case f.windowRight < -1:
		return nil, fmt.Errorf("-window-right %d: must be ≥ 0 or -1 (unbounded)", f.windowRight)
	case f.workers < 0:
		return nil, fmt.Errorf("-workers %d: must be ≥ 0", f.workers)
	case (f.cuQ == "") != (f.cuK == ""):
		return nil, fmt.Errorf("-cu-seqlens-q and -cu-seqlens-k must be given together")
	case f.seqUsedK != "" && f.cuQ == "":
		return nil, fmt.Errorf("-seqused-k needs -cu-seqlens-q and -cu-seqlens-k")
	case f.blockTable != "" && f.cacheSeqlens == "":
		return nil, fmt.Errorf("-block-table needs -cache-seqlens")
	case f.cacheSeqlens != "" && f.cuQ != "":
		return nil, fmt.Errorf("-cache-seqlens cannot be combined with -cu-seqlens-q/-k")
	case f.cacheSeqlens != "" && f.dout != "":
		return nil, fmt.Errorf("-dout cannot be combined with -cache-seqlens: decoding from a KV cache is forward only")
	}
	if err := f.masks.validate(f.set); err != nil {
		return nil, err
	}
	o := &flashattn.Options{
		Scale: float32(f.scale), Causal: f.causal, Softcap: float32(f.softcap),
		Dropout: float32(f.dropout), Seed: f.seed, Workers: f.workers,
	}
	if float64(o.Scale) == 0 && f.scale != 0 || math.IsInf(float64(o.Scale), 0) {
		return nil, fmt.Errorf("-scale %v: out of float32 range", f.scale)
	}
	if float64(o.Softcap) == 0 && f.softcap != 0 || math.IsInf(float64(o.Softcap), 0) {
		return nil, fmt.Errorf("-softcap %v: out of float32 range", f.softcap)
	}
	if o.Dropout >= 1 {
		return nil, fmt.Errorf("-dropout %v: must be in [0, 1) (rounds to 1 in float32)", f.dropout)
	}
	if f.windowLeft != -1 || f.windowRight != -1 {
		o.Window = &flashattn.Window{Left: f.windowLeft, Right: f.windowRight}
	}
	return o, nil
}

// load reads the input files and checks that their shapes fit together,
// naming the file that does not.
func (f *attnFlags) load(o *flashattn.Options) (q, k, v, dout flashattn.Tensor, err error) {
	varlen := f.cuQ != ""
	rank := 4
	if varlen {
		rank = 3
	}
	read := func(path string) (flashattn.Tensor, []int, error) {
		data, shape, err := f.rd.ReadFloat32(path)
		if err != nil {
			return flashattn.Tensor{}, nil, err
		}
		if len(shape) != rank {
			what := "[batch, seqlen, heads, headdim]"
			if varlen {
				what = "[total, heads, headdim] (varlen)"
			}
			return flashattn.Tensor{}, nil, fmt.Errorf("%s: shape %v, want %d dimensions %s", path, shape, rank, what)
		}
		if varlen {
			shape = append([]int{1}, shape...)
		}
		for _, d := range shape {
			if d == 0 {
				return flashattn.Tensor{}, nil, fmt.Errorf("%s: shape %v has an empty dimension", path, shape[4-rank:])
			}
		}
		return flashattn.Dense(data, shape[0], shape[1], shape[2], shape[3]), shape, nil
	}
	var qs, ks, vs []int
	if q, qs, err = read(f.q); err != nil {
		return
	}
	if k, ks, err = read(f.k); err != nil {
		return
	}
	if v, vs, err = read(f.v); err != nil {
		return
	}
	show := func(s []int) []int { return s[4-rank:] }
	paged := f.blockTable != ""
	switch {
	case ks[0] != qs[0] && !varlen && !paged:
		err = fmt.Errorf("%s: batch %d does not match %s's %d", f.k, ks[0], f.q, qs[0])
	case ks[3] != qs[3]:
		err = fmt.Errorf("%s: headdim %d does not match %s's %d", f.k, ks[3], f.q, qs[3])
	case qs[2]%ks[2] != 0:
		err = fmt.Errorf("%s: %d heads do not divide %s's %d query heads (GQA needs heads %% kv_heads == 0)", f.k, ks[2], f.q, qs[2])
	case fmt.Sprint(vs) != fmt.Sprint(ks):
		err = fmt.Errorf("%s: shape %v, want the shape of %s %v", f.v, show(vs), f.k, show(ks))
	}
	if err != nil {
		return
	}
	if f.dout != "" {
		var ds []int
		if dout, ds, err = read(f.dout); err != nil {
			return
		}
		if fmt.Sprint(ds) != fmt.Sprint(qs) {
			err = fmt.Errorf("%s: shape %v, want the shape of %s %v", f.dout, show(ds), f.q, show(qs))
			return
		}
	}
	nb := qs[0]
	if f.cacheSeqlens != "" {
		if o.KVCache, err = f.readCache(nb, ks); err != nil {
			return
		}
	}
	if varlen {
		vl := &flashattn.VarLen{}
		if vl.CuSeqlensQ, err = f.readCu(f.cuQ, qs[1], "q"); err != nil {
			return
		}
		if vl.CuSeqlensK, err = f.readCu(f.cuK, ks[1], "k"); err != nil {
			return
		}
		if len(vl.CuSeqlensK) != len(vl.CuSeqlensQ) {
			err = fmt.Errorf("%s: %d entries, but %s has %d (both are [batch+1])", f.cuK, len(vl.CuSeqlensK), f.cuQ, len(vl.CuSeqlensQ))
			return
		}
		nb = len(vl.CuSeqlensQ) - 1
		if f.seqUsedK != "" {
			var shape []int
			if vl.SeqUsedK, shape, err = f.rd.ReadInt32(f.seqUsedK); err != nil {
				return
			}
			if len(shape) != 1 || shape[0] != nb {
				err = fmt.Errorf("%s: shape %v, want [%d] (one entry per sequence)", f.seqUsedK, shape, nb)
				return
			}
			for b, u := range vl.SeqUsedK {
				if n := vl.CuSeqlensK[b+1] - vl.CuSeqlensK[b]; u < 0 || u > n {
					err = fmt.Errorf("%s: entry %d is %d, want 0..%d (the sequence's key count)", f.seqUsedK, b, u, n)
					return
				}
			}
		}
		o.VarLen = vl
	}
	if err = f.masks.load(f, o, f.maskGeometry(o, qs, ks, nb)); err != nil {
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
		for i, s := range o.ALiBi {
			if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
				err = fmt.Errorf("%s: slope %d is %v, want a finite number", f.alibi, i, s)
				return
			}
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
	if vl := o.VarLen; vl != nil {
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

// readCu reads a cu_seqlens file and checks it against the packed length.
func (f *attnFlags) readCu(path string, total int, of string) ([]int32, error) {
	cu, shape, err := f.rd.ReadInt32(path)
	if err != nil {
		return nil, err
	}
	if len(shape) != 1 || shape[0] < 2 {
		return nil, fmt.Errorf("%s: shape %v, want [batch+1] with batch ≥ 1", path, shape)
	}
	if cu[0] != 0 {
		return nil, fmt.Errorf("%s: starts at %d, want 0", path, cu[0])
	}
	for i := 1; i < len(cu); i++ {
		if cu[i] < cu[i-1] {
			return nil, fmt.Errorf("%s: decreases at index %d (%d after %d)", path, i, cu[i], cu[i-1])
		}
	}
	if int(cu[len(cu)-1]) != total {
		return nil, fmt.Errorf("%s: ends at %d, but packed %s has %d rows", path, cu[len(cu)-1], of, total)
	}
	return cu, nil
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

// readCache reads -cache-seqlens and -block-table and checks them against
// the batch and the cache tensor's shape ks.
func (f *attnFlags) readCache(nb int, ks []int) (*flashattn.KVCache, error) {
	c := &flashattn.KVCache{}
	lens, shape, err := f.rd.ReadInt32(f.cacheSeqlens)
	if err != nil {
		return nil, err
	}
	if len(shape) != 1 || shape[0] != nb {
		return nil, fmt.Errorf("%s: shape %v, want [%d] (one entry per sequence)", f.cacheSeqlens, shape, nb)
	}
	capacity := ks[1]
	if f.blockTable != "" {
		table, tshape, err := f.rd.ReadInt32(f.blockTable)
		if err != nil {
			return nil, err
		}
		if len(tshape) != 2 || tshape[0] != nb || tshape[1] < 1 {
			return nil, fmt.Errorf("%s: shape %v, want [%d, blocks_per_seq]", f.blockTable, tshape, nb)
		}
		if ks[1]%16 != 0 {
			return nil, fmt.Errorf("%s: block size %d (its seqlen axis) must be a multiple of 16 for a paged cache", f.k, ks[1])
		}
		for i, blk := range table {
			if blk < 0 || int(blk) >= ks[0] {
				return nil, fmt.Errorf("%s: entry %d is %d, want 0..%d (%s has %d blocks)", f.blockTable, i, blk, ks[0]-1, f.k, ks[0])
			}
		}
		c.BlockTable, c.BlocksPerSeq = table, tshape[1]
		if int64(tshape[1]) > math.MaxInt32/int64(ks[1]) {
			return nil, fmt.Errorf("%s: %d blocks of %d keys per sequence is more keys than a cache can hold (2^31)", f.blockTable, tshape[1], ks[1])
		}
		capacity = tshape[1] * ks[1]
	}
	for b, n := range lens {
		if n < 0 || int(n) > capacity {
			return nil, fmt.Errorf("%s: entry %d is %d, want 0..%d (the cache's capacity)", f.cacheSeqlens, b, n, capacity)
		}
	}
	c.SeqLens = lens
	return c, nil
}

// checkMemory reads the header of every input file (checking each as
// reading it would) and refuses the run, before any data is read, if its
// inputs, outputs and the library's work buffers would not fit in limit.
func (f *attnFlags) checkMemory(limit memlimit.Limit) error {
	var n need
	infos := map[string]npy.Info{}
	biggest := ""
	for _, p := range append([]string{f.q, f.k, f.v, f.dout, f.alibi, f.cuQ, f.cuK, f.seqUsedK, f.cacheSeqlens, f.blockTable}, f.masks.inputs()...) {
		if p == "" {
			continue
		}
		info, err := npy.Stat(p)
		if err != nil {
			return err
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
	qs, ks := infos[f.q].Shape, infos[f.k].Shape
	if f.cuQ != "" {
		qs, ks = append([]int{1}, qs...), append([]int{1}, ks...)
	}
	if len(qs) == 4 && len(ks) == 4 {
		b, sq, h, d := qs[0], qs[1], qs[2], qs[3]
		hk, sk := ks[2], ks[1]
		n.floats("outputs", b, sq, h, d)
		n.floats("outputs", b, h, sq)
		if f.dout != "" {
			n.floats("outputs", b, sq, h, d)
			n.floats("outputs", 2, ks[0], sk, hk, d)
		}
		if ts := infos[f.blockTable].Shape; len(ts) == 2 {
			sk = int(min(memlimit.Mul(ts[1], ks[1]), math.MaxInt))
		}
		n.addFlashWork(b, sq, sk, h, hk, d, f.workers, f.dout != "")
	}
	return n.check(limit, fmt.Sprintf("%s (shape %v)", biggest, infos[biggest].Shape), "-max-memory overrides")
}
