package flashattn

import "math"

// lseMerge is the one merge of partial attention results over disjoint key
// sets, used by the forward's key splits (merge.go) and by MergeStates. Part
// s of a query row has a log-weight a_s (a split's running max, or a
// result's LSE), a weight l_s (a split's running sum; 1 for a normalised
// result) and an output row o_s. With M = max_s a_s and w_s = e^{a_s−M},
//
//	O = Σ_s w_s·o_s / Σ_s w_s·l_s,   LSE = M + log Σ_s w_s·l_s
//
// summed in float64 in part order, so the result does not depend on which
// worker merges. A part with a_s = −Inf adds nothing; a row that no part
// saw gets O = 0 and LSE = −Inf; a NaN log-weight makes the row NaN. A
// part whose weight underflows to 0 is skipped.
type lseMerge struct {
	a, l    []float64   // per part
	o       [][]float32 // per part: its output row
	acc     []float64   // scratch: the sum of one row
	sink    float64     // with hasSink: one more part, a_s = sink, l_s = 1, o_s = 0
	hasSink bool
}

// reset prepares m for rows of d elements from parts parts; the caller
// then sets a[s], l[s] and o[s] for each row.
func (m *lseMerge) reset(parts, d int) {
	grow(&m.a, parts)
	grow(&m.l, parts)
	grow(&m.o, parts)
	grow(&m.acc, d)
}

// row merges the parts into dst (d elements) and returns the row's LSE.
func (m *lseMerge) row(dst []float32) float32 {
	mx := math.Inf(-1)
	for _, a := range m.a {
		mx = max(mx, a) // NaN wins
	}
	if m.hasSink {
		mx = max(mx, m.sink)
	}
	acc := m.acc[:len(dst)]
	clear(acc)
	if math.IsInf(mx, -1) {
		clear(dst)
		return negInf
	}
	var sum float64
	if m.hasSink {
		sum = math.Exp(m.sink - mx)
	}
	for s, a := range m.a {
		if math.IsInf(a, -1) {
			continue
		}
		w := math.Exp(a - mx)
		if w == 0 {
			continue // underflowed: adds nothing (not even an Inf of its row)
		}
		sum += w * m.l[s]
		for c, x := range m.o[s][:len(dst)] {
			acc[c] += w * float64(x)
		}
	}
	inv := 1 / sum
	for c, x := range acc {
		dst[c] = float32(x * inv)
	}
	return float32(mx + math.Log(sum))
}
