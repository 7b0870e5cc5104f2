package gpu

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/ptxsim"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// decodeCase is a split-KV case: the gpuCase and the number of splits the
// forward call must use (1: the ordinary kernel).
type decodeCase struct {
	gpuCase
	want int
}

// decodeCases are decode shapes (few query rows, up to a few thousand
// keys) with every feature the split kernels meet: causal, window and
// softcap masks, GQA/MQA, varlen with empty sequences and SeqUsedK, rows
// that see no key in some splits (the window) or in any (causal with more
// queries than keys), splits left empty by short sequences, and the
// forced count clamped to the key tiles.
var decodeCases = []decodeCase{
	{gpuCase{name: "sq1", batch: 1, sq: 1, sk: 2000, h: 2, hk: 2, dim: 64, noBwd: true, splits: 5}, 5},
	{gpuCase{name: "sq1-mqa-d128", batch: 2, sq: 1, sk: 1000, h: 4, hk: 1, dim: 128, noBwd: true, splits: 3}, 3},
	{gpuCase{name: "sq5-causal-gqa", batch: 2, sq: 5, sk: 1100, h: 4, hk: 2, dim: 128, causal: true, noBwd: true, splits: 4}, 4},
	{gpuCase{name: "sq16-window", batch: 1, sq: 16, sk: 900, h: 2, hk: 2, dim: 64, window: &flashattn.Window{Left: 40, Right: 0}, noBwd: true, splits: 2}, 2},
	{gpuCase{name: "sq3-softcap-d256", batch: 1, sq: 3, sk: 500, h: 2, hk: 1, dim: 256, softcap: 4, noBwd: true, splits: 3}, 3},
	{gpuCase{name: "varlen-causal", h: 4, hk: 2, dim: 128, causal: true, noBwd: true, splits: 6,
		cuQ: []int32{0, 1, 5, 5, 16}, cuK: []int32{0, 300, 1000, 1010, 1600}, used: []int32{300, 650, 0, 590}}, 6},
	{gpuCase{name: "causal-sq>sk", batch: 1, sq: 130, sk: 100, h: 2, hk: 2, dim: 64, causal: true, noBwd: true, splits: 2}, 2},
	{gpuCase{name: "clamped-to-tiles", batch: 1, sq: 2, sk: 100, h: 1, hk: 1, dim: 64, noBwd: true, splits: 9}, 2},
	{gpuCase{name: "with-backward", batch: 1, sq: 8, sk: 300, h: 2, hk: 1, dim: 64, causal: true, splits: 3}, 3},
}

// The split-KV forward and its combine on the interpreter, against the
// float64 reference under the same-type rule; the calls launch the split
// and combine kernels with the expected grids.
func TestSplitSim(t *testing.T) {
	cases, types := decodeCases, []DType{BF16, F16}
	if raceEnabled || testing.Short() {
		cases, types = []decodeCase{decodeCases[3], decodeCases[5]}, types[:1]
	}
	for i, c := range cases {
		for _, dt := range types {
			t.Run(fmt.Sprintf("%s/%v", c.name, dt), func(t *testing.T) {
				d := newSimDevice()
				defer d.Close()
				for _, err := range c.check(d, dt, uint64(100+i)) {
					t.Error(err)
				}
				checkForwardLaunches(t, d.ctx.backend.(*sim).log, c.gpuCase, dt, c.want)
			})
		}
	}
}

// checkForwardLaunches checks the first forward call's kernels in log: the
// split and combine kernels with their grids for want > 1 splits, else the
// ordinary forward kernel.
func checkForwardLaunches(t *testing.T, log []launch, c gpuCase, dt DType, want int) {
	t.Helper()
	maxSq, batch := c.sq, c.batch
	if c.cuQ != nil {
		maxSq, batch = longest(c.cuQ), len(c.cuQ)-1
	}
	n := ptxName(dt)
	if want <= 1 {
		if len(log) == 0 || log[0].name != tile.FwdConfig(c.dim).Name(n) {
			t.Errorf("launches %v, want %s first", log, tile.FwdConfig(c.dim).Name(n))
		}
		return
	}
	sc := tile.FwdSplitConfig(c.dim)
	rows, heads := maxSq, c.h
	if g := c.h / c.hk; g > 1 && !c.noPack && g*maxSq <= sc.Br() { // GQA packed: one block per KV head
		rows, heads = g*maxSq, c.hk
	}
	x, y, z := tile.SplitGrid(rows, sc.Br(), heads, batch, want)
	wantLog := []launch{
		{sc.Name(n), [3]int{x, y, z}},
		{tile.CombineName(n, c.dim), [3]int{ceilDiv(maxSq, tile.CombineRows), c.h, batch}},
	}
	if len(log) < 2 || log[0] != wantLog[0] || log[1] != wantLog[1] {
		t.Errorf("launches %v, want %v first", log[:min(2, len(log))], wantLog)
	}
}

// With Options.NumSplits 0 the simulated device, described as an H100 (132
// SMs), splits a decode shape as tile.NumSplits says, and the result
// passes the same-type rule.
func TestSplitHeuristicSim(t *testing.T) {
	d := newDevice(&sim{m: ptxsim.New()}, Info{Name: "ptxsim-h100", Major: 9, SMs: 132, MaxSharedPerBlock: 227 << 10})
	defer d.Close()
	c := gpuCase{name: "auto", batch: 1, sq: 1, sk: 1000, h: 2, hk: 2, dim: 64, noBwd: true}
	for _, err := range c.check(d, BF16, 7) {
		t.Error(err)
	}
	// 2 blocks, 396 slots, 16 key tiles: the best fill is 16 splits, and
	// 14 and 15 give 2 tiles per split as 13 does.
	checkForwardLaunches(t, d.ctx.backend.(*sim).log, c, BF16, 16)
}

// The host rule: the ordinary grid when it fills the device, flash-attn's
// efficiency rule otherwise, the forced counts clamped; deterministic.
func TestSplitsRule(t *testing.T) {
	cases := []struct {
		name                      string
		batch, sq, sk, h, hk, dim int
		causal                    bool
		window                    *flashattn.Window
		splits, sms, want         int
		cuQ, cuK                  []int32
		noPack                    bool
	}{
		// The README's example: B=1, H=32, Hk=8, Sq=1, Sk=32k, d128 on an
		// H100, each KV head's 4 query heads packed into one block: 8
		// blocks, 264 slots, 512 tiles; 33 splits fill their last wave, and
		// 29 (232 blocks, 87.9%; 28 would fill 84.8%) is the fewest within
		// 85%.
		{name: "llama-decode-h100", batch: 1, sq: 1, sk: 32768, h: 32, hk: 8, dim: 128, sms: 132, want: 29},
		{name: "same-on-a100", batch: 1, sq: 1, sk: 32768, h: 32, hk: 8, dim: 128, sms: 108, want: 23},
		// Unpacked, 32 blocks: 74 splits fill 99.7% of their last wave,
		// and 7 (224 blocks, 84.8%) is the fewest within 85%.
		{name: "llama-decode-h100-unpacked", batch: 1, sq: 1, sk: 32768, h: 32, hk: 8, dim: 128, sms: 132, want: 7, noPack: true},
		{name: "unpacked-on-a100", batch: 1, sq: 1, sk: 32768, h: 32, hk: 8, dim: 128, sms: 108, want: 6, noPack: true},
		// 32 blocks, 396 slots, 64 tiles: the best eligible fill is 88.9%
		// (11 or 22 splits; 12 and 23 would fill more but give as many
		// tiles per split as 11 and 22), and 10 (80.8%) is the fewest
		// within 85% of it.
		{name: "d64-batch4", batch: 4, sq: 1, sk: 4096, h: 8, hk: 8, dim: 64, sms: 132, want: 10},
		{name: "prefill-fills-the-gpu", batch: 4, sq: 4096, sk: 4096, h: 16, hk: 16, dim: 128, sms: 132, want: 1},
		{name: "batch-fills-the-gpu", batch: 64, sq: 1, sk: 4096, h: 32, hk: 8, dim: 128, sms: 132, want: 1},
		{name: "one-key-tile", batch: 1, sq: 1, sk: 64, h: 2, hk: 2, dim: 64, sms: 132, want: 1},
		{name: "window-limits-tiles", batch: 1, sq: 1, sk: 32768, h: 32, hk: 8, dim: 128, window: &flashattn.Window{Left: 200, Right: 0}, sms: 132, want: 4},
		{name: "forced", batch: 64, sq: 1, sk: 4096, h: 32, hk: 8, dim: 128, splits: 7, sms: 132, want: 7},
		{name: "forced-clamped", batch: 1, sq: 1, sk: 100, h: 1, hk: 1, dim: 64, splits: 9, sms: 132, want: 2},
		{name: "forced-off", batch: 1, sq: 1, sk: 32768, h: 32, hk: 8, dim: 128, splits: 1, sms: 132, want: 1},
		{name: "varlen-longest", sq: 6, sk: 5000, h: 8, hk: 8, dim: 128, sms: 132, cuQ: []int32{0, 1, 2, 6}, cuK: []int32{0, 4000, 4100, 5000}, want: 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, sq, sk := c.batch, c.sq, c.sk
			o := flashattn.Options{Causal: c.causal, Window: c.window}
			if c.cuQ != nil {
				b, o.VarLen = 1, &flashattn.VarLen{CuSeqlensQ: c.cuQ, CuSeqlensK: c.cuK}
			}
			p, err := newProblem(flashattn.Shape{Batch: b, SeqQ: sq, SeqK: sk, Heads: c.h, KVHeads: c.hk, Dim: c.dim}, &Options{Options: o, NumSplits: c.splits, NoPackGQA: c.noPack})
			if err != nil {
				t.Fatal(err)
			}
			got := p.splits(c.sms)
			if got != c.want {
				t.Errorf("splits = %d, want %d", got, c.want)
			}
			for range 3 {
				if again := p.splits(c.sms); again != got {
					t.Fatalf("splits changed from %d to %d", got, again)
				}
			}
		})
	}
}

// Options.NumSplits outside [0, 128] is an *ArgError naming it, from
// ValidateShape and from the calls.
func TestSplitsValidation(t *testing.T) {
	s := flashattn.Shape{Batch: 1, SeqQ: 1, SeqK: 100, Heads: 1, Dim: 64}
	for _, n := range []int{-1, tile.MaxSplits + 1} {
		err := ValidateShape(s, &Options{NumSplits: n})
		var ae *flashattn.ArgError
		if !errors.As(err, &ae) || ae.Arg != "Options.NumSplits" || !strings.Contains(ae.Msg, "up to 128") {
			t.Errorf("NumSplits %d: %v", n, err)
		}
	}
	if err := ValidateShape(s, &Options{NumSplits: tile.MaxSplits}); err != nil {
		t.Errorf("NumSplits 128: %v", err)
	}
	d := newSimDevice()
	defer d.Close()
	x := flashattn.NewTensor(1, 1, 1, 64)
	if _, _, err := d.ForwardHost(BF16, x, x, x, &Options{NumSplits: -3}); err == nil || !strings.Contains(err.Error(), "Options.NumSplits") {
		t.Errorf("ForwardHost with NumSplits -3: %v", err)
	}
}

// A NaN in a query row gives NaN in that row's O and LSE through the
// combine too, and a row of another head stays finite.
func TestNaNRowSplitSim(t *testing.T) {
	q := make([]float32, 3*2*64)
	k := make([]float32, 300*64)
	for i := range k {
		k[i] = float32(i%7) * 0.1
	}
	q[(1*2+1)*64+5] = float32(math.NaN()) // row 1, head 1
	d := newSimDevice()
	defer d.Close()
	out, lse, err := d.ForwardHost(BF16, flashattn.Dense(q, 1, 3, 2, 64), flashattn.Dense(k, 1, 300, 1, 64), flashattn.Dense(k, 1, 300, 1, 64), &Options{NumSplits: 3})
	if err != nil {
		t.Fatal(err)
	}
	if l := d.ctx.backend.(*sim).log; len(l) < 2 || !strings.HasPrefix(l[1].name, "fwdcombine_") {
		t.Fatalf("launches %v: not split", l)
	}
	// LSE is [batch, heads, sq]: head 1, row 1 is element 4.
	if !math.IsNaN(float64(lse[4])) || !math.IsNaN(float64(out.Data[(1*2+1)*64])) || math.IsNaN(float64(lse[1])) || math.IsNaN(float64(out.Data[64])) {
		t.Errorf("LSE %v, O[1][1][0] = %v, O[0][1][0] = %v", lse, out.Data[(1*2+1)*64], out.Data[64])
	}
}
