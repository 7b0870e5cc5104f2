package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
)

// kvInputs writes a valid decoding input set into dir: q [2, 1, 4, 32], a
// contiguous cache k, v [3, 64, 2, 32] with lens {10, 20}, cache rows
// {2, 0}, left padding {1, 0}, new keys [2, 1, 2, 32] and RoPE tables
// [80, 8]; it returns the arguments of that run (without -o).
func kvInputs(t testing.TB, dir string) []string {
	r := rand.New(rand.NewPCG(5, 6))
	p := func(n string) string { return filepath.Join(dir, n) }
	atWriteF32(t, p("q.npy"), atRand(r, 2*4*32), 2, 1, 4, 32)
	atWriteF32(t, p("k.npy"), atRand(r, 3*64*2*32), 3, 64, 2, 32)
	atWriteF32(t, p("v.npy"), atRand(r, 3*64*2*32), 3, 64, 2, 32)
	atWriteI32(t, p("lens.npy"), []int32{10, 20}, 2)
	atWriteI32(t, p("idx.npy"), []int32{2, 0}, 2)
	atWriteI32(t, p("pad.npy"), []int32{1, 0}, 2)
	atWriteF32(t, p("knew.npy"), atRand(r, 2*2*32), 2, 1, 2, 32)
	atWriteF32(t, p("vnew.npy"), atRand(r, 2*2*32), 2, 1, 2, 32)
	cos, sin := atRopeTables(80, 16)
	atWriteF32(t, p("cos.npy"), cos, 80, 8)
	atWriteF32(t, p("sin.npy"), sin, 80, 8)
	return []string{"attn", "-q", p("q.npy"), "-k", p("k.npy"), "-v", p("v.npy"), "-cache-seqlens", p("lens.npy"),
		"-cache-batch-idx", p("idx.npy"), "-cache-leftpad", p("pad.npy"), "-k-new", p("knew.npy"), "-v-new", p("vnew.npy"),
		"-rotary-cos", p("cos.npy"), "-rotary-sin", p("sin.npy"), "-causal"}
}

// atFails runs args with -o naming an empty directory, a missing one and
// one holding the files of an earlier good run: every run must fail with
// exit status code (any non-zero if 0) and one stderr line holding key, and
// leave each directory as it was.
func atFails(t *testing.T, args []string, key string, code int, stale string) {
	t.Helper()
	check := func(out string) {
		t.Helper()
		got, stdout, stderr := atRun(append(slices.Clone(args), "-o", out)...)
		if got == 0 {
			t.Fatalf("exit status 0, want failure (stdout %q)", stdout)
		}
		if code != 0 && got != code {
			t.Errorf("exit status %d, want %d (stderr %q)", got, code, stderr)
		}
		if !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("stderr is not exactly one line: %q", stderr)
		}
		if !strings.Contains(stderr, key) {
			t.Errorf("stderr %q does not name %q", stderr, key)
		}
	}
	empty := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	check(empty)
	if names := atDirNames(t, empty); len(names) != 0 {
		t.Errorf("failed run left %v in the out dir", names)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	check(missing)
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("failed run created the out dir %s (stat: %v)", missing, err)
	}
	before := dirState(t, stale)
	check(stale)
	sameState(t, dirState(t, stale), before)
}

// TestAttnKVCacheBad: every bad decoding flag or file fails with one line
// naming it, before anything is written.
func TestAttnKVCacheBad(t *testing.T) {
	dir := t.TempDir()
	base := kvInputs(t, dir)
	p := func(n string) string { return filepath.Join(dir, n) }
	stale := filepath.Join(t.TempDir(), "stale")
	if code, _, stderr := atRun(append(slices.Clone(base), "-o", stale)...); code != 0 {
		t.Fatalf("base run: exit %d, %q", code, stderr)
	}
	if names := atDirNames(t, stale); !slices.Equal(names, []string{"k_cache.npy", "lse.npy", "out.npy", "v_cache.npy"}) {
		t.Fatalf("base run wrote %v", names)
	}
	r := rand.New(rand.NewPCG(8, 8))
	w32 := func(name string, shape ...int) string {
		n := 1
		for _, d := range shape {
			n *= d
		}
		return atWriteF32(t, p(name), atRand(r, n), shape...)
	}
	w32("knew_b3.npy", 3, 1, 2, 32)
	w32("knew_h1.npy", 2, 1, 1, 32)
	w32("knew_d16.npy", 2, 1, 2, 16)
	w32("knew_3d.npy", 2, 2, 32)
	w32("knew_s2.npy", 2, 2, 2, 32)
	atWriteI32(t, p("knew_i32.npy"), make([]int32, 2*2*32), 2, 1, 2, 32)
	w32("cos_1d.npy", 80)
	w32("cos_wide.npy", 80, 17)
	w32("cos_short.npy", 12, 8)
	w32("sin_79.npy", 79, 8)
	cos, _ := atRopeTables(80, 16)
	cos[10*8+5] = float32(math.NaN()) // position 10: sequence 0's (cache_seqlens 10; cache_leftpad 1 does not shift it, as in flash-attn)
	atWriteF32(t, p("cos_nan.npy"), cos, 80, 8)
	atWriteI32(t, p("lens_full.npy"), []int32{64, 3}, 2)
	atWriteI32(t, p("idx_3.npy"), []int32{3, 0}, 2)
	atWriteI32(t, p("idx_neg.npy"), []int32{0, -1}, 2)
	atWriteI32(t, p("idx_len.npy"), []int32{0, 1, 2}, 3)
	atWriteI32(t, p("pad_big.npy"), []int32{11, 0}, 2)
	atWriteI32(t, p("pad_neg.npy"), []int32{0, -2}, 2)
	atWriteI32(t, p("pad_2d.npy"), []int32{0, 0}, 1, 2)
	atWriteF32(t, p("pad_f32.npy"), []float32{0, 0}, 2)
	atWriteI32(t, p("table.npy"), []int32{0, 1, 2, 0}, 2, 2)
	huge := atRand(r, 3*64*2*32)
	huge[77] = 1e30 // beyond what q8_0's fp16 scale holds
	atWriteF32(t, p("k_huge.npy"), huge, 3, 64, 2, 32)
	nan := atRand(r, 2*2*32)
	nan[3] = float32(math.NaN())
	atWriteF32(t, p("knew_nan.npy"), nan, 2, 1, 2, 32)
	// A headdim that q8_0 cannot hold.
	atWriteF32(t, p("q40.npy"), atRand(r, 2*4*40), 2, 1, 4, 40)
	atWriteF32(t, p("k40.npy"), atRand(r, 2*16*2*40), 2, 16, 2, 40)
	atWriteI32(t, p("lens40.npy"), []int32{3, 4}, 2)
	q40 := []string{"attn", "-q", p("q40.npy"), "-k", p("k40.npy"), "-v", p("k40.npy"), "-cache-seqlens", p("lens40.npy")}
	plain := []string{"attn", "-q", p("q.npy"), "-k", p("k.npy"), "-v", p("v.npy")}

	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	replace := func(name, val string) []string {
		out := slices.Clone(base)
		for i := 1; i < len(out); i++ {
			if out[i] == name {
				if val == "" {
					return append(out[:i], out[i+2:]...)
				}
				out[i+1] = val
				return out
			}
		}
		panic("no flag " + name)
	}
	drop := func(args []string, names ...string) []string {
		out := slices.Clone(args)
		for _, name := range names {
			for i := 1; i < len(out); i++ {
				if out[i] == name {
					out = append(out[:i], out[i+2:]...)
					break
				}
			}
		}
		return out
	}
	for _, c := range []struct {
		name string
		args []string
		key  string
		code int
	}{
		{"k-new without cache", append(slices.Clone(plain), "-k-new", p("knew.npy"), "-v-new", p("vnew.npy")), "-k-new needs -cache-seqlens", 1},
		{"rotary without cache", append(slices.Clone(plain), "-rotary-cos", p("cos.npy")), "-rotary-cos needs -cache-seqlens", 1},
		{"batch-idx without cache", append(slices.Clone(plain), "-cache-batch-idx", p("idx.npy")), "-cache-batch-idx needs -cache-seqlens", 1},
		{"leftpad without cache", append(slices.Clone(plain), "-cache-leftpad", p("pad.npy")), "-cache-leftpad needs -cache-seqlens", 1},
		{"kv-dtype without cache", append(slices.Clone(plain), "-kv-dtype", "bf16"), "-kv-dtype needs -cache-seqlens", 1},
		{"num-splits without cache", append(slices.Clone(plain), "-num-splits", "2"), "-num-splits needs -cache-seqlens", 1},
		{"interleaved without cache", append(slices.Clone(plain), "-rotary-interleaved"), "-rotary-interleaved needs -cache-seqlens", 1},
		{"k-new alone", replace("-v-new", ""), "-k-new and -v-new", 1},
		{"v-new alone", drop(replace("-k-new", ""), "-rotary-cos", "-rotary-sin"), "-k-new and -v-new", 1},
		{"k-new batch", replace("-k-new", p("knew_b3.npy")), "knew_b3.npy", 1},
		{"k-new heads", replace("-k-new", p("knew_h1.npy")), "knew_h1.npy", 1},
		{"k-new headdim", replace("-k-new", p("knew_d16.npy")), "knew_d16.npy", 1},
		{"k-new 3-D", replace("-k-new", p("knew_3d.npy")), "knew_3d.npy", 1},
		{"k-new int32", replace("-k-new", p("knew_i32.npy")), "knew_i32.npy", 1},
		{"k-new missing", replace("-k-new", p("nope.npy")), "nope.npy", 1},
		{"v-new shape", replace("-v-new", p("knew_s2.npy")), "knew_s2.npy", 1},
		{"no room for the new keys", replace("-cache-seqlens", p("lens_full.npy")), "lens_full.npy: KVCache.SeqLens[0] is 64", 1},
		{"cos alone", replace("-rotary-sin", ""), "-rotary-cos and -rotary-sin", 1},
		{"offset without cache", append(slices.Clone(plain), "-rotary-offset", "2"), "-rotary-offset needs -cache-seqlens", 1},
		{"offset without rotary", append(drop(base, "-rotary-cos", "-rotary-sin"), "-rotary-offset", "2"), "-rotary-offset needs -rotary-cos", 1},
		{"offset negative", append(slices.Clone(base), "-rotary-offset", "-2"), "-rotary-offset -2: want an even channel", 1},
		{"offset odd", append(slices.Clone(base), "-rotary-offset", "3"), "-rotary-offset 3: want an even channel", 1},
		{"offset past the head", append(slices.Clone(base), "-rotary-offset", "32"), "Rotary.Offset 32 must be even, in 0..31", 1},
		{"offset and dim past the head", append(slices.Clone(base), "-rotary-offset", "18"), "Rotary.Dim 16 must be even, in 2..14", 1},
		{"interleaved without rotary", append(drop(base, "-rotary-cos", "-rotary-sin"), "-rotary-interleaved"), "-rotary-interleaved needs -rotary-cos", 1},
		{"cos 1-D", replace("-rotary-cos", p("cos_1d.npy")), "cos_1d.npy", 1},
		{"cos wider than the head", replace("-rotary-cos", p("cos_wide.npy")), "cos_wide.npy", 1},
		{"sin shape", replace("-rotary-sin", p("sin_79.npy")), "sin_79.npy", 1},
		{"cos NaN", replace("-rotary-cos", p("cos_nan.npy")), "cos_nan.npy: KVCache.Rotary table entry [10, 5] is NaN", 1},
		{"cos too few positions", replace("-rotary-sin", p("cos_short.npy")), "cos_short.npy", 1},
		{"batch-idx out of range", replace("-cache-batch-idx", p("idx_3.npy")), "idx_3.npy: KVCache.BatchIdx[0] is 3", 1},
		{"batch-idx negative", replace("-cache-batch-idx", p("idx_neg.npy")), "idx_neg.npy", 1},
		{"batch-idx length", replace("-cache-batch-idx", p("idx_len.npy")), "idx_len.npy", 1},
		{"batch-idx with block table", with("-block-table", p("table.npy")), "-cache-batch-idx cannot be combined with -block-table", 1},
		{"leftpad past the end", replace("-cache-leftpad", p("pad_big.npy")), "pad_big.npy: KVCache.LeftPad[0] is 11", 1},
		{"leftpad negative", replace("-cache-leftpad", p("pad_neg.npy")), "pad_neg.npy", 1},
		{"leftpad 2-D", replace("-cache-leftpad", p("pad_2d.npy")), "pad_2d.npy", 1},
		{"leftpad float32", replace("-cache-leftpad", p("pad_f32.npy")), "pad_f32.npy", 1},
		{"kv-dtype unknown", with("-kv-dtype", "int4"), `-kv-dtype "int4"`, 1},
		{"kv-dtype f16 with dtype bf16", with("-kv-dtype", "f16", "-dtype", "bf16"), "-kv-dtype f16 with -dtype bf16", 1},
		{"kv-dtype q8_0 headdim 40", append(q40, "-kv-dtype", "q8_0"), "-kv-dtype q8_0: the headdim 40", 1},
		{"kv-dtype q8_0 overflow", append(replace("-k", p("k_huge.npy")), "-kv-dtype", "q8_0"), "k_huge.npy: cannot convert to q8_0", 1},
		{"k-scale without fp8", with("-kv-dtype", "q8_0", "-k-scale", "2"), "-k-scale needs -kv-dtype fp8_e4m3 or fp8_e5m2", 1},
		{"v-scale zero", with("-kv-dtype", "fp8_e5m2", "-v-scale", "0"), "-v-scale 0: want a finite scale > 0", 1},
		{"k-scale subnormal", with("-kv-dtype", "fp8_e4m3", "-k-scale", "1e-45"), "-k-scale 1e-45: want a finite scale > 0, a normal float32 (at least 1.1754944e-38)", 1},
		{"v-scale below float32", with("-kv-dtype", "fp8_e5m2", "-v-scale", "1e-50"), "-v-scale 1e-50: want a finite scale > 0, a normal float32", 1},
		{"q8_0 new key NaN", append(replace("-k-new", p("knew_nan.npy")), "-kv-dtype", "q8_0"), "knew_nan.npy", 1},
		{"dtype q8_0", with("-dtype", "q8_0"), `-dtype "q8_0": want f32, bf16 or f16`, 1},
		{"dtype unknown", with("-dtype", "fp8"), `-dtype "fp8"`, 1},
		{"num-splits negative", with("-num-splits", "-1"), "-num-splits: KVCache.NumSplits -1", 1},
		{"num-splits too many", with("-num-splits", "129"), "-num-splits: KVCache.NumSplits 129", 1},
		{"num-splits not int", with("-num-splits", "x"), "-num-splits", 2},
		{"cache on the gpu", with("-device", "gpu"), "-cache-seqlens: Options.KVCache is not supported by package gpu", 1},
	} {
		t.Run(c.name, func(t *testing.T) { atFails(t, c.args, c.key, c.code, stale) })
	}
}

// The decoding outputs (out, lse, k_cache, v_cache) are written all or
// nothing: a failure before any step of the write of any of them leaves
// the files of an earlier run byte-identical.
func TestAttnKVCacheAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	args := kvInputs(t, dir)
	out := filepath.Join(dir, "out")
	if code, _, stderr := atRun(append(slices.Clone(args), "-o", out)...); code != 0 {
		t.Fatalf("first run: exit %d, %q", code, stderr)
	}
	args = append(args, "-kv-dtype", "bf16", "-o", out) // different outputs
	before := dirState(t, out)
	for _, stage := range []npy.Stage{npy.StageWrite, npy.StageBackup, npy.StageRename} {
		for _, name := range []string{"k_cache.npy", "v_cache.npy", "out.npy"} {
			var errb bytes.Buffer
			code := runSeams(args, io.Discard, &errb, seams{writeHook: func(_ context.Context, s npy.Stage, p string) error {
				if s == stage && p == filepath.Join(out, name) {
					return errors.New("disk on fire")
				}
				return nil
			}})
			if code != 1 {
				t.Errorf("%v %s: exit %d", stage, name, code)
			}
			oneLine(t, stage.String()+" "+name, errb.String(), filepath.Join(out, name), "disk on fire")
			sameState(t, dirState(t, out), before)
		}
	}
	if code, _, stderr := atRun(args...); code != 0 {
		t.Fatalf("second run: exit %d, %q", code, stderr)
	}
	after := dirState(t, out)
	for _, n := range []string{"k_cache.npy", "out.npy"} {
		if after[n] == before[n] {
			t.Errorf("%s unchanged by a bf16 cache run", n)
		}
	}
}
