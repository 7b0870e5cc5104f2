package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
)

// "flashattn io -json" prints flashattn.CountTraffic's counts for the
// problem and cache given, and a readable line without -json.
func TestIOCommand(t *testing.T) {
	for _, c := range []struct {
		args  []string
		shape flashattn.TrafficShape
		opts  *flashattn.Options
		cache int
		pass  flashattn.Pass
	}{
		{[]string{"-seqlen", "2048", "-headdim", "64", "-cache-bytes", "256K"},
			flashattn.TrafficShape{Batch: 1, Heads: 1, SeqQ: 2048, SeqK: 2048, Dim: 64}, nil, 256 << 10, flashattn.PassForward},
		{[]string{"-seqlen", "1000", "-headdim", "40", "-cache-bytes", "100000", "-causal", "-mode", "fwdbwd", "-heads", "4", "-kv-heads", "2", "-batch", "2"},
			flashattn.TrafficShape{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 1000, SeqK: 1000, Dim: 40}, &flashattn.Options{Causal: true}, 100000, flashattn.PassForwardBackward},
		{[]string{"-seqlen", "1500", "-cache-bytes", "1M", "-mode", "bwd", "-run-calls", "2"},
			flashattn.TrafficShape{Batch: 1, Heads: 1, SeqQ: 1500, SeqK: 1500, Dim: 64}, &flashattn.Options{BlockK: 512}, 1 << 20, flashattn.PassBackward},
	} {
		code, stdout, stderr := atRun(append([]string{"io", "-json"}, c.args...)...)
		if code != 0 || stderr != "" {
			t.Fatalf("%v: exit %d, stderr %q", c.args, code, stderr)
		}
		var r ioResult
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%v: %v in %q", c.args, err, stdout)
		}
		opts := flashattn.Options{Workers: 1} // io counts the loops of one worker
		if c.opts != nil {
			opts = *c.opts
			opts.Workers = 1
		}
		want, err := flashattn.CountTraffic(c.shape, &opts, c.cache, c.pass)
		if err != nil {
			t.Fatal(err)
		}
		if r.FlashBytes != want.Flash.Total() || r.StandardBytes != want.Standard.Total() || r.BlockQ != want.BlockQ ||
			r.BlockK != want.BlockK || r.SuperBlockQ != want.SuperBlockQ || r.BackwardBlockK != want.BackwardBlockK || r.Flash != partsOf(want.Flash) || r.CacheBytes != c.cache {
			t.Errorf("%v: %+v, want the counts %+v", c.args, r, want)
		}
		for _, key := range []string{`"flash_bytes":`, `"standard_bytes":`, `"block_q":`} {
			if !strings.Contains(stdout, key) {
				t.Errorf("%v: JSON lacks %s", c.args, key)
			}
		}
		code, stdout, _ = atRun(append([]string{"io"}, c.args...)...)
		if code != 0 || strings.Count(stdout, "\n") != 1 || !strings.Contains(stdout, "flashattn") || !strings.Contains(stdout, "standard") {
			t.Errorf("%v: text output %q", c.args, stdout)
		}
	}
	// -density: a random block mask; the forward reads about a quarter of
	// the K/V tiles that it reads without a mask with the same tiles (a
	// block mask's query tiles are its blocks' divisors, 64 rows here, and
	// it walks no super-blocks).
	_, dense, _ := atRun("io", "-json", "-seqlen", "4096", "-mode", "fwd", "-block-q", "64")
	_, sparse, _ := atRun("io", "-json", "-seqlen", "4096", "-mode", "fwd", "-density", "0.25")
	var rd, rs ioResult
	if json.Unmarshal([]byte(dense), &rd) != nil || json.Unmarshal([]byte(sparse), &rs) != nil {
		t.Fatalf("outputs %q %q", dense, sparse)
	}
	if rs.Density != 0.25 || rd.Density != 1 || rs.BlockQ != rd.BlockQ || rs.SuperBlockQ != rd.SuperBlockQ ||
		rs.Flash.K.Read >= rd.Flash.K.Read/3 || rs.StandardBytes != rd.StandardBytes {
		t.Errorf("density 0.25: %+v; dense %+v", rs, rd)
	}
}

func TestIOBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{}, []string{"-seqlen"}},
		{[]string{"-seqlen", "0"}, []string{"-seqlen"}},
		{[]string{"-seqlen", "64", "-mode", "sideways"}, []string{"-mode"}},
		{[]string{"-seqlen", "64", "-density", "0"}, []string{"-density"}},
		{[]string{"-seqlen", "64", "-density", "1.01"}, []string{"-density"}},
		{[]string{"-seqlen", "64", "-cache-bytes", "2T"}, []string{"-cache-bytes"}},
		{[]string{"-seqlen", "64", "-heads", "3", "-kv-heads", "2"}, []string{"-kv-heads"}},
		{[]string{"-seqlen", "64", "-headdim", "0", "-batch", "0", "-run-calls", "-1"}, []string{"-headdim", "-batch", "-run-calls"}},
		{[]string{"-seqlen", "2000000000", "-max-memory", "1G"}, []string{"needs"}},
	} {
		code, stdout, stderr := atRun(append([]string{"io"}, c.args...)...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 1 || stdout != "" || len(lines) != len(c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, stdout, stderr)
			continue
		}
		for i, w := range c.want {
			if !strings.HasPrefix(lines[i], "flashattn io: ") || !strings.Contains(lines[i], w) {
				t.Errorf("%v: line %q does not name %q", c.args, lines[i], w)
			}
		}
	}
	for _, args := range [][]string{{"-seqlen", "x"}, {"-seqlen", "64", "-cache-bytes", "0"}, {"-seqlen", "64", "-cache-bytes", "lots"}} {
		if code, _, stderr := atRun(append([]string{"io"}, args...)...); code != 2 || !strings.Contains(stderr, args[len(args)-2]) {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
}
