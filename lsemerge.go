package flashattn

import (
	"math"

	"github.com/flashattn/flashattn/internal/kernel"
)

// lseMerge is the one merge of partial attention results over disjoint key
// sets, used by the forward's key splits (merge.go) and by MergeStates. Part
// s of a query row has a log-weight a_s (a split's running max, or a
// result's LSE), a weight l_s (a split's running sum; 1 for a normalised
// result) and an output row o_s. With M = max_s a_s and w_s = e^{a_s−M},
//
//	O = Σ_s (w_s/L)·o_s,   L = Σ_s w_s·l_s,   LSE = M + log L
//
// The weights are formed in float64 in part order, so the result does not
// depend on which worker merges; the sum of the rows is float64 (row) or,
// for parts at a fixed stride, one vector product (rowStrided). A part
// with a_s = −Inf adds nothing; a row that no part saw gets O = 0 and
// LSE = −Inf; a NaN log-weight makes the row NaN. A part whose weight
// underflows to 0 is skipped.
type lseMerge struct {
	a, l    []float64   // per part
	o       [][]float32 // per part: its output row (row)
	w       []float64   // per part: its weight w_s/L (weights)
	w32     []float32   // the weights as float32 (rowStrided)
	acc     []float64   // scratch: the sum of one row
	sink    float64     // with hasSink: one more part, a_s = sink, l_s = 1, o_s = 0
	hasSink bool
}

// reset prepares m for rows of d elements from parts parts; the caller
// then sets a[s], l[s] (and o[s] for row) for each row.
func (m *lseMerge) reset(parts, d int) {
	grow(&m.a, parts)
	grow(&m.l, parts)
	grow(&m.o, parts)
	grow(&m.w, parts)
	grow(&m.w32, parts)
	grow(&m.acc, d)
}

// weights sets w[s] = w_s/L (0 for a part that adds nothing) and returns
// the row's LSE, and false when no part saw a key (O = 0, LSE = −Inf, or
// the sink's logit).
func (m *lseMerge) weights() (lse float32, seen bool) {
	mx := math.Inf(-1)
	for _, a := range m.a {
		mx = max(mx, a) // NaN wins
	}
	if m.hasSink {
		mx = max(mx, m.sink)
	}
	if math.IsInf(mx, -1) {
		return negInf, false
	}
	var sum float64
	if m.hasSink {
		sum = math.Exp(m.sink - mx)
	}
	for s, a := range m.a {
		m.w[s] = 0
		if math.IsInf(a, -1) {
			continue
		}
		w := math.Exp(a - mx)
		if w == 0 {
			continue // underflowed: adds nothing (not even an Inf of its row)
		}
		m.w[s] = w
		sum += w * m.l[s]
	}
	inv := 1 / sum
	for s := range m.w {
		m.w[s] *= inv
	}
	return float32(mx + math.Log(sum)), true
}

// row merges the parts o[s] into dst (d elements) in float64 and returns
// the row's LSE.
func (m *lseMerge) row(dst []float32) float32 {
	lse, seen := m.weights()
	if !seen {
		clear(dst)
		return lse
	}
	acc := m.acc[:len(dst)]
	clear(acc)
	for s, w := range m.w {
		if w == 0 {
			continue
		}
		for c, x := range m.o[s][:len(dst)] {
			acc[c] += w * float64(x)
		}
	}
	for c, x := range acc {
		dst[c] = float32(x)
	}
	return lse
}

// rowStrided merges parts that lie at a fixed stride in one buffer — part
// s's row is parts[s*stride:], n elements (a multiple of kernel.W) — into
// dst (n elements) with one product of the weight row and the parts, and
// returns the row's LSE. Parts after the last one with a_s > −Inf are not
// read at all (their rows may hold anything).
func (m *lseMerge) rowStrided(kern *kernel.Impl, dst, parts []float32, stride, n int) float32 {
	lse, seen := m.weights()
	k := 0
	for s, a := range m.a {
		m.w32[s] = float32(m.w[s])
		if seen && !math.IsInf(a, -1) {
			k = s + 1
		}
	}
	// MulAB stores the sums (dst = 0 where k = 0), as MulAddAB adds them
	// to a cleared dst.
	kern.MulAB(dst, n, m.w32, k, parts, stride, 1, n, k)
	return lse
}
