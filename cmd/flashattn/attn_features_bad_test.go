package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/reference"
)

// TestAttnFeaturesBad: every bad -sinks, -dlse, -seqused-q or -top-left
// value, a v whose head dim does not fit dout, and the new flags with
// -device gpu fail with one stderr line naming the file or flag and the
// exit status of the other bad inputs (1; 2 for a flag that does not
// parse), leaving OUTDIR as it was.
func TestAttnFeaturesBad(t *testing.T) {
	dir := t.TempDir()
	base := atInputs(t, dir) // q [1,4,2,8], k, v [1,5,2,8], dout [1,4,2,8]
	p := func(name string) string { return filepath.Join(dir, name) }
	rng := rand.New(rand.NewPCG(12, 13))
	w32 := func(name string, shape ...int) string {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return atWriteF32(t, p(name), atRand(rng, n), shape...)
	}
	with := func(b []string, extra ...string) []string { return append(slices.Clone(b), extra...) }
	replace := func(b []string, name, val string) []string {
		out := slices.Clone(b)
		for i := 1; i < len(out); i++ {
			if out[i] == name {
				out[i+1] = val
				return out
			}
		}
		panic("no flag " + name)
	}
	w32("sinks2.npy", 2)
	w32("sinks3.npy", 3)
	w32("sinks4.npy", 4)
	w32("sinks_2d.npy", 1, 2)
	atWriteF32(t, p("sinks_nan.npy"), []float32{0.5, float32(math.NaN())}, 2)
	atWriteF32(t, p("sinks_inf.npy"), []float32{float32(math.Inf(-1)), 0.5}, 2)
	atWriteI32(t, p("sinks_i32.npy"), []int32{1, 2}, 2)
	atWriteF16(t, p("sinks_f16.npy"), []float32{1, 2}, 2)
	w32("dlse.npy", 1, 2, 4)
	w32("dlse_t.npy", 1, 4, 2)
	w32("dlse_2d.npy", 2, 4)
	atWriteI32(t, p("dlse_i32.npy"), make([]int32, 8), 1, 2, 4)
	w32("v_dv16.npy", 1, 5, 2, 16)
	w32("v_dv16_h1.npy", 1, 5, 1, 16)
	w32("dout_dv16.npy", 1, 4, 2, 16)
	// Varlen: q [7, 2, 8], k, v [9, 2, 8], two sequences.
	vl := []string{"attn", "-q", w32("vq.npy", 7, 2, 8), "-k", w32("vk.npy", 9, 2, 8), "-v", w32("vv.npy", 9, 2, 8),
		"-cu-seqlens-q", atWriteI32(t, p("cuq.npy"), []int32{0, 3, 7}, 3), "-cu-seqlens-k", atWriteI32(t, p("cuk.npy"), []int32{0, 4, 9}, 3)}
	vlb := with(vl, "-dout", w32("vdout.npy", 7, 2, 8))
	w32("vdlse.npy", 2, 7)
	atWriteI32(t, p("usedq.npy"), []int32{2, 4}, 2)
	atWriteI32(t, p("usedq_big.npy"), []int32{4, 2}, 2)
	atWriteI32(t, p("usedq_neg.npy"), []int32{1, -1}, 2)
	atWriteI32(t, p("usedq_len.npy"), []int32{1, 1, 1}, 3)
	atWriteF32(t, p("usedq_f32.npy"), []float32{1, 1}, 2)
	// A KV cache whose v has head dim 16 (k's is 32).
	cache := []string{"attn", "-q", w32("cq.npy", 2, 1, 4, 32), "-k", w32("ck.npy", 2, 40, 2, 32), "-v", w32("cv16.npy", 2, 40, 2, 16),
		"-cache-seqlens", atWriteI32(t, p("lens.npy"), []int32{10, 20}, 2)}
	for _, good := range [][]string{
		with(base, "-sinks", p("sinks2.npy"), "-dlse", p("dlse.npy"), "-top-left", "-causal"),
		with(replace(replace(base, "-v", p("v_dv16.npy")), "-dout", p("dout_dv16.npy")), "-sinks", p("sinks2.npy")),
		with(vlb, "-dlse", p("vdlse.npy"), "-seqused-q", p("usedq.npy"), "-sinks", p("sinks2.npy")),
		with(cache, "-sinks", p("sinks4.npy"), "-kv-dtype", "bf16"),
	} {
		if code, _, stderr := atRun(with(good, "-o", filepath.Join(t.TempDir(), "o"))...); code != 0 {
			t.Fatalf("good run %q: exit %d, %q", good, code, stderr)
		}
	}

	cases := []struct {
		name string
		args []string
		key  string
		code int
	}{
		{"sinks wrong length", with(base, "-sinks", p("sinks3.npy")), "sinks3.npy: shape [3], want [2] (one logit per query head)", 1},
		{"sinks 2-D", with(base, "-sinks", p("sinks_2d.npy")), "sinks_2d.npy: shape [1 2], want [2]", 1},
		{"sinks NaN", with(base, "-sinks", p("sinks_nan.npy")), "sinks_nan.npy: Sinks[1] is NaN", 1},
		{"sinks -Inf", with(base, "-sinks", p("sinks_inf.npy")), "sinks_inf.npy: Sinks[0] is -Inf", 1},
		{"sinks int32", with(base, "-sinks", p("sinks_i32.npy")), "sinks_i32.npy", 1},
		{"sinks float16", with(base, "-sinks", p("sinks_f16.npy")), "sinks_f16.npy", 1},
		{"sinks nonexistent", with(base, "-sinks", p("nope_sinks.npy")), "nope_sinks.npy", 1},
		{"sinks directory", with(base, "-sinks", dir), dir, 1},
		{"dlse without dout", with(replace(base, "-dout", p("dout.npy"))[:len(base)-2], "-dlse", p("dlse.npy")), "-dlse needs -dout", 1},
		{"dlse transposed", with(base, "-dlse", p("dlse_t.npy")), "dlse_t.npy: shape [1 4 2], want [1 2 4] (lse's layout [batch, heads, seqlen_q])", 1},
		{"dlse 2-D dense", with(base, "-dlse", p("dlse_2d.npy")), "dlse_2d.npy: shape [2 4], want [1 2 4]", 1},
		{"dlse int32", with(base, "-dlse", p("dlse_i32.npy")), "dlse_i32.npy", 1},
		{"dlse nonexistent", with(base, "-dlse", p("nope_dlse.npy")), "nope_dlse.npy", 1},
		{"dlse varlen dense layout", with(vlb, "-dlse", p("dlse.npy")), "dlse.npy: shape [1 2 4], want [2 7] (lse's layout [heads, total_q])", 1},
		{"v head dim vs dout", replace(base, "-v", p("v_dv16.npy")), "dout.npy: shape [1 4 2 8], want [1 4 2 16] (the shape of " + p("q.npy") + " with the head dim 16 of " + p("v_dv16.npy") + ")", 1},
		{"dout of v's dim with v of q's", replace(base, "-dout", p("dout_dv16.npy")), "dout_dv16.npy: shape [1 4 2 16], want the shape of", 1},
		{"v heads", replace(replace(base, "-v", p("v_dv16_h1.npy")), "-dout", p("dout_dv16.npy")), "v_dv16_h1.npy: shape [1 5 1 16], want the shape of " + p("k.npy") + " [1 5 2 8] (the head dim may differ)", 1},
		{"seqused-q without varlen", with(base, "-seqused-q", p("usedq.npy")), "-seqused-q needs -cu-seqlens-q and -cu-seqlens-k", 1},
		{"seqused-q too large", with(vl, "-seqused-q", p("usedq_big.npy")), "usedq_big.npy: VarLen.SeqUsedQ[0] is 4, want 0..3", 1},
		{"seqused-q negative", with(vl, "-seqused-q", p("usedq_neg.npy")), "usedq_neg.npy: VarLen.SeqUsedQ[1] is -1", 1},
		{"seqused-q length", with(vl, "-seqused-q", p("usedq_len.npy")), "usedq_len.npy: shape [3], want [2] (one entry per sequence)", 1},
		{"seqused-q float32", with(vl, "-seqused-q", p("usedq_f32.npy")), "usedq_f32.npy", 1},
		{"top-left not a bool", with(base, "-top-left=maybe"), "-top-left", 2},
		{"gpu sinks", with(base, "-device", "gpu", "-sinks", p("sinks2.npy")), "-sinks is not supported with -device gpu", 1},
		{"gpu dlse", with(base, "-device", "gpu", "-dlse", p("dlse.npy")), "-dlse is not supported with -device gpu", 1},
		{"gpu top-left", with(base, "-device", "gpu", "-top-left"), "-top-left is not supported with -device gpu", 1},
		{"gpu seqused-q", with(vl, "-device", "gpu", "-seqused-q", p("usedq.npy")), "-seqused-q is not supported with -device gpu", 1},
		{"cache q8_0 v head dim", with(cache, "-kv-dtype", "q8_0"), "-kv-dtype q8_0: the headdim 16 of " + p("cv16.npy") + " is not a multiple of 32", 1},
		{"cache v-new of k's head dim", with(cache, "-k-new", w32("cknew.npy", 2, 1, 2, 32), "-v-new", w32("cvnew32.npy", 2, 1, 2, 32)), "cvnew32.npy", 1},
		{"cache sinks wrong length", with(cache, "-sinks", p("sinks3.npy")), "sinks3.npy: shape [3], want [4]", 1},
	}
	stale := filepath.Join(t.TempDir(), "stale")
	if code, _, stderr := atRun(with(base, "-sinks", p("sinks2.npy"), "-o", stale)...); code != 0 {
		t.Fatalf("good run: exit status %d, stderr %q", code, stderr)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { atFails(t, c.args, c.key, c.code, stale) })
	}
}

// A GPU error about a v of another head dim names v's file (the GPU's
// own message names no file); library argument errors still map to their
// file.
func TestAttnCallErr(t *testing.T) {
	f := attnFlags{q: "in/q.npy", v: "in/v.npy", gpu: &gpuFlags{device: "gpu"}}
	q, v := flashattn.Tensor{Dim: 576}, flashattn.Tensor{Dim: 512}
	err := f.callErr(errors.New("gpu: v has shape [1 8 1 512], want k's [1 8 1 576]"), q, v)
	if want := "in/v.npy (head dim 512; in/q.npy has 576): gpu: v has shape"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("gpu error %q, want prefix %q", err, want)
	}
	f.sinks = "in/sinks.npy"
	err = f.callErr(&flashattn.ArgError{Arg: "Options.Sinks", Msg: "Sinks[0] is NaN"}, q, v)
	if err.Error() != "in/sinks.npy: Sinks[0] is NaN" {
		t.Errorf("argument error %q", err)
	}
	f.gpu.device = "cpu"
	if err := f.callErr(errors.New("flashattn: internal error"), q, v); err.Error() != "internal error" {
		t.Errorf("cpu error %q", err)
	}
}

// dsinks.npy is one of the files of the all-or-nothing write: a failure
// before any step of writing any file leaves every file of the earlier
// run (which had sinks too) byte-identical, and a run that adds
// dsinks.npy to a directory without one removes it again when it fails.
func TestAttnSinksAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	base := atInputs(t, dir)
	sinks := atWriteF32(t, filepath.Join(dir, "sinks.npy"), []float32{0.3, -1}, 2)
	if code, _, stderr := atRun(append(slices.Clone(base), "-sinks", sinks, "-o", out)...); code != 0 {
		t.Fatalf("first run: exit %d, %q", code, stderr)
	}
	if names := atDirNames(t, out); !slices.Contains(names, "dsinks.npy") || len(names) != 6 {
		t.Fatalf("first run wrote %v", names)
	}
	args := append(slices.Clone(base), "-sinks", sinks, "-causal", "-o", out)
	before := dirState(t, out)
	for _, stage := range []npy.Stage{npy.StageWrite, npy.StageBackup, npy.StageRename} {
		for _, name := range []string{"dsinks.npy", "dq.npy", "out.npy"} {
			var errb bytes.Buffer
			code := runSeams(args, io.Discard, &errb, seams{writeHook: func(_ context.Context, s npy.Stage, p string) error {
				if s == stage && p == filepath.Join(out, name) {
					return errors.New("disk on fire")
				}
				return nil
			}})
			what := fmt.Sprintf("%v %s", stage, name)
			if code != 1 {
				t.Errorf("%s: exit %d", what, code)
			}
			oneLine(t, what, errb.String(), filepath.Join(out, name), "disk on fire")
			sameState(t, dirState(t, out), before)
		}
	}
	// An earlier run without sinks: dsinks.npy is new, and a failure at the
	// last rename takes it away again.
	plain := filepath.Join(dir, "plain")
	if code, _, stderr := atRun(append(slices.Clone(base), "-o", plain)...); code != 0 {
		t.Fatalf("run without sinks: exit %d, %q", code, stderr)
	}
	before = dirState(t, plain)
	args[len(args)-1] = plain
	for _, name := range []string{"dsinks.npy", "out.npy"} {
		code := runSeams(args, io.Discard, io.Discard, seams{writeHook: func(_ context.Context, s npy.Stage, p string) error {
			if s == npy.StageRename && p == filepath.Join(plain, name) {
				return errors.New("no")
			}
			return nil
		}})
		if code != 1 {
			t.Errorf("rename %s: exit %d", name, code)
		}
		sameState(t, dirState(t, plain), before)
	}
}

// TestAttnKVCacheMLA: a v cache with another head dim than k's (MLA's
// value head dim) through the decoding flags: new keys and values of each
// head dim appended in place (k_cache.npy, v_cache.npy), with sinks, and
// a paged bf16 cache, against the reference per sequence with HeadDimV.
func TestAttnKVCacheMLA(t *testing.T) {
	for _, c := range []struct {
		name        string
		paged       int // block size; 0: contiguous
		snew        int
		causal      bool
		sinks, bf16 bool
	}{
		{name: "contiguous-new-keys-sinks", snew: 2, causal: true, sinks: true},
		{name: "paged-bf16-cache", paged: 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			const B, Hq, Hk, D, DV, capacity, sq = 2, 4, 1, 32, 16, 48, 2
			dir := t.TempDir()
			p := func(n string) string { return filepath.Join(dir, n) }
			r := rand.New(rand.NewPCG(uint64(c.paged+c.snew), 3))
			ends := []int32{10, 29}
			q := atRand(r, B*sq*Hq*D)
			args := []string{"attn", "-q", atWriteF32(t, p("q.npy"), q, B, sq, Hq, D), "-o", p("out"),
				"-cache-seqlens", atWriteI32(t, p("lens.npy"), ends, B)}
			// at(b, j) is the cache row (in rows of Hk heads) of position j.
			var kd, vd []float32
			var rows int
			at := func(b, j int) int { return b*capacity + j }
			if c.paged == 0 {
				rows = B * capacity
			} else {
				per := capacity / c.paged
				rows = (B*per + 1) * c.paged
				perm := r.Perm(B*per + 1)
				table := make([]int32, B*per)
				for i := range table {
					table[i] = int32(perm[i])
				}
				at = func(b, j int) int { return int(table[b*per+j/c.paged])*c.paged + j%c.paged }
				args = append(args, "-block-table", atWriteI32(t, p("table.npy"), table, B, per))
			}
			kd, vd = atRand(r, rows*Hk*D), atRand(r, rows*Hk*DV)
			kshape, vshape := []int{B, capacity, Hk, D}, []int{B, capacity, Hk, DV}
			if c.paged > 0 {
				kshape, vshape = []int{rows / c.paged, c.paged, Hk, D}, []int{rows / c.paged, c.paged, Hk, DV}
			}
			args = append(args, "-k", atWriteF32(t, p("k.npy"), kd, kshape...), "-v", atWriteF32(t, p("v.npy"), vd, vshape...))
			if c.snew > 0 {
				kn, vn := atRand(r, B*c.snew*Hk*D), atRand(r, B*c.snew*Hk*DV)
				args = append(args, "-k-new", atWriteF32(t, p("knew.npy"), kn, B, c.snew, Hk, D),
					"-v-new", atWriteF32(t, p("vnew.npy"), vn, B, c.snew, Hk, DV))
				for b := 0; b < B; b++ {
					for i := 0; i < c.snew; i++ {
						o := at(b, int(ends[b])+i)
						copy(kd[o*Hk*D:(o+1)*Hk*D], kn[(b*c.snew+i)*Hk*D:])
						copy(vd[o*Hk*DV:(o+1)*Hk*DV], vn[(b*c.snew+i)*Hk*DV:])
					}
				}
			}
			var sinks []float32
			if c.sinks {
				sinks = atRand(r, Hq)
				args = append(args, "-sinks", atWriteF32(t, p("sinks.npy"), sinks, Hq))
			}
			if c.causal {
				args = append(args, "-causal")
			}
			prec := reference.Precision(0)
			if c.bf16 || c.paged > 0 {
				args = append(args, "-kv-dtype", "bf16")
				prec = reference.BF16
				kd, vd = prec.RoundSlice(kd), prec.RoundSlice(vd)
			}
			if code, _, stderr := atRun(args...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if c.snew > 0 {
				gk := atReadF32(t, p("out/k_cache.npy"), kshape...)
				gv := atReadF32(t, p("out/v_cache.npy"), vshape...)
				if !slices.Equal(gk, kd) || !slices.Equal(gv, vd) {
					t.Fatalf("the caches written differ from the input caches with the new rows")
				}
			}
			out := atReadF32(t, p("out/out.npy"), B, sq, Hq, DV)
			lse := atReadF32(t, p("out/lse.npy"), B, Hq, sq)
			for b := 0; b < B; b++ {
				nk := int(ends[b]) + c.snew
				var ek, ev []float32
				for j := 0; j < nk; j++ {
					o := at(b, j)
					ek, ev = append(ek, kd[o*Hk*D:(o+1)*Hk*D]...), append(ev, vd[o*Hk*DV:(o+1)*Hk*DV]...)
				}
				par := reference.Params{Batch: 1, SeqQ: sq, SeqK: nk, Heads: Hq, KVHeads: Hk, HeadDim: D, HeadDimV: DV, Causal: c.causal}
				if sinks != nil {
					par.Sinks = atTo64(sinks)
				}
				qb := q[b*sq*Hq*D : (b+1)*sq*Hq*D]
				gotO, gotL := out[b*sq*Hq*DV:(b+1)*sq*Hq*DV], lse[b*Hq*sq:(b+1)*Hq*sq]
				var errs []error
				if prec == 0 {
					o64, l64 := reference.Forward64(par, atTo64(qb), atTo64(ek), atTo64(ev))
					o32, l32 := reference.Forward32(par, qb, ek, ev)
					errs = append(errs, reference.Check("O", gotO, o32, o64), reference.Check("LSE", gotL, l32, l64))
				} else {
					o64, l64 := reference.Forward64(par, atTo64(prec.RoundSlice(qb)), atTo64(ek), atTo64(ev))
					oh, lh := reference.ForwardHalf(par, prec, qb, ek, ev)
					errs = append(errs, reference.CheckHalf("O", prec, gotO, oh, o64), reference.CheckHalf("LSE", prec, gotL, lh, l64))
				}
				for _, err := range errs {
					if err != nil {
						t.Errorf("sequence %d: %v", b, err)
					}
				}
			}
			if _, err := os.Stat(p("out/dsinks.npy")); err == nil {
				t.Errorf("dsinks.npy written without -dout")
			}
		})
	}
}
