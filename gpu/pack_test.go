package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// GQA decode shapes packed into one query block per KV head (Sq 1, 2, 4;
// groups 2, 4, 8; causal and not; split and not) on the interpreter: the
// packed forward passes the same-type rule against the float64 reference,
// launches one block per KV head, and gives the same bits as the unpacked
// one (Options.NoPackGQA): each row's arithmetic is the same, only the rows
// that share a block differ.
func TestPackGQASim(t *testing.T) {
	dims := []int{64, 128}
	sqs, groups := []int{1, 2, 4}, []int{2, 4, 8}
	if raceEnabled || testing.Short() {
		dims, sqs, groups = dims[:1], []int{1, 4}, []int{2, 8}
	}
	for _, dim := range dims {
		for _, sq := range sqs {
			for _, group := range groups {
				for _, causal := range []bool{false, true} {
					for _, splits := range []int{1, 2} {
						c := gpuCase{name: "packed", batch: 2, sq: sq, sk: 150 + 37*sq, h: 2 * group, hk: 2, dim: dim, causal: causal, noBwd: true, splits: splits}
						t.Run(fmt.Sprintf("d%d/sq%d/group%d/causal=%v/splits=%d", dim, sq, group, causal, splits), func(t *testing.T) {
							checkPacked(t, c)
						})
					}
				}
			}
		}
	}
}

// checkPacked runs case c packed and unpacked on fresh interpreter devices
// and checks the packed launches, the rule and the packed run's bits.
func checkPacked(t *testing.T, c gpuCase) {
	t.Helper()
	d := newSimDevice()
	defer d.Close()
	for _, err := range c.check(d, BF16, 11) {
		t.Error(err)
	}
	log := d.ctx.backend.(*sim).log
	checkForwardLaunches(t, log, c, BF16, c.splits)
	if c.splits == 1 {
		x, y, z := tile.Grid(c.h/c.hk*c.sq, tile.FwdConfig(c.dim).Br(), c.hk, c.batch)
		if g := log[0].grid; g != [3]int{x, y, z} || y != c.hk {
			t.Errorf("forward grid %v, want %v: one block per KV head", g, [3]int{x, y, z})
		}
	}
	rng := rand.New(rand.NewPCG(uint64(c.sq), uint64(c.h)))
	q := flashattn.Dense(randRounded(rng, BF16, c.batch*c.sq*c.h*c.dim, 1), c.batch, c.sq, c.h, c.dim)
	k := flashattn.Dense(randRounded(rng, BF16, c.batch*c.sk*c.hk*c.dim, 1), c.batch, c.sk, c.hk, c.dim)
	v := flashattn.Dense(randRounded(rng, BF16, c.batch*c.sk*c.hk*c.dim, 1), c.batch, c.sk, c.hk, c.dim)
	opts := &Options{Options: flashattn.Options{Causal: c.causal}, NumSplits: c.splits}
	o, l, _, err := simForward(q, k, v, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	unpacked := *opts
	unpacked.NoPackGQA = true
	o2, l2, _, err := simForward(q, k, v, &unpacked, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{sameBits("O", "packed", "unpacked", o, o2), sameBits("LSE", "packed", "unpacked", l, l2)} {
		if e != nil {
			t.Error(e)
		}
	}
}

// Packed, each KV head's K/V tiles are copied once for its whole group of
// query heads: the cp.async executed for 256 more keys (K and V, D/8
// 16-byte chunks per key row, per KV head) are the group factor fewer than
// unpacked, where every query head's block copies them.
func TestPackGQATrafficSim(t *testing.T) {
	const dim, hk, base, extra = 64, 2, 128, 256
	for _, group := range []int{2, 4, 8} {
		for _, splits := range []int{1, 2} {
			t.Run(fmt.Sprintf("group%d/splits=%d", group, splits), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(group), 5))
				h := group * hk
				q := flashattn.Dense(randRounded(rng, BF16, h*dim, 1), 1, 1, h, dim)
				var copies [2][2]int64 // [packed, unpacked][base, base+extra keys]
				for i, keys := range []int{base, base + extra} {
					k := flashattn.Dense(randRounded(rng, BF16, keys*hk*dim, 1), 1, keys, hk, dim)
					v := flashattn.Dense(randRounded(rng, BF16, keys*hk*dim, 1), 1, keys, hk, dim)
					for j, noPack := range []bool{false, true} {
						_, _, counts, err := simForward(q, k, v, &Options{NumSplits: splits, NoPackGQA: noPack}, nil)
						if err != nil {
							t.Fatal(err)
						}
						copies[j][i] = counts["cp.async.cg.shared.global"]
					}
				}
				want := int64(2 * extra * dim / 8 * hk) // K and V rows of the extra keys, once per KV head
				packed, unpacked := copies[0][1]-copies[0][0], copies[1][1]-copies[1][0]
				if packed != want || unpacked != int64(group)*want {
					t.Errorf("K/V 16-byte copies for %d more keys: packed %d, unpacked %d; want %d and %d (once per KV head, once per query head)", extra, packed, unpacked, want, int64(group)*want)
				}
			})
		}
	}
}

// Packed varlen decode: sequences of 3, 1, 0 and 1 query rows packed with
// the longest (3) as the head stride, so that the shorter ones leave empty
// rows (which must write nothing: the last sequence's would land past its
// end), causal, unsplit and split, against the float64 reference; the
// launches have one block per KV head.
func TestPackGQAVarLenSim(t *testing.T) {
	for _, splits := range []int{1, 2} {
		c := gpuCase{name: "varlen", h: 8, hk: 2, dim: 64, causal: true, noBwd: true, splits: splits,
			cuQ: []int32{0, 3, 4, 4, 5}, cuK: []int32{0, 100, 300, 301, 500}}
		t.Run(fmt.Sprintf("splits=%d", splits), func(t *testing.T) {
			d := newSimDevice()
			defer d.Close()
			for _, err := range c.check(d, BF16, 13) {
				t.Error(err)
			}
			log := d.ctx.backend.(*sim).log
			checkForwardLaunches(t, log, c, BF16, splits)
			if g := log[0].grid; g[1] != c.hk {
				t.Errorf("forward grid %v: %d heads, want %d (one block per KV head)", g, g[1], c.hk)
			}
		})
	}
}
