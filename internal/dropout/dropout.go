// Package dropout implements the counter-based dropout mask used by flashattn.
//
// The mask is a pure function of (seed, b, h, i, j): element (b, h, i, j) of the
// attention probability matrix is dropped iff
//
//	word < t, where
//	out     = Philox4x32-10(ctr, key)
//	ctr     = {uint32(j>>2), uint32(i), uint32(h), uint32(b)}
//	key     = {uint32(seed), uint32(seed>>32)}
//	word    = out[j&3]
//	t       = uint32(p * 2^32) (saturating)
//
// Forward, backward and repeated calls therefore agree bit for bit, whatever
// the blocking or the order in which elements are visited.
package dropout

import (
	"math/bits"

	"github.com/flashattn/flashattn/internal/kernel"
)

// Philox4x32 is the Philox-4x32-10 block function of Salmon et al. (2011), as
// in Random123, cuRAND and PyTorch: ten rounds with multipliers 0xD2511F53 and
// 0xCD9E8D57 and Weyl key increments 0x9E3779B9 and 0xBB67AE85.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	return kernel.Philox4x32(ctr, key)
}

// Mask is a dropout mask with drop probability p and a 64-bit seed. The zero
// value keeps everything (p = 0, seed 0). A Mask is a small value type, safe
// for concurrent use.
type Mask struct {
	key       [2]uint32
	threshold uint32
	p         float32
	scale     float32
}

// NewMask returns the mask for seed and drop probability p, which must lie in
// [0, 1); NewMask panics otherwise. The threshold is uint32(p * 2^32),
// saturating at 2^32-1.
func NewMask(seed uint64, p float32) Mask {
	if !(p >= 0 && p < 1) {
		panic("dropout: probability must be in [0, 1)")
	}
	t := float64(p) * (1 << 32)
	var th uint32
	if t >= (1<<32)-1 {
		th = 1<<32 - 1
	} else {
		th = uint32(t)
	}
	return Mask{
		key:       [2]uint32{uint32(seed), uint32(seed >> 32)},
		threshold: th,
		p:         p,
		scale:     1 / (1 - p),
	}
}

// P returns the drop probability.
func (m Mask) P() float32 { return m.p }

// Scale returns 1/(1-p), the factor applied to kept elements. For the zero
// Mask it returns 1.
func (m Mask) Scale() float32 {
	if m.scale == 0 {
		return 1
	}
	return m.scale
}

// Threshold returns t: element words below t are dropped.
func (m Mask) Threshold() uint32 { return m.threshold }

// Keep reports whether element (b, h, i, j) is kept.
func (m Mask) Keep(b, h, i, j int) bool {
	if m.threshold == 0 {
		return true
	}
	out := Philox4x32([4]uint32{uint32(j >> 2), uint32(i), uint32(h), uint32(b)}, m.key)
	return out[j&3] >= m.threshold
}

// ApplyRow applies the mask to row, which holds elements (b, h, i, j0+t) for
// t in [0, len(row)): kept elements are multiplied by Scale(), dropped ones
// are set to 0. It calls Philox4x32 once per aligned group of four columns and
// does not allocate.
func (m Mask) ApplyRow(row []float32, b, h, i, j0 int) {
	if m.threshold == 0 {
		return
	}
	s := m.Scale()
	th := m.threshold
	ctr := [4]uint32{0, uint32(i), uint32(h), uint32(b)}
	n := len(row)
	t := 0
	var words [32]uint32
	for t < n {
		j := j0 + t
		ctr[0] = uint32(j >> 2)
		if j&3 == 0 && n-t >= len(words) {
			// 32 columns: eight consecutive counters at once.
			kernel.Philox8(&words, ctr[0], ctr[1], ctr[2], ctr[3], m.key[0], m.key[1])
			r := row[t : t+len(words)]
			for c, w := range words {
				r[c] *= keepFactor(w, th, s)
			}
			t += len(words)
			continue
		}
		out := Philox4x32(ctr, m.key)
		// Columns j .. end of this group of four (or of the row).
		for lane := j & 3; lane < 4 && t < n; lane++ {
			row[t] *= keepFactor(out[lane], th, s)
			t++
		}
	}
}

// keepFactor is s if word w keeps its element (w >= th), else 0, without a
// branch: dropping is random, so a branch would often be mispredicted.
func keepFactor(w, th uint32, s float32) float32 {
	_, borrow := bits.Sub32(w, th, 0)
	return s * float32(1-borrow)
}
