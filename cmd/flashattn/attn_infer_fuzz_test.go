package main

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
)

// FuzzAttnKVCache runs decoding from fixed small caches with fuzzed cache
// lengths, left padding, cache rows, new keys, rotary tables, cache and
// query types, key splits and layouts (layout: 0 contiguous, 1 with
// -cache-batch-idx, 2 paged, 3 paged with -cache-batch-idx; snew: 0 no new
// keys, 1 one, 2 three, 3 -v-new shaped unlike -k-new; rot: 0 none, 1
// rotary_dim 16, 2 the whole head, 3 too few positions, 4 wider than the
// head, 5 a NaN in every row; kv and dt index the types, the last of each
// unknown; vdim: 0 v caches of k's head dim 32, 1 of 64, 2 of 16 (MLA's
// value head dim: out and v_cache.npy follow it; q8_0 refuses 16); sinks:
// -sinks), into an empty output directory or one holding an earlier run's
// files. The
// command must not panic; exit 0 only for valid values, with exactly the
// expected files in their types and shapes; or exit 1/2 with one stderr
// line and the directory as it was.
func FuzzAttnKVCache(f *testing.F) {
	dir := f.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	r := rand.New(rand.NewPCG(1, 2))
	atWriteF32(f, p("q.npy"), atRand(r, 2*4*32), 2, 1, 4, 32)
	atWriteF32(f, p("k.npy"), atRand(r, 3*64*2*32), 3, 64, 2, 32)
	atWriteF32(f, p("v.npy"), atRand(r, 3*64*2*32), 3, 64, 2, 32)
	atWriteF32(f, p("k2.npy"), atRand(r, 2*64*2*32), 2, 64, 2, 32)
	atWriteF32(f, p("v2.npy"), atRand(r, 2*64*2*32), 2, 64, 2, 32)
	atWriteF32(f, p("kp.npy"), atRand(r, 6*16*2*32), 6, 16, 2, 32)
	atWriteF32(f, p("vp.npy"), atRand(r, 6*16*2*32), 6, 16, 2, 32)
	atWriteI32(f, p("table.npy"), []int32{5, 1, 0, 2, 4, 3}, 2, 3)
	for _, dv := range []int{64, 16} {
		d := strconv.Itoa(dv)
		atWriteF32(f, p("v_d"+d+".npy"), atRand(r, 3*64*2*dv), 3, 64, 2, dv)
		atWriteF32(f, p("v2_d"+d+".npy"), atRand(r, 2*64*2*dv), 2, 64, 2, dv)
		atWriteF32(f, p("vp_d"+d+".npy"), atRand(r, 6*16*2*dv), 6, 16, 2, dv)
		for _, n := range []int{1, 3} {
			atWriteF32(f, p("vnew"+strconv.Itoa(n)+"_d"+d+".npy"), atRand(r, 2*n*2*dv), 2, n, 2, dv)
		}
	}
	atWriteF32(f, p("sinks.npy"), []float32{0.5, -1, 2, 0}, 4)
	for _, n := range []int{1, 3} {
		atWriteF32(f, p("knew"+strconv.Itoa(n)+".npy"), atRand(r, 2*n*2*32), 2, n, 2, 32)
		atWriteF32(f, p("vnew"+strconv.Itoa(n)+".npy"), atRand(r, 2*n*2*32), 2, n, 2, 32)
	}
	for i, s := range [][2]int{{80, 8}, {80, 16}, {4, 8}, {80, 17}, {80, 8}} {
		cos, sin := atRopeTables(s[0], 2*s[1])
		if i == 4 { // a NaN in every row: the rows a call uses are checked
			for j := 7; j < len(sin); j += s[1] {
				sin[j] = float32(math.NaN())
			}
		}
		atWriteF32(f, p("cos"+strconv.Itoa(i+1)+".npy"), cos, s[0], s[1])
		atWriteF32(f, p("sin"+strconv.Itoa(i+1)+".npy"), sin, s[0], s[1])
	}
	earlier := p("earlier")
	atWriteI32(f, p("lens.npy"), []int32{10, 20}, 2)
	if code, _, stderr := atRun("attn", "-q", p("q.npy"), "-k", p("k2.npy"), "-v", p("v2.npy"), "-cache-seqlens", p("lens.npy"),
		"-k-new", p("knew1.npy"), "-v-new", p("vnew1.npy"), "-o", earlier); code != 0 {
		f.Fatalf("earlier run: %d %q", code, stderr)
	}
	f.Add(int32(10), int32(20), int32(0), int32(0), int32(0), int32(1), uint8(1), uint8(1), false, true, uint8(0), uint8(0), 0, uint8(0), uint8(0), uint8(0), false)
	f.Add(int32(63), int32(0), int32(5), int32(0), int32(2), int32(0), uint8(1), uint8(2), true, true, uint8(2), uint8(1), 3, uint8(1), uint8(1), uint8(0), false)
	f.Add(int32(45), int32(47), int32(45), int32(3), int32(0), int32(0), uint8(2), uint8(1), false, false, uint8(4), uint8(0), 128, uint8(2), uint8(0), uint8(0), false)
	f.Add(int32(46), int32(1), int32(0), int32(0), int32(0), int32(0), uint8(2), uint8(0), false, true, uint8(3), uint8(2), 0, uint8(2), uint8(1), uint8(0), false)
	f.Add(int32(-1), int32(70), int32(-2), int32(9), int32(3), int32(-1), uint8(3), uint8(3), true, false, uint8(5), uint8(3), -1, uint8(3), uint8(0), uint8(0), false)
	f.Add(int32(10), int32(10), int32(0), int32(0), int32(0), int32(0), uint8(0), uint8(1), false, false, uint8(4), uint8(1), 129, uint8(0), uint8(0), uint8(0), false)
	f.Add(int32(30), int32(2), int32(1), int32(2), int32(1), int32(1), uint8(1), uint8(4), false, true, uint8(1), uint8(4), 7, uint8(1), uint8(1), uint8(0), false)
	f.Add(int32(5), int32(6), int32(0), int32(0), int32(0), int32(0), uint8(1), uint8(5), true, true, uint8(0), uint8(0), 0, uint8(0), uint8(0), uint8(0), false)
	f.Add(int32(math.MaxInt32), int32(math.MinInt32), int32(math.MaxInt32), int32(0), int32(math.MinInt32), int32(0), uint8(1), uint8(1), false, true, uint8(2), uint8(2), math.MaxInt, uint8(2), uint8(1), uint8(0), false)
	f.Add(int32(10), int32(20), int32(0), int32(0), int32(0), int32(1), uint8(1), uint8(1), false, true, uint8(0), uint8(0), 0, uint8(0), uint8(0), uint8(1), true)
	f.Add(int32(63), int32(0), int32(5), int32(0), int32(2), int32(0), uint8(1), uint8(2), true, true, uint8(2), uint8(1), 3, uint8(2), uint8(1), uint8(2), false)
	f.Add(int32(30), int32(2), int32(1), int32(2), int32(1), int32(1), uint8(1), uint8(4), false, true, uint8(4), uint8(0), 7, uint8(1), uint8(1), uint8(2), true)
	f.Add(int32(30), int32(2), int32(1), int32(2), int32(1), int32(1), uint8(2), uint8(0), false, true, uint8(4), uint8(0), 0, uint8(2), uint8(0), uint8(1), false)
	f.Add(int32(46), int32(1), int32(0), int32(0), int32(0), int32(0), uint8(3), uint8(0), false, true, uint8(3), uint8(2), 0, uint8(2), uint8(1), uint8(2), true)
	f.Fuzz(func(t *testing.T, l0, l1, p0, p1, i0, i1 int32, snew, rot uint8, interleaved, causal bool, kv, dt uint8, splits int, layout, fault uint8, vdim uint8, sinks bool) {
		work := t.TempDir()
		w := func(n string) string { return filepath.Join(work, n) }
		out := w("out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		if fault%2 == 1 {
			for _, n := range atDirNames(t, earlier) {
				b, err := os.ReadFile(filepath.Join(earlier, n))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(out, n), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		lens, pads, idx := []int32{l0, l1}, []int32{p0, p1}, []int32{i0, i1}
		atWriteI32(t, w("lens.npy"), lens, 2)
		atWriteI32(t, w("pad.npy"), pads, 2)
		atWriteI32(t, w("idx.npy"), idx, 2)
		args := []string{"attn", "-q", p("q.npy"), "-cache-seqlens", w("lens.npy"), "-cache-leftpad", w("pad.npy"), "-o", out}
		layout %= 4
		dv := []int{32, 64, 16}[vdim%3]
		vsuf := map[int]string{32: "", 64: "_d64", 16: "_d16"}[dv]
		capacity, rows := 64, 3
		kshape := []int{3, 64, 2, 32}
		if layout >= 2 {
			args = append(args, "-k", p("kp.npy"), "-v", p("vp"+vsuf+".npy"), "-block-table", p("table.npy"))
			capacity, kshape = 48, []int{6, 16, 2, 32}
		} else if layout == 1 {
			args = append(args, "-k", p("k.npy"), "-v", p("v"+vsuf+".npy"))
		} else {
			args = append(args, "-k", p("k2.npy"), "-v", p("v2"+vsuf+".npy"))
			kshape = []int{2, 64, 2, 32}
		}
		vshape := append(slices.Clone(kshape[:3]), dv)
		if sinks {
			args = append(args, "-sinks", p("sinks.npy"))
		}
		if layout%2 == 1 {
			args = append(args, "-cache-batch-idx", w("idx.npy"))
		}
		n := []int{0, 1, 3, 1}[snew%4]
		switch snew % 4 {
		case 1, 2:
			args = append(args, "-k-new", p("knew"+strconv.Itoa(n)+".npy"), "-v-new", p("vnew"+strconv.Itoa(n)+vsuf+".npy"))
		case 3:
			args = append(args, "-k-new", p("knew1.npy"), "-v-new", p("vnew3"+vsuf+".npy"))
		}
		rot %= 6
		if rot > 0 {
			args = append(args, "-rotary-cos", p("cos"+strconv.Itoa(int(rot))+".npy"), "-rotary-sin", p("sin"+strconv.Itoa(int(rot))+".npy"))
			if interleaved {
				args = append(args, "-rotary-interleaved")
			}
		}
		if causal {
			args = append(args, "-causal")
		}
		kvs := []string{"", "f32", "bf16", "f16", "q8_0", "int4"}
		dts := []string{"", "bf16", "f16", "f32"}
		kvName, dtName := kvs[int(kv)%len(kvs)], dts[int(dt)%len(dts)]
		if kvName != "" {
			args = append(args, "-kv-dtype", kvName)
		}
		if dtName != "" {
			args = append(args, "-dtype", dtName)
		}
		if splits != 0 {
			args = append(args, "-num-splits", strconv.Itoa(splits))
		}
		before := dirState(t, out)
		code, stderr := atRunGuarded(t, args)
		switch code {
		case 0:
			// Only valid values may succeed.
			valid := layout != 3 && snew%4 != 3 && (rot == 0 || rot <= 3 && n > 0) && kvName != "int4" &&
				!(kvName == "f16" && dtName == "bf16" || kvName == "bf16" && dtName == "f16") && splits >= 0 && splits <= maxNumSplits &&
				!(kvName == "q8_0" && dv%32 != 0)
			for b := 0; b < 2; b++ {
				valid = valid && lens[b] >= 0 && int(lens[b])+n <= capacity && pads[b] >= 0 && pads[b] <= lens[b]
				if rot == 3 { // a table of 4 positions
					valid = valid && int64(lens[b])-int64(pads[b])+int64(max(n, 1)) <= 4
				}
				if layout == 1 {
					valid = valid && idx[b] >= 0 && int(idx[b]) < rows
				}
			}
			if !valid {
				t.Fatalf("exit 0 for invalid values (args %q)", args)
			}
			want := []string{"lse.npy", "out.npy"}
			if n > 0 {
				want = []string{"k_cache.npy", "lse.npy", "out.npy", "v_cache.npy"}
			}
			all := slices.Clone(want)
			for n := range before { // an earlier run's files stay
				if !slices.Contains(all, n) {
					all = append(all, n)
				}
			}
			slices.Sort(all)
			if names := atDirNames(t, out); !slices.Equal(names, all) {
				t.Fatalf("exit 0 but out dir holds %v, want %v (args %q)", names, all, args)
			}
			odescr, cdescr := "<f4", "<f4"
			if dtName == "f16" {
				odescr = "<f2"
			}
			if kvName == "f16" || kvName == "" && dtName == "f16" {
				cdescr = "<f2"
			}
			shapes := map[string][]int{"out.npy": {2, 1, 4, dv}, "lse.npy": {2, 4, 1}, "k_cache.npy": kshape, "v_cache.npy": vshape}
			for _, name := range want {
				d := cdescr
				if name == "out.npy" {
					d = odescr
				} else if name == "lse.npy" {
					d = "<f4"
				}
				if info, err := npy.Stat(filepath.Join(out, name)); err != nil || info.Descr != d || !reflect.DeepEqual(info.Shape, shapes[name]) {
					t.Fatalf("%s: %+v %v, want %s %v (args %q)", name, info, err, d, shapes[name], args)
				}
			}
		case 1, 2:
			if !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d with stderr not one line: %q (args %q)", code, stderr, args)
			}
			if after := dirState(t, out); !reflect.DeepEqual(after, before) {
				t.Fatalf("exit %d changed the out dir (args %q)", code, args)
			}
		default:
			t.Fatalf("exit status %d (args %q), stderr %q", code, args, stderr)
		}
	})
}
