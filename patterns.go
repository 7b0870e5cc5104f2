package flashattn

import (
	"math/bits"
	"slices"
)

// patterns.go holds the built-in masks: element masks (Mask and
// BlockClassifier: PrefixLM, Documents, LocalGlobal) and block-sparse
// layouts (Butterfly, Fixed, BigBird). Causal and sliding-window masks are
// Options.Causal and Options.Window.

// PrefixLM returns the prefix-LM mask: the first prefix keys are visible to
// every query (bidirectional attention over the prompt), the others
// causally, key kv visible to row q iff kv < prefix or kv <= q (positions
// from the start of the sequence, so meant for equal query and key
// lengths). With one length it applies to every batch element; with
// several, prefixes[b] is batch element b's; batch elements past the last
// length take the last one. A length ≤ 0 leaves no bidirectional prefix
// (the mask is then causal), and with no length at all every row is causal.
func PrefixLM(prefixes ...int) Mask {
	return prefixLM(slices.Clone(prefixes))
}

type prefixLM []int

func (p prefixLM) prefix(b int) int {
	if len(p) == 0 {
		return 0
	}
	return p[min(b, len(p)-1)]
}

func (p prefixLM) Hide(b, _, q, kv0 int, keep []bool) {
	n := max(p.prefix(b), q+1) // keys below n are visible
	for c := max(0, n-kv0); c < len(keep); c++ {
		keep[c] = false
	}
}

func (p prefixLM) Classify(b, _, q0, q1, kv0, kv1 int) BlockKind {
	n := p.prefix(b)
	switch {
	case kv1 <= n || kv1-1 <= q0:
		return BlockFull
	case kv0 >= n && kv0 > q1-1:
		return BlockEmpty
	}
	return BlockPartial
}

// Documents returns the document mask of packed sequences: key kv is visible
// to query row q only when both carry the same segment id, and a negative id
// marks padding that sees nothing and that nothing sees. idsQ holds the ids
// of batch element b's queries at idsQ[b*seqQ : (b+1)*seqQ], idsK those of its
// keys at idsK[b*seqK : (b+1)*seqK]. The slices are copied. Blocks are
// classified from per-16-position summaries, so long documents cost
// nothing per element.
func Documents(idsQ, idsK []int32, seqQ, seqK int) (Mask, error) {
	if seqQ < 1 || seqK < 1 || len(idsQ) == 0 || len(idsQ)%seqQ != 0 || len(idsK)%seqK != 0 || len(idsQ)/seqQ != len(idsK)/seqK {
		return nil, argErr("idsQ", "Documents: %d query ids and %d key ids do not form [batch ≥ 1, %d] and [batch, %d]",
			len(idsQ), len(idsK), seqQ, seqK)
	}
	return &documents{q: newSegments(idsQ, seqQ), k: newSegments(idsK, seqK), batch: len(idsQ) / seqQ}, nil
}

type documents struct {
	q, k  segments
	batch int
}

// Covers implements BoundedMask: the ids given.
func (d *documents) Covers() (batch, seqQ, seqK int) { return d.batch, d.q.seq, d.k.seq }

func (d *documents) Hide(b, _, q, kv0 int, keep []bool) {
	s := d.q.id(b, q)
	if s < 0 {
		clear(keep)
		return
	}
	ids := d.k.ids[b*d.k.seq+kv0:][:len(keep)]
	for c, id := range ids {
		if id != s {
			keep[c] = false
		}
	}
}

func (d *documents) Classify(b, _, q0, q1, kv0, kv1 int) BlockKind {
	qs := d.q.summary(b, q0, q1)
	ks := d.k.summary(b, kv0, kv1)
	switch {
	case qs.lo > qs.hi || ks.lo > ks.hi || qs.hi < ks.lo || ks.hi < qs.lo:
		return BlockEmpty // no valid id on one side, or disjoint id ranges
	case !qs.neg && !ks.neg && qs.lo == qs.hi && ks.lo == ks.hi && qs.lo == ks.lo:
		return BlockFull
	}
	return BlockPartial
}

// segments are the ids of one side of a Documents mask, with summaries of
// each group of 16 positions.
type segments struct {
	ids    []int32
	seq    int
	groups []segSummary // [batch][⌈seq/16⌉]
}

// segSummary: the smallest and largest non-negative id (lo > hi if none)
// and whether a negative id occurs.
type segSummary struct {
	lo, hi int32
	neg    bool
}

func (s segSummary) join(o segSummary) segSummary {
	return segSummary{min(s.lo, o.lo), max(s.hi, o.hi), s.neg || o.neg}
}

var emptySummary = segSummary{lo: 1<<31 - 1, hi: -1 << 31}

const segGroup = 16

func newSegments(ids []int32, seq int) segments {
	s := segments{ids: slices.Clone(ids), seq: seq}
	ng := (seq + segGroup - 1) / segGroup
	nb := len(ids) / seq
	s.groups = make([]segSummary, nb*ng)
	for b := 0; b < nb; b++ {
		for g := 0; g < ng; g++ {
			s.groups[b*ng+g] = s.scan(b, g*segGroup, min((g+1)*segGroup, seq))
		}
	}
	return s
}

func (s *segments) id(b, i int) int32 { return s.ids[b*s.seq+i] }

func (s *segments) scan(b, i0, i1 int) segSummary {
	sum := emptySummary
	for _, id := range s.ids[b*s.seq+i0 : b*s.seq+i1] {
		if id < 0 {
			sum.neg = true
		} else {
			sum.lo, sum.hi = min(sum.lo, id), max(sum.hi, id)
		}
	}
	return sum
}

// summary summarises positions [i0, i1) of batch element b: whole groups
// from the table, the ragged ends by scanning.
func (s *segments) summary(b, i0, i1 int) segSummary {
	i1 = min(i1, s.seq)
	g0, g1 := (i0+segGroup-1)/segGroup, i1/segGroup
	if g0 >= g1 {
		return s.scan(b, i0, i1)
	}
	ng := (s.seq + segGroup - 1) / segGroup
	sum := s.scan(b, i0, g0*segGroup).join(s.scan(b, g1*segGroup, i1))
	for _, g := range s.groups[b*ng+g0 : b*ng+g1] {
		sum = sum.join(g)
	}
	return sum
}

// LocalGlobal returns Longformer's mask: key kv is visible to query row q iff
// |q − kv| <= window, or q or kv is one of the global positions (global
// tokens see everything and are seen by everything). The positions are
// copied.
func LocalGlobal(window int, global ...int) (Mask, error) {
	if window < 0 {
		return nil, argErr("window", "LocalGlobal: window %d must be ≥ 0", window)
	}
	window = min(window, unbounded) // positions ± window cannot overflow
	g := slices.Clone(global)
	slices.Sort(g)
	g = slices.Compact(g)
	if len(g) > 0 && g[0] < 0 {
		return nil, argErr("global", "LocalGlobal: global position %d is negative", g[0])
	}
	return &localGlobal{window: window, global: g}, nil
}

type localGlobal struct {
	window int
	global []int // sorted, distinct
}

// count returns the number of global positions in [i0, i1).
func (m *localGlobal) count(i0, i1 int) int {
	a, _ := slices.BinarySearch(m.global, i0)
	b, _ := slices.BinarySearch(m.global, i1)
	return b - a
}

func (m *localGlobal) Hide(_, _, q, kv0 int, keep []bool) {
	if m.count(q, q+1) == 1 {
		return
	}
	lo, hi := q-m.window-kv0, q+m.window+1-kv0 // visible local run
	g, _ := slices.BinarySearch(m.global, kv0)
	for c := range keep {
		if c >= lo && c < hi {
			continue
		}
		for g < len(m.global) && m.global[g] < kv0+c {
			g++
		}
		if g < len(m.global) && m.global[g] == kv0+c {
			continue
		}
		keep[c] = false
	}
}

func (m *localGlobal) Classify(_, _, q0, q1, kv0, kv1 int) BlockKind {
	w := m.window
	switch {
	case kv1-1-q0 <= w && q1-1-kv0 <= w,
		m.count(q0, q1) == q1-q0, m.count(kv0, kv1) == kv1-kv0:
		return BlockFull
	case (kv0-(q1-1) > w || q0-(kv1-1) > w) && m.count(q0, q1) == 0 && m.count(kv0, kv1) == 0:
		return BlockEmpty
	}
	return BlockPartial
}

// Butterfly returns the flat block-butterfly layout (Pixelated Butterfly,
// used with block-sparse FlashAttention): block (qb, kb) is visible iff
// qb == kb or qb and kb differ in exactly one bit, log₂(blocks) + 1 blocks
// per row.
func Butterfly(shape BlockShape) (*BlockMask, error) {
	return BlockMaskFromFunc(shape, func(_, _, qb, kb int) bool {
		return bits.OnesCount(uint(qb^kb)) <= 1
	})
}

// Fixed returns the "fixed" layout of Sparse Transformers (Child et al.
// 2019) on blocks: a query block sees the blocks of its own chunk of stride
// blocks, and the last summary blocks of every chunk. Combine it with
// Options.Causal for the autoregressive form.
func Fixed(shape BlockShape, stride, summary int) (*BlockMask, error) {
	if stride < 1 || summary < 1 || summary > stride {
		return nil, argErr("stride", "Fixed: stride %d and summary %d must satisfy 1 ≤ summary ≤ stride", stride, summary)
	}
	return BlockMaskFromFunc(shape, func(_, _, qb, kb int) bool {
		return qb/stride == kb/stride || kb%stride >= stride-summary
	})
}

// BigBird returns BigBird's block layout (local + global + random): query
// block qb sees key blocks kb with |qb − kb| <= window, the first global
// blocks (whose query blocks also see everything), and random blocks per
// row drawn from seed (the same for a given seed, batch element, head and
// row; duplicates of other picks are not redrawn).
func BigBird(shape BlockShape, window, global, random int, seed uint64) (*BlockMask, error) {
	if window < 0 || global < 0 || random < 0 {
		return nil, argErr("window", "BigBird: window %d, global %d and random %d must be ≥ 0", window, global, random)
	}
	if err := shape.resolve(); err != nil {
		return nil, err
	}
	_, nkb := shape.blocks()
	return BlockMaskFromFunc(shape, func(b, h, qb, kb int) bool {
		if qb-kb <= window && kb-qb <= window || qb < global || kb < global {
			return true
		}
		for r := 0; r < random; r++ {
			if int(mix64(seed, uint64(b), uint64(h), uint64(qb), uint64(r))%uint64(nkb)) == kb {
				return true
			}
		}
		return false
	})
}

// mix64 hashes its arguments (splitmix64 finaliser over each).
func mix64(xs ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, x := range xs {
		h ^= x + 0x9e3779b97f4a7c15 + h<<6 + h>>2
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}
