package main

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestAttnKVCache: decoding through the CLI from a paged cache equals the
// reference on each sequence's keys; bad cache files are refused.
func TestAttnKVCache(t *testing.T) {
	const B, H, Hk, D, block, blocks = 2, 4, 2, 16, 16, 6
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(2, 9))
	q := atRand(r, B*H*D)
	k, v := atRand(r, blocks*block*Hk*D), atRand(r, blocks*block*Hk*D)
	table := []int32{4, 1, 0, 5} // sequence 0: blocks 4, 1; sequence 1: blocks 0, 5
	lens := []int32{23, 9}
	qp := atWriteF32(t, filepath.Join(dir, "q.npy"), q, B, 1, H, D)
	kp := atWriteF32(t, filepath.Join(dir, "k.npy"), k, blocks, block, Hk, D)
	vp := atWriteF32(t, filepath.Join(dir, "v.npy"), v, blocks, block, Hk, D)
	tp := atWriteI32(t, filepath.Join(dir, "table.npy"), table, B, 2)
	lp := atWriteI32(t, filepath.Join(dir, "lens.npy"), lens, B)
	out := filepath.Join(dir, "out")
	if code, _, stderr := atRun("attn", "-q", qp, "-k", kp, "-v", vp, "-o", out, "-cache-seqlens", lp, "-block-table", tp); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	o := atReadF32(t, filepath.Join(out, "out.npy"), B, 1, H, D)
	row := Hk * D
	for b := 0; b < B; b++ {
		n := int(lens[b])
		sk, sv := make([]float32, 0, n*row), make([]float32, 0, n*row)
		for j := 0; j < n; j++ {
			blk := int(table[b*2+j/block])
			off := (blk*block + j%block) * row
			sk, sv = append(sk, k[off:off+row]...), append(sv, v[off:off+row]...)
		}
		p := reference.Params{Batch: 1, SeqQ: 1, SeqK: n, Heads: H, KVHeads: Hk, HeadDim: D}
		sq := q[b*H*D : (b+1)*H*D]
		o64, _ := reference.Forward64(p, atTo64(sq), atTo64(sk), atTo64(sv))
		o32, _ := reference.Forward32(p, sq, sk, sv)
		if err := reference.Check("O", o[b*H*D:(b+1)*H*D], o32, o64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
	}
	bad := atWriteI32(t, filepath.Join(dir, "bad.npy"), []int32{4, 1, 0, 9}, B, 2)
	long := atWriteI32(t, filepath.Join(dir, "long.npy"), []int32{23, 33}, B)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-cache-seqlens", lp, "-block-table", bad}, "bad.npy"},
		{[]string{"-cache-seqlens", long, "-block-table", tp}, "long.npy"},
		{[]string{"-block-table", tp}, "-cache-seqlens"},
		{[]string{"-cache-seqlens", lp, "-block-table", tp, "-dout", qp}, "forward only"},
	} {
		args := append([]string{"attn", "-q", qp, "-k", kp, "-v", vp, "-o", filepath.Join(dir, "o2")}, c.args...)
		code, _, stderr := atRun(args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want one line with %q", c.args, code, stderr, c.want)
		}
	}
}
