package flashattn

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// modCase builds the masks and score modifier of a test case, with the
// dense forms the reference uses.
type modCase struct {
	name  string
	build func(c tcase, seed uint64) modSet
}

type modSet struct {
	block    *BlockMask
	mask     Mask
	score    ScoreMod
	ref      func(b, h, i, j int) bool
	scoreRef func(b, h, i, j int, x float64) (float64, float64)
}

// denseMask expands an element mask to a function of one position.
func denseMask(m Mask) func(b, h, i, j int) bool {
	keep := make([]bool, 1)
	return func(b, h, i, j int) bool {
		keep[0] = true
		m.Hide(b, h, i, j, keep)
		return keep[0]
	}
}

// denseBlock expands a block mask to the dense boolean mask it stands for.
func denseBlock(m *BlockMask) func(b, h, i, j int) bool {
	s := m.Shape()
	var elem func(b, h, i, j int) bool
	if m.mask != nil {
		elem = denseMask(m.mask)
	}
	return func(b, h, i, j int) bool {
		switch m.Kind(b, h, i/s.BlockQ, j/s.BlockK) {
		case BlockFull:
			return true
		case BlockPartial:
			return elem(b, h, i, j)
		}
		return false
	}
}

func and2(a, b func(b, h, i, j int) bool) func(b, h, i, j int) bool {
	return func(bb, h, i, j int) bool { return a(bb, h, i, j) && b(bb, h, i, j) }
}

func must[T any](x T, err error) T {
	if err != nil {
		panic(err)
	}
	return x
}

// randomIDs returns sorted segment ids (documents) with some trailing
// padding (-1) per batch element, or unsorted ids in 0..2.
func randomIDs(r *rand.Rand, batch, n int, sorted bool) []int32 {
	ids := make([]int32, batch*n)
	for b := 0; b < batch; b++ {
		id, pad := int32(0), r.IntN(n/4+1)
		for i := 0; i < n; i++ {
			switch {
			case !sorted:
				ids[b*n+i] = int32(r.IntN(3))
			case i >= n-pad:
				ids[b*n+i] = -1
			default:
				if r.IntN(9) == 0 {
					id++
				}
				ids[b*n+i] = id
			}
		}
	}
	return ids
}

// hashMask is a Mask without a classifier: a pseudo-random 70% of keys.
type hashMask uint64

func (m hashMask) Hide(b, h, q, kv0 int, keep []bool) {
	for c := range keep {
		if mix64(uint64(m), uint64(b), uint64(h), uint64(q), uint64(kv0+c))%10 >= 7 {
			keep[c] = false
		}
	}
}

// softTanh is a nonlinear ScoreMod: y = 2·tanh(x/2) + 0.1·x + bias(h).
type softTanh struct{}

func (softTanh) Apply(_, h, _, _ int, x, dx []float32) {
	for c, v := range x {
		t := math.Tanh(float64(v) / 2)
		x[c] = float32(2*t + 0.1*float64(v) + 0.05*float64(h))
		if dx != nil {
			dx[c] = float32(1 - t*t + 0.1)
		}
	}
}

func softTanhRef(_, h, _, _ int, x float64) (float64, float64) {
	t := math.Tanh(x / 2)
	return 2*t + 0.1*x + 0.05*float64(h), 1 - t*t + 0.1
}

// relBias is a ScoreFunc with derivative 1: a relative-position bias.
var relBias = ScoreFunc(func(b, h, q, kv int, x float32) (float32, float32) {
	return x + 0.3*float32(math.Sin(float64(q-kv)+float64(h+b))), 1
})

func relBiasRef(b, h, q, kv int, x float64) (float64, float64) {
	return x + float64(0.3*float32(math.Sin(float64(q-kv)+float64(h+b)))), 1
}

// modCases are the masks and score modifiers of the property grid.
var modCases = []modCase{
	{"table", func(c tcase, seed uint64) modSet {
		r := rand.New(rand.NewPCG(seed, 1))
		s := BlockShape{Batch: c.b, Heads: c.h, SeqQ: c.sq, SeqK: c.sk, BlockQ: 16, BlockK: 16}
		nqb, nkb := (c.sq+15)/16, (c.sk+15)/16
		table := make([]uint8, c.b*c.h*nqb*nkb)
		for i := range table {
			if r.IntN(5) < 2 {
				table[i] = 1
			}
		}
		m := must(BlockMaskFromTable(s, table))
		return modSet{block: m, ref: denseBlock(m)}
	}},
	{"table-odd-blocks", func(c tcase, seed uint64) modSet {
		r := rand.New(rand.NewPCG(seed, 2))
		s := BlockShape{Batch: 1, Heads: 1, SeqQ: c.sq, SeqK: c.sk, BlockQ: 7, BlockK: 10}
		m := must(BlockMaskFromFunc(s, func(_, _, qb, kb int) bool { return qb == kb || r.IntN(3) == 0 }))
		return modSet{block: m, ref: denseBlock(m)}
	}},
	{"prefix-blocks", func(c tcase, seed uint64) modSet {
		m := must(NewBlockMask(BlockShape{Batch: 1, Heads: 1, SeqQ: c.sq, SeqK: c.sk, BlockQ: 16, BlockK: 32}, PrefixLM(c.sk/3)))
		return modSet{block: m, ref: denseBlock(m)}
	}},
	{"documents", func(c tcase, seed uint64) modSet {
		r := rand.New(rand.NewPCG(seed, 3))
		m := must(Documents(randomIDs(r, c.b, c.sq, true), randomIDs(r, c.b, c.sk, true), c.sq, c.sk))
		return modSet{mask: m, ref: denseMask(m)}
	}},
	{"documents-unsorted", func(c tcase, seed uint64) modSet {
		r := rand.New(rand.NewPCG(seed, 4))
		m := must(Documents(randomIDs(r, c.b, c.sq, false), randomIDs(r, c.b, c.sk, false), c.sq, c.sk))
		return modSet{mask: m, ref: denseMask(m)}
	}},
	{"localglobal", func(c tcase, seed uint64) modSet {
		m := must(LocalGlobal(4, 0, 17, c.sk-1))
		return modSet{mask: m, ref: denseMask(m)}
	}},
	{"hash-mask", func(c tcase, seed uint64) modSet {
		m := hashMask(seed)
		return modSet{mask: m, ref: denseMask(m)}
	}},
	{"butterfly", func(c tcase, seed uint64) modSet {
		m := must(Butterfly(BlockShape{Batch: 1, Heads: 1, SeqQ: c.sq, SeqK: c.sk, BlockQ: 8, BlockK: 16}))
		return modSet{block: m, ref: denseBlock(m)}
	}},
	{"fixed", func(c tcase, seed uint64) modSet {
		m := must(Fixed(BlockShape{Batch: 1, Heads: c.h, SeqQ: c.sq, SeqK: c.sk, BlockQ: 16, BlockK: 16}, 2, 1))
		return modSet{block: m, ref: denseBlock(m)}
	}},
	{"bigbird", func(c tcase, seed uint64) modSet {
		m := must(BigBird(BlockShape{Batch: c.b, Heads: c.h, SeqQ: c.sq, SeqK: c.sk, BlockQ: 16, BlockK: 16}, 1, 1, 1, seed))
		return modSet{block: m, ref: denseBlock(m)}
	}},
	{"and+blocks+docs", func(c tcase, seed uint64) modSet {
		r := rand.New(rand.NewPCG(seed, 5))
		docs := must(Documents(randomIDs(r, c.b, c.sq, true), randomIDs(r, c.b, c.sk, true), c.sq, c.sk))
		el := And(docs, hashMask(seed))
		bm := must(NewBlockMask(BlockShape{Batch: c.b, Heads: 1, SeqQ: c.sq, SeqK: c.sk, BlockQ: 16, BlockK: 16}, PrefixLM(5)))
		return modSet{block: bm, mask: el, ref: and2(denseBlock(bm), denseMask(el))}
	}},
	{"score-tanh", func(c tcase, seed uint64) modSet {
		return modSet{score: softTanh{}, scoreRef: softTanhRef}
	}},
	{"score-bias+blocks", func(c tcase, seed uint64) modSet {
		m := must(NewBlockMask(BlockShape{Batch: 1, Heads: 1, SeqQ: c.sq, SeqK: c.sk, BlockQ: 16, BlockK: 16}, must(LocalGlobal(9, 3))))
		return modSet{block: m, ref: denseBlock(m), score: relBias, scoreRef: relBiasRef}
	}},
}

// TestMasksAgainstReference: every mask pattern and score modifier, alone
// and with causal, window, GQA, softcap, ALiBi and dropout, on shapes that
// are not multiples of any block, forward and gradients against the float64
// reference with the masks expanded to dense (under -race, each case on one
// kernel path: see gridRotation).
func TestMasksAgainstReference(t *testing.T) {
	var cases []tcase
	for i, mc := range modCases {
		base := tcase{b: 2, sq: 37, sk: 53, h: 4, hk: 2, d: 20, mods: mc}
		cases = append(cases, base)
		v := base
		switch i % 4 {
		case 0:
			v.causal, v.softcap = true, 2
		case 1:
			v.window, v.alibi = &Window{Left: 9, Right: 4}, 2
		case 2:
			v.causal, v.dropout, v.sq, v.sk = true, 0.2, 61, 45
		case 3:
			v.sq, v.sk, v.bq, v.bk, v.alibi = 70, 70, 12, 32, 1
		}
		cases = append(cases, v)
	}
	rot := newGridRotation(kernelPaths())
	forEachKernel(t, func(t *testing.T) {
		for _, c := range gridShare(rot, cases) {
			t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
		}
	})
}

// TestMaskDecode: masks with the stacked decoding path and key splits.
func TestMaskDecode(t *testing.T) {
	for _, c := range []tcase{
		{b: 1, sq: 1, sk: 900, h: 8, hk: 2, d: 64, mods: modCases[0]},
		{b: 2, sq: 3, sk: 300, h: 4, hk: 4, d: 24, causal: true, mods: modCases[6]},
		{b: 1, sq: 2, sk: 500, h: 8, hk: 2, d: 32, mods: modCases[3]},
	} {
		t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
	}
}

// TestMaskVarLen: with VarLen, mask positions count from each sequence's
// start and the batch coordinate is the sequence; each sequence is checked
// against the reference alone.
func TestMaskVarLen(t *testing.T) {
	lens := [][2]int{{30, 41}, {0, 5}, {77, 60}, {1, 19}}
	const h, hk, d = 4, 2, 16
	r := rand.New(rand.NewPCG(9, 9))
	var cq, ck []int32
	cq, ck = append(cq, 0), append(ck, 0)
	for _, l := range lens {
		cq, ck = append(cq, cq[len(cq)-1]+int32(l[0])), append(ck, ck[len(ck)-1]+int32(l[1]))
	}
	tq, tk := int(cq[len(cq)-1]), int(ck[len(ck)-1])
	q, k, v, do := randSlice(r, tq*h*d), randSlice(r, tk*hk*d), randSlice(r, tk*hk*d), randSlice(r, tq*h*d)
	bm := must(BlockMaskFromFunc(BlockShape{Batch: len(lens), Heads: h, SeqQ: 80, SeqK: 64, BlockQ: 16, BlockK: 16},
		func(b, hh, qb, kb int) bool { return (b+hh+qb+kb)%3 != 0 }))
	el := must(LocalGlobal(6, 2))
	opt := &Options{VarLen: &VarLen{CuSeqlensQ: cq, CuSeqlensK: ck}, BlockMask: bm, Mask: el, ScoreMod: relBias, Causal: true}
	qt, kt, vt := Dense(q, 1, tq, h, d), Dense(k, 1, tk, hk, d), Dense(v, 1, tk, hk, d)
	out, lse, err := Forward(qt, kt, vt, opt)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, err := Backward(qt, kt, vt, out, Dense(do, 1, tq, h, d), lse, opt)
	if err != nil {
		t.Fatal(err)
	}
	ref := and2(denseBlock(bm), denseMask(el))
	for b, l := range lens {
		nq, nk := l[0], l[1]
		if nq == 0 {
			continue
		}
		par := reference.Params{Batch: 1, SeqQ: nq, SeqK: nk, Heads: h, KVHeads: hk, HeadDim: d, Causal: true,
			Mask:     func(_, hh, i, j int) bool { return ref(b, hh, i, j) },
			ScoreMod: func(_, hh, i, j int, x float64) (float64, float64) { return relBiasRef(b, hh, i, j, x) }}
		checkVarLenSeq(t, Float32, b, par, q, k, v, do, tq, int(cq[b]), int(ck[b]), out, lse, dq, dk, dv)
	}
}

// TestScoreModFiniteDifferences checks the gradient through a nonlinear
// ScoreMod against central differences of the loss Σ O∘dO.
func TestScoreModFiniteDifferences(t *testing.T) {
	const b, sq, sk, h, d = 1, 9, 13, 2, 8
	r := rand.New(rand.NewPCG(4, 4))
	q, k, v, do := randSlice(r, b*sq*h*d), randSlice(r, b*sk*h*d), randSlice(r, b*sk*h*d), randSlice(r, b*sq*h*d)
	opt := &Options{ScoreMod: softTanh{}, Causal: true, Mask: must(LocalGlobal(5, 0))}
	loss := func(q, k []float32) float64 {
		out, _, err := Forward(Dense(q, b, sq, h, d), Dense(k, b, sk, h, d), Dense(v, b, sk, h, d), opt)
		if err != nil {
			t.Fatal(err)
		}
		var l float64
		for i, x := range out.Data {
			l += float64(x) * float64(do[i])
		}
		return l
	}
	out, lse, _ := Forward(Dense(q, b, sq, h, d), Dense(k, b, sk, h, d), Dense(v, b, sk, h, d), opt)
	dq, dk, _, err := Backward(Dense(q, b, sq, h, d), Dense(k, b, sk, h, d), Dense(v, b, sk, h, d), out, Dense(do, b, sq, h, d), lse, opt)
	if err != nil {
		t.Fatal(err)
	}
	const eps = 1e-2
	for _, tc := range []struct {
		name string
		x    []float32
		grad []float32
	}{{"dQ", q, dq.Data}, {"dK", k, dk.Data}} {
		for n := 0; n < 12; n++ {
			i := r.IntN(len(tc.x))
			x0 := tc.x[i]
			tc.x[i] = x0 + eps
			lp := loss(q, k)
			tc.x[i] = x0 - eps
			lm := loss(q, k)
			tc.x[i] = x0
			fd := (lp - lm) / (2 * eps)
			if diff := math.Abs(fd - float64(tc.grad[i])); diff > 2e-3+2e-3*math.Abs(fd) {
				t.Errorf("%s[%d]: backward %v, finite difference %v", tc.name, i, tc.grad[i], fd)
			}
		}
	}
}

// TestClassifiers: every built-in classifier's BlockEmpty/BlockFull
// answers hold for every element (exhaustive over random rectangles).
func TestClassifiers(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const n = 90
	masks := map[string]Mask{
		"prefix": PrefixLM(20, 0, 50),
		"docs":   must(Documents(randomIDs(r, 3, n, true), randomIDs(r, 3, n, true), n, n)),
		"docs-u": must(Documents(randomIDs(r, 3, n, false), randomIDs(r, 3, n, false), n, n)),
		"lg":     must(LocalGlobal(7, 3, 40, 41)),
		"and":    And(PrefixLM(30), must(LocalGlobal(2))),
	}
	counts := map[BlockKind]int{}
	for name, m := range masks {
		cls := m.(BlockClassifier)
		for trial := 0; trial < 3000; trial++ {
			b := r.IntN(3)
			q0, k0 := r.IntN(n), r.IntN(n)
			q1, k1 := q0+1+r.IntN(n-q0), k0+1+r.IntN(n-k0)
			kind := cls.Classify(b, 0, q0, q1, k0, k1)
			counts[kind]++
			got := evalBlock(m, make([]bool, k1-k0), b, 0, q0, q1, k0, k1)
			if kind != BlockPartial && kind != got {
				t.Fatalf("%s: Classify(b%d, rows %d..%d, keys %d..%d) = %v, the elements say %v", name, b, q0, q1, k0, k1, kind, got)
			}
		}
	}
	if counts[BlockEmpty] == 0 || counts[BlockFull] == 0 {
		t.Errorf("classifiers never decided a block: %v", counts)
	}
}

// TestBlockMaskBuild: NewBlockMask agrees with the element mask, block by
// block, with and without a classifier.
func TestBlockMaskBuild(t *testing.T) {
	s := BlockShape{Batch: 2, Heads: 3, SeqQ: 75, SeqK: 61, BlockQ: 16, BlockK: 13}
	for _, m := range []Mask{hashMask(3), PrefixLM(11, 40), MaskFunc(func(b, h, q, kv int) bool { return (q+kv+h+b)%4 != 0 || q < 20 })} {
		bm := must(NewBlockMask(s, m))
		rs := bm.Shape()
		nqb, nkb := bm.Blocks()
		for b := 0; b < 2; b++ {
			for h := 0; h < 3; h++ {
				for qb := 0; qb < nqb; qb++ {
					for kb := 0; kb < nkb; kb++ {
						k0, k1 := kb*rs.BlockK, min((kb+1)*rs.BlockK, rs.SeqK)
						want := evalBlock(m, make([]bool, k1-k0), b, h, qb*rs.BlockQ, min((qb+1)*rs.BlockQ, rs.SeqQ), k0, k1)
						if got := bm.Kind(b, h, qb, kb); got != want {
							t.Fatalf("%T: block (%d,%d,%d,%d) %v, want %v", m, b, h, qb, kb, got, want)
						}
					}
				}
			}
		}
	}
	for _, bad := range []BlockShape{{}, {Batch: 1, Heads: 1, SeqQ: 5, SeqK: 5, BlockQ: -1}, {Batch: 1 << 20, Heads: 1 << 20, SeqQ: 1 << 20, SeqK: 1 << 20}} {
		if _, err := NewBlockMask(bad, PrefixLM(1)); err == nil {
			t.Errorf("NewBlockMask(%+v) accepted", bad)
		}
	}
	if _, err := BlockMaskFromTable(BlockShape{Batch: 1, Heads: 1, SeqQ: 10, SeqK: 10}, make([]uint8, 2)); err == nil {
		t.Error("BlockMaskFromTable accepted a short table")
	}
}

// TestBlockMaskCallChecks: a block mask that does not cover the call is an
// argument error.
func TestBlockMaskCallChecks(t *testing.T) {
	q, k, v := NewTensor(2, 40, 4, 8), NewTensor(2, 50, 2, 8), NewTensor(2, 50, 2, 8)
	for _, s := range []BlockShape{
		{Batch: 3, Heads: 1, SeqQ: 40, SeqK: 50},
		{Batch: 1, Heads: 2, SeqQ: 40, SeqK: 50},
		{Batch: 1, Heads: 1, SeqQ: 39, SeqK: 50},
		{Batch: 1, Heads: 1, SeqQ: 40, SeqK: 49},
	} {
		bm := must(Butterfly(s))
		_, _, err := Forward(q, k, v, &Options{BlockMask: bm})
		if _, ok := err.(*ArgError); !ok {
			t.Errorf("%+v: error %v, want an *ArgError", s, err)
		}
	}
}

// TestBlockMaskLarge: a 131072 × 131072 document mask of 128-blocks builds
// from the classifier alone, in megabytes (one byte per block).
func TestBlockMaskLarge(t *testing.T) {
	const n = 131072
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i / 5000)
	}
	docs := must(Documents(ids, ids, n, n))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	bm := must(NewBlockMask(BlockShape{Batch: 1, Heads: 1, SeqQ: n, SeqK: n}, docs))
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("building the mask allocated %d bytes", grew)
	}
	if d := bm.Density(); d <= 0 || d > 0.05 {
		t.Errorf("density %v, want the block diagonal (about 0.03)", d)
	}
}

// TestMaskAllocs: masked calls allocate nothing in steady state either.
func TestMaskAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race escape analysis changes and calls allocate; counted by the plain test run")
	}
	c := tcase{b: 1, sq: 200, sk: 200, h: 2, hk: 1, d: 32, causal: true}
	cd := makeCase(c, 1)
	bm := must(NewBlockMask(BlockShape{Batch: 1, Heads: 1, SeqQ: 200, SeqK: 200}, must(LocalGlobal(20, 0))))
	opts := &Options{Causal: true, BlockMask: bm, Mask: PrefixLM(30), ScoreMod: relBias, Workers: 2}
	q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
	out, lse := NewTensor(c.b, c.sq, c.h, c.d), make([]float32, c.b*c.h*c.sq)
	dq, dk, dv := NewTensor(c.b, c.sq, c.h, c.d), NewTensor(c.b, c.sk, c.hk, c.d), NewTensor(c.b, c.sk, c.hk, c.d)
	do := Dense(cd.do, c.b, c.sq, c.h, c.d)
	testAllocs(t, func() error { return ForwardInto(out, lse, q, k, v, opts) }, "ForwardInto")
	testAllocs(t, func() error { return BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts) }, "BackwardInto")
}
