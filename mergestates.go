package flashattn

import (
	"github.com/flashattn/flashattn/internal/kernel"
)

// MergeStates combines partial attention results over disjoint sets of keys
// into the exact result over their union: for every query row,
//
//	LSE = log Σ_s exp(LSE_s),   O = Σ_s exp(LSE_s − LSE)·O_s
//
// the building block of split-K decoding, of sequence (ring) parallelism
// across machines, and of prefix caching. parts[s] is the output O_s
// [batch, seq, heads, dim] of the same queries against the s-th key set
// and lses[s] its LSE [batch, heads, seq] (with VarLen packing, Batch 1:
// [heads, total]) — natural logarithms, as Forward returns them; a base-2
// LSE (flashinfer's) converts by multiplying by ln 2. A part whose row saw
// no key (LSE −Inf) contributes nothing; a row no part saw gets O = 0 and
// LSE = −Inf; NaN propagates. The weights and sums are done in float64; the
// weights by the same routine that merges Forward's own key splits.
//
// out and lse (which may be nil) receive the result; out may be the very
// same view as one of the parts and lse the very same slice as one of lses
// (merging in place). Any element types work.
func MergeStates(out Tensor, lse []float32, parts []Tensor, lses [][]float32) error {
	if len(parts) == 0 || len(parts) != len(lses) {
		return argErr("parts", "MergeStates needs as many parts as LSE slices, at least one (have %d and %d)", len(parts), len(lses))
	}
	ov, err := out.check("out", true, -1, -1, -1, -1)
	if err != nil {
		return err
	}
	if ov.dt.cacheOnly() {
		return argErr("out", "out cannot be %v (a cache format)", ov.dt)
	}
	B, S, H, D := out.Batch, out.Seq, out.Heads, out.Dim
	n := B * H * S
	pv := make([]view, len(parts))
	for i, t := range parts {
		if pv[i], err = t.check("parts", false, B, S, H, D); err != nil {
			return err
		}
		if len(lses[i]) < n {
			return argErr("lses", "lses[%d] has %d elements, want %d (batch × heads × seq)", i, len(lses[i]), n)
		}
		if overlaps(viewRegion(ov), viewRegion(pv[i])) && !sameView(ov, pv[i]) {
			return argErr("out", "out shares memory with parts[%d] without being the same view", i)
		}
	}
	if lse != nil && len(lse) < n {
		return argErr("lse", "lse has %d elements, want %d", len(lse), n)
	}
	if err := checkMergeMemory(ov, lse, pv, lses, n); err != nil {
		return err
	}
	kern := kernel.Active().Impl
	var lm lseMerge
	lm.reset(len(parts), D)
	rows := make([]float32, len(parts)*D)
	row := make([]float32, D)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for s := 0; s < S; s++ {
				li := (b*H+h)*S + s
				for p, v := range pv {
					lm.a[p], lm.l[p] = float64(lses[p][li]), 1
					lm.o[p] = rows[p*D : (p+1)*D]
					v.rowTo(lm.o[p], b, s, h, Float32, &kern)
				}
				res := lm.row(row)
				ov.storeRow(row, b, s, h, &kern)
				if lse != nil {
					lse[li] = res
				}
			}
		}
	}
	return nil
}

// checkMergeMemory refuses outputs that share memory with what MergeStates
// still reads: out with any LSE slice; lse with out, with a part, or with
// an LSE slice other than itself (the very same slice merges in place).
func checkMergeMemory(ov view, lse []float32, pv []view, lses [][]float32, n int) error {
	outR := viewRegion(ov)
	var lseR region
	if lse != nil {
		lseR = sliceRegion(lse[:n])
		if overlaps(lseR, outR) {
			return argErr("lse", "lse shares memory with out")
		}
	}
	for i, v := range pv {
		if lse != nil && overlaps(lseR, viewRegion(v)) {
			return argErr("lse", "lse shares memory with parts[%d]", i)
		}
	}
	for i, l := range lses {
		r := sliceRegion(l[:n])
		if overlaps(outR, r) {
			return argErr("out", "out shares memory with lses[%d]", i)
		}
		same := lse != nil && len(l) > 0 && &l[0] == &lse[0]
		if lse != nil && !same && overlaps(lseR, r) {
			return argErr("lse", "lse shares memory with lses[%d] without being the same slice", i)
		}
	}
	return nil
}
