package main

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
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

// TestAttnContinuousBatching: one call through the CLI over a paged cache
// with packed queries (-cu-seqlens-q) and packed new keys
// (-cu-seqlens-k-new): a decode row, a prompt chunk over a cached prefix
// and a sequence with nothing new. out.npy is packed [total_q, H, D] and
// equals the reference on each sequence's keys (the cached ones and its
// new ones, rotated at their positions); lse.npy is [H, total_q];
// k_cache.npy and v_cache.npy hold the appended rows.
func TestAttnContinuousBatching(t *testing.T) {
	const H, Hk, D, block, blocks = 4, 2, 16, 16, 8
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(4, 27))
	ends, nnew := []int32{23, 10, 5}, []int32{1, 6, 0}
	cuQ, cuNew := []int32{0, 1, 7, 7}, []int32{0, 1, 7, 7}
	table := []int32{4, 1, 0, 5, 7, 2} // two blocks per sequence
	const totalQ, totalNew = 7, 7
	q := atRand(r, totalQ*H*D)
	k, v := atRand(r, blocks*block*Hk*D), atRand(r, blocks*block*Hk*D)
	kn, vn := atRand(r, totalNew*Hk*D), atRand(r, totalNew*Hk*D)
	cos, sin := atRopeTables(64, D)
	args := []string{"attn", "-causal",
		"-q", atWriteF32(t, filepath.Join(dir, "q.npy"), q, totalQ, H, D),
		"-k", atWriteF32(t, filepath.Join(dir, "k.npy"), k, blocks, block, Hk, D),
		"-v", atWriteF32(t, filepath.Join(dir, "v.npy"), v, blocks, block, Hk, D),
		"-cu-seqlens-q", atWriteI32(t, filepath.Join(dir, "cu_q.npy"), cuQ, 4),
		"-cache-seqlens", atWriteI32(t, filepath.Join(dir, "lens.npy"), ends, 3),
		"-block-table", atWriteI32(t, filepath.Join(dir, "table.npy"), table, 3, 2),
		"-k-new", atWriteF32(t, filepath.Join(dir, "kn.npy"), kn, totalNew, Hk, D),
		"-v-new", atWriteF32(t, filepath.Join(dir, "vn.npy"), vn, totalNew, Hk, D),
		"-cu-seqlens-k-new", atWriteI32(t, filepath.Join(dir, "cu_new.npy"), cuNew, 4),
		"-rotary-cos", atWriteF32(t, filepath.Join(dir, "cos.npy"), cos, 64, D/2),
		"-rotary-sin", atWriteF32(t, filepath.Join(dir, "sin.npy"), sin, 64, D/2),
	}
	out := filepath.Join(dir, "out")
	if code, _, stderr := atRun(append(args, "-o", out)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	o := atReadF32(t, filepath.Join(out, "out.npy"), totalQ, H, D)
	lse := atReadF32(t, filepath.Join(out, "lse.npy"), H, totalQ)
	kc := atReadF32(t, filepath.Join(out, "k_cache.npy"), blocks, block, Hk, D)
	vc := atReadF32(t, filepath.Join(out, "v_cache.npy"), blocks, block, Hk, D)
	row := Hk * D
	slot := func(b, j int) int { return (int(table[b*2+j/block])*block + j%block) * row }
	for b := range 3 {
		end, n, nq, q0 := int(ends[b]), int(nnew[b]), int(cuQ[b+1]-cuQ[b]), int(cuQ[b])
		sk, sv := make([]float32, 0, (end+n)*row), make([]float32, 0, (end+n)*row)
		for j := range end + n {
			wk, wv := k[slot(b, j):][:row], v[slot(b, j):][:row]
			if i := j - end; i >= 0 { // new key i, rotated at its cache position
				wk, wv = slices.Clone(kn[(int(cuNew[b])+i)*row:][:row]), vn[(int(cuNew[b])+i)*row:][:row]
				for h := range Hk {
					atRope(wk[h*D:(h+1)*D], cos, sin, D, false, j)
				}
			}
			for x := range row {
				if math.Abs(float64(kc[slot(b, j)+x]-wk[x])) > 1e-6 || vc[slot(b, j)+x] != wv[x] {
					t.Fatalf("sequence %d: k_cache/v_cache at position %d hold %v/%v, want %v/%v", b, j, kc[slot(b, j)+x], vc[slot(b, j)+x], wk[x], wv[x])
				}
			}
			sk, sv = append(sk, wk...), append(sv, wv...)
		}
		if nq == 0 {
			continue
		}
		qb := slices.Clone(q[q0*H*D : (q0+nq)*H*D])
		for i := range nq {
			for h := range H {
				atRope(qb[(i*H+h)*D:][:D], cos, sin, D, false, end+i)
			}
		}
		p := reference.Params{Batch: 1, SeqQ: nq, SeqK: end + n, Heads: H, KVHeads: Hk, HeadDim: D, Causal: true}
		o64, l64 := reference.Forward64(p, atTo64(qb), atTo64(sk), atTo64(sv))
		o32, l32 := reference.Forward32(p, qb, sk, sv)
		gotL := make([]float32, 0, H*nq)
		for h := range H {
			gotL = append(gotL, lse[h*totalQ+q0:][:nq]...)
		}
		if err := reference.Check("O", o[q0*H*D:(q0+nq)*H*D], o32, o64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
		if err := reference.Check("LSE", gotL, l32, l64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
	}
	// Bad combinations and files: one line naming the flag or file.
	long := atWriteI32(t, filepath.Join(dir, "long.npy"), []int32{0, 1, 7, 8}, 4)
	for _, c := range []struct {
		drop string // a flag to leave out
		add  []string
		want string
	}{
		{"-cu-seqlens-k-new", nil, "-cu-seqlens-k-new"},
		{"", []string{"-cu-seqlens-k", filepath.Join(dir, "cu_q.npy")}, "-cu-seqlens-k cannot"},
		{"-cu-seqlens-k-new", []string{"-cu-seqlens-k-new", long}, "long.npy"},
	} {
		var a []string
		for i := 0; i < len(args); i++ {
			if args[i] == c.drop {
				i++
				continue
			}
			a = append(a, args[i])
		}
		a = append(append(a, c.add...), "-o", filepath.Join(dir, "o2"))
		code, _, stderr := atRun(a...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want one line with %q", c, code, stderr, c.want)
		}
	}
}
