package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestAttnBias: "flashattn attn -bias" with a key-padding bias [B, 1, 1,
// Sk] (−Inf on padded keys), a relative-position bias [1, H, Sq, Sk] and a
// per-row bias [B, 1, Sq, 1]: out.npy against the float64 reference of the
// biased scores and, with -dout, dbias.npy (the bias's shape) against the
// reference's score gradients summed over the broadcast dimensions.
func TestAttnBias(t *testing.T) {
	const B, Sq, Sk, H, KVH, D = 2, 7, 11, 4, 2, 8
	for i, shape := range [][4]int{{B, 1, 1, Sk}, {1, H, Sq, Sk}, {B, 1, Sq, 1}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(30+i), 2))
			dir := t.TempDir()
			p := func(n string) string { return filepath.Join(dir, n) }
			q, k, v, dout := atRand(rng, B*Sq*H*D), atRand(rng, B*Sk*KVH*D), atRand(rng, B*Sk*KVH*D), atRand(rng, B*Sq*H*D)
			bias := atRand(rng, shape[0]*shape[1]*shape[2]*shape[3])
			if shape[1] == 1 && shape[2] == 1 {
				for j := Sk - 3; j < Sk; j++ {
					bias[Sk+j] = float32(math.Inf(-1)) // batch element 1 has 3 padded keys
				}
			}
			out := p("out")
			code, _, stderr := atRun("attn", "-q", atWriteF32(t, p("q.npy"), q, B, Sq, H, D), "-k", atWriteF32(t, p("k.npy"), k, B, Sk, KVH, D),
				"-v", atWriteF32(t, p("v.npy"), v, B, Sk, KVH, D), "-dout", atWriteF32(t, p("dout.npy"), dout, B, Sq, H, D),
				"-bias", atWriteF32(t, p("bias.npy"), bias, shape[:]...), "-causal", "-o", out)
			if code != 0 || stderr != "" {
				t.Fatalf("exit status %d, stderr %q", code, stderr)
			}
			if got, want := atDirNames(t, out), []string{"dbias.npy", "dk.npy", "dq.npy", "dv.npy", "lse.npy", "out.npy"}; !slices.Equal(got, want) {
				t.Fatalf("output dir holds %v, want %v", got, want)
			}
			at := func(b, h, i, j int) int {
				idx := [4]int{b, h, i, j}
				n := 0
				for d := range 4 {
					if shape[d] == 1 {
						idx[d] = 0
					}
					n = n*shape[d] + idx[d]
				}
				return n
			}
			par := reference.Params{Batch: B, SeqQ: Sq, SeqK: Sk, Heads: H, KVHeads: KVH, HeadDim: D, Causal: true,
				ScoreMod: func(b, h, i, j int, x float64) (float64, float64) { return x + float64(bias[at(b, h, i, j)]), 1 }}
			o64, _ := reference.Forward64(par, atTo64(q), atTo64(k), atTo64(v))
			o32, _ := reference.Forward32(par, q, k, v)
			if err := reference.Check("O", atReadF32(t, filepath.Join(out, "out.npy"), B, Sq, H, D), o32, o64); err != nil {
				t.Error(err)
			}
			ds64 := reference.ScoreGrads64(par, atTo64(q), atTo64(k), atTo64(v), atTo64(dout), nil)
			ds32 := reference.ScoreGrads32(par, q, k, v, dout, nil)
			db64, db32 := make([]float64, len(bias)), make([]float32, len(bias))
			for b := range B {
				for h := range H {
					for i := range Sq {
						for j := range Sk {
							e := ((b*H+h)*Sq+i)*Sk + j
							db64[at(b, h, i, j)] += ds64[e]
							db32[at(b, h, i, j)] += ds32[e]
						}
					}
				}
			}
			if err := reference.Check("dbias", atReadF32(t, filepath.Join(out, "dbias.npy"), shape[:]...), db32, db64); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestAttnBiasBad: a -bias file of the wrong rank, of heads that are not 1
// or q's, covering fewer keys than k, with a dimension that is neither 1
// nor the call's (more keys, queries or batch elements than the call has:
// PyTorch's broadcast rule), or with -device gpu is one line on stderr
// naming it.
func TestAttnBiasBad(t *testing.T) {
	const B, Sq, Sk, H, D = 1, 4, 6, 2, 8
	rng := rand.New(rand.NewPCG(7, 2))
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	x := atWriteF32(t, p("x.npy"), atRand(rng, B*Sq*H*D), B, Sq, H, D)
	kv := atWriteF32(t, p("kv.npy"), atRand(rng, B*Sk*H*D), B, Sk, H, D)
	for _, c := range []struct {
		name  string
		shape []int
		extra []string
		want  string
	}{
		{"rank 3", []int{H, Sq, Sk}, nil, "want 4 dimensions"},
		{"3 heads", []int{1, 3, Sq, Sk}, nil, "data for 3 heads, want 1 or 2"},
		{"fewer keys", []int{1, 1, Sq, Sk - 1}, nil, "covers any number of batch elements (broadcast) × 4 queries × 5 keys"},
		{"more keys", []int{1, 1, Sq, Sk + 1}, nil, "want [1 or 1, 1 or 2, 1 or 4, 1 or 6]"},
		{"more queries", []int{1, 1, 2 * Sq, 2 * Sk}, nil, "want [1 or 1, 1 or 2, 1 or 4, 1 or 6]"},
		{"more batch", []int{2, H, Sq, Sk}, nil, "want [1 or 1, 1 or 2, 1 or 4, 1 or 6]"},
		{"gpu", []int{1, 1, 1, Sk}, []string{"-device", "gpu"}, "-bias is not supported with -device gpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 1
			for _, d := range c.shape {
				n *= d
			}
			bias := atWriteF32(t, p(c.name+".npy"), atRand(rng, n), c.shape...)
			args := append([]string{"attn", "-q", x, "-k", kv, "-v", kv, "-bias", bias, "-o", p("out")}, c.extra...)
			code, _, stderr := atRun(args...)
			if code == 0 || !strings.Contains(stderr, c.want) || (c.name != "gpu" && !strings.Contains(stderr, bias)) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit status %d, stderr %q: want one line with %q naming the file", code, stderr, c.want)
			}
		})
	}
}
