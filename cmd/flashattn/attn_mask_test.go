package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// atMasks writes the mask files of case c (B sequences; dense lengths Sq,
// Sk, or for varlen the packed totals) and returns their flags and the
// dense mask they stand for: visible(b, h, i, j) for sequence b, query head
// h, positions from the sequence's start (nil when c has no mask).
func atMasks(t *testing.T, rng *rand.Rand, c atCase, dir string, B, Sq, Sk int) ([]string, func(b, h, i, j int) bool) {
	t.Helper()
	varlen := c.cuQ != nil
	seqQ, seqK := Sq, Sk
	if varlen {
		seqQ, seqK = 1, 1
		for b := 0; b < B; b++ {
			seqQ, seqK = max(seqQ, int(c.cuQ[b+1]-c.cuQ[b])), max(seqK, int(c.cuK[b+1]-c.cuK[b]))
		}
	}
	var args []string
	var fns []func(b, h, i, j int) bool
	if c.maskHeads > 0 {
		mbq, mbk := c.mbq, c.mbk
		if mbq == 0 {
			mbq, mbk = 128, 128
		} else {
			args = append(args, "-mask-block-q", fmt.Sprint(mbq), "-mask-block-k", fmt.Sprint(mbk))
		}
		nqb, nkb := (seqQ+mbq-1)/mbq, (seqK+mbk-1)/mbk
		table := make([]byte, c.maskHeads*nqb*nkb)
		for i := range table {
			if rng.Float64() < 0.6 {
				table[i] = byte(1 + rng.IntN(255))
				if c.maskDtype == "|b1" {
					table[i] = 1
				}
			}
		}
		clear(table[:nkb]) // the first query block of mask head 0 sees nothing
		dtype := c.maskDtype
		if dtype == "" {
			dtype = "|u1"
		}
		p := filepath.Join(dir, "block_mask.npy")
		if err := os.WriteFile(p, atRawNpy(dtype, false, fmt.Sprintf("(%d, %d, %d)", c.maskHeads, nqb, nkb), table), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-block-mask", p)
		fns = append(fns, func(_, h, i, j int) bool {
			hm := min(h, c.maskHeads-1)
			return table[(hm*nqb+i/mbq)*nkb+j/mbk] != 0
		})
	}
	if c.segs {
		// Runs of ids 0..3 with some padding (-1) mixed in.
		ids := func(n int) []int32 {
			x := make([]int32, n)
			cur := int32(0)
			for i := range x {
				if rng.IntN(4) == 0 {
					cur = int32(rng.IntN(4))
				}
				x[i] = cur
				if rng.IntN(9) == 0 {
					x[i] = -1
				}
			}
			return x
		}
		var idsQ, idsK []int32
		var pq, pk string
		if varlen {
			idsQ, idsK = ids(Sq), ids(Sk)
			pq = atWriteI32(t, filepath.Join(dir, "ids_q.npy"), idsQ, Sq)
			pk = atWriteI32(t, filepath.Join(dir, "ids_k.npy"), idsK, Sk)
		} else {
			idsQ, idsK = ids(B*Sq), ids(B*Sk)
			pq = atWriteI32(t, filepath.Join(dir, "ids_q.npy"), idsQ, B, Sq)
			pk = atWriteI32(t, filepath.Join(dir, "ids_k.npy"), idsK, B, Sk)
		}
		args = append(args, "-segment-ids-q", pq, "-segment-ids-k", pk)
		fns = append(fns, func(b, _, i, j int) bool {
			qi, kj := b*Sq+i, b*Sk+j
			if varlen {
				qi, kj = int(c.cuQ[b])+i, int(c.cuK[b])+j
			}
			return idsQ[qi] >= 0 && idsQ[qi] == idsK[kj]
		})
	}
	if fns == nil {
		return nil, nil
	}
	return args, func(b, h, i, j int) bool {
		for _, f := range fns {
			if !f(b, h, i, j) {
				return false
			}
		}
		return true
	}
}

// Block masks and segment ids through the command line, against the
// float64 reference with the masks expanded to dense: every dtype, shared
// and per-head masks, blocks that divide nothing (short last blocks),
// combined with GQA, causal, window, softcap, ALiBi, dropout and varlen,
// forward and backward.
func TestAttnMasks(t *testing.T) {
	cases := []atCase{
		{name: "block-shared", B: 2, Sq: 37, Sk: 45, H: 2, KVH: 2, D: 8, maskHeads: 1, mbq: 8, mbk: 16, backward: true},
		{name: "block-per-head-gqa-i1", B: 1, Sq: 29, Sk: 33, H: 4, KVH: 2, D: 8, maskHeads: 4, mbq: 5, mbk: 7, maskDtype: "|i1", causal: true, backward: true},
		{name: "block-bool-window-softcap-alibi", B: 2, Sq: 26, Sk: 31, H: 2, KVH: 1, D: 16, maskHeads: 2, mbq: 3, mbk: 4,
			maskDtype: "|b1", window: []int{9, 3}, softcap: 2, alibi: "h", backward: true},
		{name: "block-dropout", B: 1, Sq: 40, Sk: 40, H: 2, KVH: 2, D: 8, maskHeads: 1, mbq: 16, mbk: 16, dropout: 0.2, seed: 3, backward: true},
		{name: "block-default-128", B: 1, Sq: 150, Sk: 131, H: 2, KVH: 2, D: 8, maskHeads: 2, backward: true},
		{name: "block-one-block", B: 1, Sq: 9, Sk: 11, H: 1, KVH: 1, D: 8, maskHeads: 1, mbq: 64, mbk: 64},
		{name: "segments", B: 2, Sq: 23, Sk: 27, H: 2, KVH: 2, D: 8, segs: true, backward: true},
		{name: "segments-block-causal-gqa", B: 2, Sq: 35, Sk: 35, H: 4, KVH: 1, D: 8, segs: true, maskHeads: 4, mbq: 6, mbk: 10, causal: true, backward: true},
		{name: "varlen-block", H: 2, KVH: 2, D: 8, cuQ: []int32{0, 13, 20, 41}, cuK: []int32{0, 9, 30, 47}, maskHeads: 2, mbq: 4, mbk: 6, backward: true},
		{name: "varlen-segments", H: 2, KVH: 1, D: 8, cuQ: []int32{0, 17, 25}, cuK: []int32{0, 21, 33}, segs: true, backward: true},
		{name: "varlen-everything", H: 4, KVH: 2, D: 8, cuQ: []int32{0, 11, 11, 30}, cuK: []int32{0, 14, 20, 39},
			segs: true, maskHeads: 1, mbq: 5, mbk: 3, causal: true, dropout: 0.25, seed: 11, alibi: "bh", backward: true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			atCheckGood(t, c, uint64(100+i))
		})
	}
}

// Masks with a paged KV cache (decoding, the query heads stacked): the
// block mask's key axis and the key segment ids cover the cache's capacity
// (blocks per sequence × block size), positions from each sequence's start.
func TestAttnKVCacheMasks(t *testing.T) {
	const B, Sq, H, Hk, D, block, blocks, perSeq = 2, 2, 4, 2, 16, 16, 6, 3
	const capacity, mbk = perSeq * block, 8
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 1))
	q := atRand(r, B*Sq*H*D)
	k, v := atRand(r, blocks*block*Hk*D), atRand(r, blocks*block*Hk*D)
	table := []int32{4, 1, 2, 0, 5, 3}
	lens := []int32{41, 19}
	nkb := capacity / mbk
	mask := make([]byte, H*nkb)
	for i := range mask {
		mask[i] = byte(r.IntN(2))
	}
	idsQ := []int32{1, 2, 2, -1}
	idsK := make([]int32, B*capacity)
	for i := range idsK {
		idsK[i] = int32(r.IntN(4)) - 1
	}
	mp := filepath.Join(dir, "mask.npy")
	if err := os.WriteFile(mp, atRawNpy("|u1", false, fmt.Sprintf("(%d, 1, %d)", H, nkb), mask), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	code, _, stderr := atRun("attn", "-o", out,
		"-q", atWriteF32(t, filepath.Join(dir, "q.npy"), q, B, Sq, H, D),
		"-k", atWriteF32(t, filepath.Join(dir, "k.npy"), k, blocks, block, Hk, D),
		"-v", atWriteF32(t, filepath.Join(dir, "v.npy"), v, blocks, block, Hk, D),
		"-block-table", atWriteI32(t, filepath.Join(dir, "table.npy"), table, B, perSeq),
		"-cache-seqlens", atWriteI32(t, filepath.Join(dir, "lens.npy"), lens, B),
		"-block-mask", mp, "-mask-block-k", fmt.Sprint(mbk), "-mask-block-q", "4",
		"-segment-ids-q", atWriteI32(t, filepath.Join(dir, "idsq.npy"), idsQ, B, Sq),
		"-segment-ids-k", atWriteI32(t, filepath.Join(dir, "idsk.npy"), idsK, B, capacity))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	o := atReadF32(t, filepath.Join(out, "out.npy"), B, Sq, H, D)
	l := atReadF32(t, filepath.Join(out, "lse.npy"), B, H, Sq)
	row := Hk * D
	for b := 0; b < B; b++ {
		n := int(lens[b])
		sk, sv := make([]float32, 0, n*row), make([]float32, 0, n*row)
		for j := 0; j < n; j++ {
			off := (int(table[b*perSeq+j/block])*block + j%block) * row
			sk, sv = append(sk, k[off:off+row]...), append(sv, v[off:off+row]...)
		}
		p := reference.Params{Batch: 1, SeqQ: Sq, SeqK: n, Heads: H, KVHeads: Hk, HeadDim: D,
			Mask: func(_, h, i, j int) bool {
				id := idsQ[b*Sq+i]
				return mask[h*nkb+j/mbk] != 0 && id >= 0 && id == idsK[b*capacity+j]
			}}
		sq := q[b*Sq*H*D : (b+1)*Sq*H*D]
		o64, l64 := reference.Forward64(p, atTo64(sq), atTo64(sk), atTo64(sv))
		o32, l32 := reference.Forward32(p, sq, sk, sv)
		if err := reference.Check("O", o[b*Sq*H*D:(b+1)*Sq*H*D], o32, o64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
		if err := reference.Check("LSE", l[b*H*Sq:(b+1)*H*Sq], l32, l64); err != nil {
			t.Errorf("sequence %d: %v", b, err)
		}
	}
}
