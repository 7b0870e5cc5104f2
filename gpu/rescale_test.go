package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// rescaleBranch is the forward kernels' warp-uniform branch around the O
// rescale; deleting it makes every key tile rescale O, as before the skip.
var rescaleBranch = regexp.MustCompile(`\t@%p\d+ bra\.uni \$L_rescaled_\d+;\n`)

// sameBits reports the first element where a and b (the results "with"
// and "without" something) differ in any bit.
func sameBits(name, with, without string, a, b []float32) error {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("%s[%d]: %v %s, %v %s", name, i, a[i], with, b[i], without)
		}
	}
	return nil
}

// The forward kernel rescales O only on the key tiles where some row of
// the warp got a new max, and skipping changes no bit of O or LSE. With
// every row's max in key 0, only the first of four key tiles rescales; with
// keys that grow along the sequence, every tile does: the difference in
// executed mul.f32 is the rescale of three tiles (MT·D/2 per thread and
// tile). Random causal inputs, split and unsplit, give the same bits with
// and without the branch.
func TestRescaleSkipSim(t *testing.T) {
	dims := tile.HeadDims
	if raceEnabled || testing.Short() {
		dims = []int{128}
	}
	unsplit := &Options{NumSplits: 1}
	for _, dim := range dims {
		c := tile.FwdConfig(dim)
		sq, sk := c.Br(), 4*c.Bc
		q, kSettled, kGrow := make([]float32, sq*dim), make([]float32, sk*dim), make([]float32, sk*dim)
		rng := rand.New(rand.NewPCG(uint64(dim), 7))
		for i := range q {
			q[i] = BF16.Round(0.5 + 0.25*float32(i%3))
		}
		for j := range sk {
			for x := range dim {
				kGrow[j*dim+x] = BF16.Round(1 + float32(j)/8)
				kSettled[j*dim+x] = BF16.Round(float32(rng.NormFloat64() * 0.01))
				if j == 0 {
					kSettled[j*dim+x] = 1 // every row's max: key 0
				}
			}
		}
		v := randRounded(rng, BF16, sk*dim, 1)
		Q, V := flashattn.Dense(q, 1, sq, 1, dim), flashattn.Dense(v, 1, sk, 1, dim)
		t.Run(fmt.Sprintf("d%d", dim), func(t *testing.T) {
			o, l, cs, err := simForward(Q, flashattn.Dense(kSettled, 1, sk, 1, dim), V, unsplit, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _, cg, err := simForward(Q, flashattn.Dense(kGrow, 1, sk, 1, dim), V, unsplit, nil)
			if err != nil {
				t.Fatal(err)
			}
			settled, grow := cs["mul.f32"], cg["mul.f32"]
			want := int64(3 * c.Threads() * c.MT * dim / 2)
			if grow-settled != want {
				t.Errorf("mul.f32 executed: %d with keys that grow, %d with the max in key 0: %d fewer, want %d (three tiles' O rescale skipped)", grow, settled, grow-settled, want)
			}
			o2, l2, _, err := simForward(Q, flashattn.Dense(kSettled, 1, sk, 1, dim), V, unsplit, rescaleBranch)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range []error{sameBits("O", "with the skip", "without", o, o2), sameBits("LSE", "with the skip", "without", l, l2)} {
				if e != nil {
					t.Error(e)
				}
			}
		})
		for _, splits := range []int{1, 2} {
			t.Run(fmt.Sprintf("d%d/random-causal/splits=%d", dim, splits), func(t *testing.T) {
				const rows, keys = 150, 333
				opts := &Options{Options: flashattn.Options{Causal: true}, NumSplits: splits}
				q := flashattn.Dense(randRounded(rng, BF16, rows*2*dim, 1), 1, rows, 2, dim)
				k := flashattn.Dense(randRounded(rng, BF16, keys*dim, 1), 1, keys, 1, dim)
				v := flashattn.Dense(randRounded(rng, BF16, keys*dim, 1), 1, keys, 1, dim)
				o, l, _, err := simForward(q, k, v, opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				o2, l2, _, err := simForward(q, k, v, opts, rescaleBranch)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range []error{sameBits("O", "with the skip", "without", o, o2), sameBits("LSE", "with the skip", "without", l, l2)} {
					if e != nil {
						t.Error(e)
					}
				}
			})
		}
	}
}
