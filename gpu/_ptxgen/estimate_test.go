package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// h100 is the model of one SM of an H100 SXM5 that the estimates use, in
// work per clock. These are assumptions, not measurements: the tensor rate
// of mma.sync is taken as 2/3 of the dense bf16 peak (989 TFLOP/s is one
// m16n8k16 per SM and clock, reached only by wgmma); shared memory moves
// 128 bytes per clock (ldmatrix.x4 and a warp's 16-byte cp.async: 512
// bytes, 4 clocks); four schedulers issue one warp instruction each; the
// special-function unit (ex2, lg2, rcp) does 16 lanes.
var h100 = struct {
	sms       int
	ghz       float64
	mmaClocks float64 // per mma.sync.m16n8k16
	smemBytes float64 // shared-memory bytes per clock
	issue     float64 // warp instructions per clock
	mufuLanes float64 // special-function lanes per clock
}{sms: 132, ghz: 1.755, mmaClocks: 1.5, smemBytes: 128, issue: 4, mufuLanes: 16}

// loopCost is the SM clocks one main-loop iteration of a block takes on
// each resource of the model.
type loopCost struct {
	tensor, smem, issue, mufu float64
}

// costOf prices a per-thread loop mix (countLoop) run by warps warps.
func costOf(m map[string]int, warps int) loopCost {
	w := float64(warps)
	return loopCost{
		tensor: w * float64(m["mma"]) * h100.mmaClocks,
		smem:   w * float64(512*(m["ldmatrix"]+m["copy"])+32*m["smem bytes"]) / h100.smemBytes,
		issue:  w * float64(m["total"]) / h100.issue,
		mufu:   w * 32 * float64(m["mufu"]) / h100.mufuLanes,
	}
}

// bound returns the clocks of the busiest resource (the model assumes the
// others overlap it) and its name.
func (c loopCost) bound() (float64, string) {
	t, by := c.tensor, "tensor"
	for _, r := range []struct {
		v    float64
		name string
	}{{c.smem, "smem"}, {c.issue, "issue"}, {c.mufu, "mufu"}} {
		if r.v > t {
			t, by = r.v, r.name
		}
	}
	return t, by
}

// iterFlops is the FLOPs of one main-loop iteration of a block of the
// attention kernel name at head dim d, from its tile configuration: the
// forward's two products (Q·Kᵀ, P·V), the dK/dV kernel's four (S, dP, dV,
// dK) and the atomic dQ, the dQ kernel's three (S, dP, dQ), each 2·rows·
// keys·D.
func iterFlops(name string, d int) int {
	switch {
	case strings.HasPrefix(name, "fwd_"):
		c := tile.FwdConfig(d)
		return 4 * c.Br() * c.Bc * d
	case strings.HasPrefix(name, "fwdsplit_"):
		c := tile.FwdSplitConfig(d)
		return 4 * c.Br() * c.Bc * d
	case strings.HasPrefix(name, "bwd_"):
		c := tile.BwdConfig(d)
		return 10 * c.Br * c.Bc() * d
	case strings.HasPrefix(name, "bwdkv_"):
		c := tile.BwdConfig(d)
		return 8 * c.Br * c.Bc() * d
	case strings.HasPrefix(name, "bwddq_"):
		c := tile.DQConfig(d)
		return 6 * c.Br() * c.Bc * d
	}
	return 0
}

// warpGemm is one warp's share of a product in a kernel's main loop: an
// m×n result over k, its A operand loaded from shared memory (aSmem) or
// already in registers; B always from shared memory.
type warpGemm struct {
	m, n, k int
	aSmem   bool
}

// fa2 describes flash-attn 2's sm_80 kernel of the same block shape (its
// kernel traits: block, warps and warp layout) as the products of one
// warp per main-loop iteration, and its measured bf16 TFLOP/s on an H100
// SXM5 for long sequences (the FA3 paper's FA2 figures): forward,
// causal forward, backward.
type fa2 struct {
	warps    int
	gemms    []warpGemm
	measured [][2]float64
	target   float64 // the estimate must be at least this share of flash-attn 2's (issue 28); 0: none
}

// fa2Kernels are the flash-attn 2 kernels the d128 estimates compare with.
//
// Forward: Flash_fwd_kernel_traits<128, 128, 64, 4>: 4 warps of 32 rows;
// S = Q·Kᵀ (32×64 over 128, Q reloaded from shared memory per tile),
// O += P·V (32×128 over 64, P in registers).
//
// Backward: Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2>: 64 queries ×
// 128 keys, 8 warps; S and dP as 2×4 warps of 32×32 over 128; dV += Pᵀ·dO
// and dK += dSᵀ·Q as 4×2 warps of 32 keys × 64 over 64 queries (Pᵀ, dSᵀ
// from shared memory); dQ = dS·K as 2×4 warps of 32 × 32 over 128 keys.
var fa2Kernels = map[string]fa2{
	"fwd_bf16_d128": {warps: 4, gemms: []warpGemm{{32, 64, 128, true}, {32, 128, 64, false}},
		measured: [][2]float64{{368, 370}, {319, 335}}, target: 0.9},
	"bwd_bf16_d128": {warps: 8, gemms: []warpGemm{{32, 32, 128, true}, {32, 32, 128, true}, {32, 64, 64, true}, {32, 64, 64, true}, {32, 32, 128, true}},
		measured: [][2]float64{{310, 322}}, target: 0.85},
}

// counts returns the mma and ldmatrix.x4 per warp and iteration of the
// products.
func (f fa2) counts() (mma, ldm int) {
	for _, g := range f.gemms {
		mma += g.m * g.n * g.k / (16 * 8 * 16)
		ldm += g.n / 16 * g.k / 16
		if g.aSmem {
			ldm += g.m / 16 * g.k / 16
		}
	}
	return mma, ldm
}

// mix returns flash-attn 2's per-thread loop mix as the model sees it:
// ours on the path that rescales O on every tile (flash-attn 2 always
// rescales), scaled to its mma count, with its ldmatrix count in place of
// ours. The rest of its instructions are assumed to be as many per mma as
// ours: its SASS is not counted here.
func (f fa2) mix(ours map[string]int) map[string]int {
	mma, ldm := f.counts()
	m := map[string]int{}
	for k, v := range ours {
		m[k] = v * mma / ours["mma"]
	}
	m["total"] += ldm - m["ldmatrix"]
	m["ldmatrix"] = ldm
	return m
}

var hdFile = regexp.MustCompile(`attn_bf16_d(\d+)\.ptx$`)

// TestEstimate logs the model's account of one main-loop iteration of
// every attention kernel (bf16; per block: mma, ldmatrix, bar.sync, ex2
// and the rest per warp, the clocks each resource of the h100 model needs,
// the busiest, and the TFLOP/s that resource allows), and the estimated
// TFLOP/s of the d128 kernels: flash-attn 2's measured figures times the
// ratio of its modelled clocks per FLOP to ours. The forward's range runs
// from the path that rescales O on every tile to the one that skips it on
// every tile. The estimates are an ESTIMATE: no GPU has run these kernels.
//
// It checks that the loop counts are the work of an iteration (mma ×
// 4096 FLOPs × warps = the FLOPs of its products), and that the d128
// forward's estimate is at least 0.9× flash-attn 2's (the goal of issue 28).
func TestEstimate(t *testing.T) {
	dir := os.Getenv("PTXDIR")
	if dir == "" {
		dir = "../ptx"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "attn_bf16_*.ptx"))
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "kernel\twarps\tmma\tldmatrix\tmma/ldm\tbar.sync\tex2\tissue\ttensor clk\tsmem clk\tissue clk\tmufu clk\tbound\tmodel TFLOP/s\t")
	est := map[string][2]float64{} // d128 kernel → estimated TFLOP/s (per FA2 figure: lo, hi)
	var notes []string
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := strconv.Atoi(hdFile.FindStringSubmatch(f)[1])
		always, skip := loopMixes(string(text), false), loopMixes(string(text), true)
		for i, k := range always {
			flops := iterFlops(k.name, d)
			if flops == 0 || k.mix == nil {
				continue
			}
			warps := tile.Threads(k.name, d) / tile.WarpThreads
			if got := k.mix["mma"] * 4096 * warps; got != flops {
				t.Errorf("%s: %d mma × 4096 × %d warps = %d FLOPs per iteration, its products are %d", k.name, k.mix["mma"], warps, got, flops)
			}
			for _, p := range []struct {
				m    map[string]int
				path string
			}{{k.mix, ""}, {skip[i].mix, " (no rescale)"}} {
				if p.path != "" && p.m["total"] == k.mix["total"] {
					continue
				}
				c := costOf(p.m, warps)
				clk, by := c.bound()
				ex2 := p.m["mufu"]
				fmt.Fprintf(w, "%s%s\t%d\t%d\t%d\t%.2f\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%.0f\t\n", k.name, p.path, warps,
					warps*p.m["mma"], warps*p.m["ldmatrix"], float64(p.m["mma"])/float64(max(1, p.m["ldmatrix"])), p.m["bar.sync"], warps*ex2, warps*p.m["total"],
					c.tensor, c.smem, c.issue, c.mufu, by, modelTFLOPs(flops, clk))
			}
			ref, ok := fa2Kernels[k.name]
			if !ok {
				continue
			}
			// Clocks per mma of the block: the iterations' work may differ.
			fmma, _ := ref.counts()
			fm := ref.mix(k.mix)
			fclk, fby := costOf(fm, ref.warps).bound()
			fclk /= float64(fmma * ref.warps)
			lo, _ := costOf(k.mix, warps).bound()
			hi, _ := costOf(skip[i].mix, warps).bound()
			lo, hi = lo/float64(k.mix["mma"]*warps), hi/float64(k.mix["mma"]*warps)
			if fclk/lo < ref.target {
				t.Errorf("%s: estimated at %.2f× flash-attn 2 (modelled clocks per mma %.2f, flash-attn 2's %.2f), the goal is %.2f×", k.name, fclk/lo, lo, fclk, ref.target)
			}
			for j, m := range ref.measured {
				r := [2]float64{fclk / lo, fclk / hi}
				name := k.name
				if j == 1 {
					name += " causal"
				}
				est[name] = [2]float64{m[0] * r[0], m[1] * r[1]}
				notes = append(notes, fmt.Sprintf("%s: flash-attn 2 %.0f–%.0f TFLOP/s measured; its loop as modelled: %d ldmatrix per warp, %.2f clocks per mma (%s-bound), ours %.2f–%.2f: ESTIMATE %.0f–%.0f TFLOP/s (%.2f–%.2f×)",
					name, m[0], m[1], fm["ldmatrix"], fclk, fby, lo, hi, m[0]*r[0], m[1]*r[1], r[0], r[1]))
			}
		}
	}
	w.Flush()
	if f, bw := est["fwd_bf16_d128"], est["bwd_bf16_d128"]; f[0] > 0 && bw[0] > 0 {
		// Forward and backward of one call: 1 + 2.5 times the forward's FLOPs.
		comb := func(i int) float64 { return 3.5 / (1/f[i] + 2.5/bw[i]) }
		notes = append(notes, fmt.Sprintf("fwd+bwd d128 (FLOPs 1 : 2.5): ESTIMATE %.0f–%.0f TFLOP/s (flash-attn 2 ≈325)", comb(0), comb(1)))
	}
	t.Logf("one main-loop iteration per block, bf16 (bar.sync: per thread); the h100 model (%d SMs at %.3f GHz): mma.sync %.1f clocks, %.0f shared-memory bytes, %.0f warp instructions and %.0f special-function lanes per clock:\n%s\n%s",
		h100.sms, h100.ghz, h100.mmaClocks, h100.smemBytes, h100.issue, h100.mufuLanes, b.String(), strings.Join(notes, "\n"))
}

// modelTFLOPs is the rate the model allows an iteration of flops FLOPs
// that takes clk clocks of an SM, on every SM.
func modelTFLOPs(flops int, clk float64) float64 {
	return float64(flops) / clk * float64(h100.sms) * h100.ghz * 1e9 / 1e12
}
