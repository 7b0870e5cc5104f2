package flashattn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// serveSeq is one sequence of a continuous-batching step: its cache holds
// positions pad..end-1, it appends nnew new keys at end and has nq query
// rows.
type serveSeq struct{ end, pad, nnew, nq int }

// mixedStep is a vLLM-like step: decode rows, a prompt chunk over a cached
// prefix, a prompt's first chunk, speculative-decoding verification rows,
// a sequence with nothing to do this step, and a left-padded decode row.
var mixedStep = []serveSeq{
	{end: 200, nnew: 1, nq: 1},
	{end: 96, nnew: 40, nq: 40},
	{end: 0, nnew: 24, nq: 24},
	{end: 150, nnew: 4, nq: 4},
	{end: 70},
	{end: 120, pad: 9, nnew: 1, nq: 1},
	{end: 31, nnew: 4, nq: 4},
}

// specStep is a step of speculative-decoding verification rows (and a
// decode row): with 16 query heads on 2 KV heads its sequences stack 8 to
// 64 rows per KV head (one left-padded), the spec rows more than the
// decode kernels' 16-row tiles, the last enough to be packed.
var specStep = []serveSeq{
	{end: 200, nnew: 4, nq: 4},
	{end: 150, pad: 7, nnew: 5, nq: 5},
	{end: 97, nnew: 7, nq: 7},
	{end: 180, nnew: 1, nq: 1},
	{end: 64, nnew: 3, nq: 3},
	{end: 120, nnew: 8, nq: 8},
}

// serveCase is one continuous-batching call: VarLen queries, packed new
// keys (CuSeqlensKNew) appended to a cache of type dt.
type serveCase struct {
	dt          DType
	block       int // page size; 0: contiguous
	hq, hk, d   int
	dv          int // > 0: an MLA latent cache, v the first dv columns of k (hk 1)
	seqs        []serveSeq
	rotary      bool
	interleaved bool
	causal      bool
	window      *Window
	sinks       bool
	softcap     float32
	alibi       bool
	splits      int
}

func (c serveCase) String() string {
	return fmt.Sprintf("%v/block=%d/h=%d:%d/d=%d:%d/rot=%v/causal=%v/win=%v/sinks=%v/softcap=%v/alibi=%v/splits=%d",
		c.dt, c.block, c.hq, c.hk, c.d, c.dv, c.rotary, c.causal, c.window != nil, c.sinks, c.softcap, c.alibi, c.splits)
}

// TestContinuousBatching: one VarLen call over a KV cache (decode rows, a
// prompt chunk over a cached prefix, spec-decode rows, a sequence with no
// new keys) against the float64 reference per sequence, for every cache
// type, paged and contiguous, with rotary, window, GQA/MQA, sinks, softcap,
// ALiBi, forced key splits and an MLA latent cache; the cache afterwards
// holds the appended rows and nothing else changed.
func TestContinuousBatching(t *testing.T) {
	var cases []serveCase
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		for _, block := range []int{0, 32} {
			cases = append(cases,
				serveCase{dt: dt, block: block, hq: 8, hk: 2, d: 64, seqs: mixedStep, rotary: true, causal: true},
				serveCase{dt: dt, block: block, hq: 4, hk: 1, d: 64, seqs: mixedStep, rotary: true, interleaved: true, causal: true, window: &Window{Left: 48, Right: 0}, sinks: true},
			)
		}
	}
	short := mixedStep[:4]
	// Sequences verifying tokens with no new keys (an empty CuSeqlensKNew
	// span), and a step with no new keys at all (no KNew): with Rotary the
	// queries still rotate at their positions.
	noNew := []serveSeq{{end: 90, nq: 3}, {end: 40, nnew: 2, nq: 2}, {end: 120, pad: 7, nq: 1}}
	noneNew := []serveSeq{{end: 90, nq: 3}, {end: 120, pad: 7, nq: 1}, {end: 5}}
	cases = append(cases,
		serveCase{dt: Float32, hq: 4, hk: 4, d: 32, seqs: mixedStep, causal: true, softcap: 5, alibi: true},
		serveCase{dt: Float32, block: 16, hq: 4, hk: 2, d: 40, seqs: short, rotary: true},                             // not causal: queries at SeqLens
		serveCase{dt: BFloat16, hq: 4, hk: 2, d: 40, seqs: short, rotary: true, window: &Window{Left: -1, Right: -1}}, // an unbounded window is not local: queries at SeqLens
		serveCase{dt: BFloat16, block: 32, hq: 8, hk: 2, d: 64, seqs: mixedStep, splits: 5, causal: true},             // split-K for every row
		serveCase{dt: Float32, hq: 16, hk: 1, d: 96, dv: 64, seqs: short, causal: true},                               // MLA latent
		serveCase{dt: BFloat16, block: 16, hq: 16, hk: 1, d: 96, dv: 64, seqs: short, causal: true},
		serveCase{dt: Float32, block: 32, hq: 8, hk: 2, d: 64, seqs: noNew, rotary: true, causal: true},
		serveCase{dt: BFloat16, hq: 8, hk: 2, d: 64, seqs: noneNew, rotary: true, causal: true},
		serveCase{dt: Float32, block: 16, hq: 4, hk: 2, d: 64, seqs: noneNew, rotary: true, interleaved: true},
	)
	// Speculative-decoding rows, 17 to 63 per KV head read in place.
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		for _, block := range []int{0, 32} {
			cases = append(cases, serveCase{dt: dt, block: block, hq: 16, hk: 2, d: 64, seqs: specStep, rotary: true, causal: true})
		}
	}
	cases = append(cases,
		serveCase{dt: Float32, block: 32, hq: 16, hk: 2, d: 64, seqs: specStep, causal: true, window: &Window{Left: 40, Right: 0}, sinks: true, softcap: 5},
		serveCase{dt: BFloat16, hq: 16, hk: 2, d: 64, seqs: specStep, rotary: true, interleaved: true, causal: true, alibi: true},
		serveCase{dt: Q8_0, block: 32, hq: 16, hk: 2, d: 64, seqs: specStep, splits: 3, causal: true},
		serveCase{dt: Float32, hq: 16, hk: 1, d: 96, dv: 64, seqs: specStep[3:5], causal: true}, // MLA latent: 48 rows
		serveCase{dt: BFloat16, block: 16, hq: 16, hk: 1, d: 96, dv: 64, seqs: specStep[3:5], causal: true},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { checkServe(t, c) })
	}
}

// serveCall is the operands of a continuous-batching call built by
// newServeCall: the logical new keys and queries, and the call itself.
type serveCall struct {
	c          serveCase
	capacity   int
	k, v       Tensor // the cache (v a view of k for MLA)
	table      []int32
	q          Tensor
	knew, vnew []float32
	cuQ, cuNew []int32
	opts       *Options
}

// newServeCall builds call c on a random cache of capacity keys per
// sequence (shuffled pages when paged).
func newServeCall(t testing.TB, c serveCase, seed uint64) *serveCall {
	const capacity = 256
	r := rand.New(rand.NewPCG(seed, 27))
	nb := len(c.seqs)
	dv := c.d
	if c.dv > 0 {
		dv = c.dv
	}
	rows, seqs := nb, capacity
	s := &serveCall{c: c, capacity: capacity}
	if c.block > 0 {
		rows, seqs = nb*capacity/c.block+3, c.block
		s.table = make([]int32, nb*capacity/c.block)
		for i, p := range r.Perm(rows)[:len(s.table)] {
			s.table[i] = int32(p)
		}
	}
	fill := func(x Tensor) {
		if err := Convert(x, Dense(randSlice(r, x.Batch*x.Seq*x.Heads*x.Dim), x.Batch, x.Seq, x.Heads, x.Dim)); err != nil {
			t.Fatal(err)
		}
	}
	s.k = NewTensorOf(c.dt, rows, seqs, c.hk, c.d)
	fill(s.k)
	if c.dv > 0 {
		s.v = s.k
		s.v.Dim = dv
		s.v.HeadStride, s.v.SeqStride, s.v.BatchStride = c.d, c.hk*c.d, seqs*c.hk*c.d
	} else {
		s.v = NewTensorOf(c.dt, rows, seqs, c.hk, dv)
		fill(s.v)
	}
	s.cuQ, s.cuNew = []int32{0}, []int32{0}
	ends, pads := make([]int32, nb), make([]int32, nb)
	for b, sq := range c.seqs {
		s.cuQ = append(s.cuQ, s.cuQ[b]+int32(sq.nq))
		s.cuNew = append(s.cuNew, s.cuNew[b]+int32(sq.nnew))
		ends[b], pads[b] = int32(sq.end), int32(sq.pad)
	}
	totalQ, totalNew := int(s.cuQ[nb]), int(s.cuNew[nb])
	s.q = Dense(randSlice(r, totalQ*c.hq*c.d), 1, totalQ, c.hq, c.d)
	s.knew, s.vnew = randSlice(r, totalNew*c.hk*c.d), randSlice(r, totalNew*c.hk*dv)
	kc := &KVCache{SeqLens: ends, LeftPad: pads, BlockTable: s.table, BlocksPerSeq: len(s.table) / nb, NumSplits: c.splits}
	if totalNew > 0 { // otherwise a step without new keys: no KNew at all
		kc.KNew, kc.CuSeqlensKNew = Dense(append([]float32(nil), s.knew...), 1, totalNew, c.hk, c.d), s.cuNew
		if c.dv == 0 {
			kc.VNew = Dense(append([]float32(nil), s.vnew...), 1, totalNew, c.hk, dv)
		}
	}
	if c.rotary {
		kc.Rotary = ropeTables(capacity+8, c.d)
		kc.Rotary.Interleaved = c.interleaved
	}
	s.opts = &Options{VarLen: &VarLen{CuSeqlensQ: s.cuQ}, KVCache: kc, Causal: c.causal, Window: c.window, Softcap: c.softcap}
	if c.sinks {
		s.opts.Sinks = randSlice(r, c.hq)
	}
	if c.alibi {
		s.opts.ALiBi = make([]float32, c.hq)
		for i := range s.opts.ALiBi {
			s.opts.ALiBi[i] = 0.05 * float32(i+1)
		}
	}
	return s
}

// slot returns the batch index and row of k holding cache position j of
// sequence b.
func (s *serveCall) slot(b, j int) (tb, row int) {
	if s.c.block == 0 {
		return b, j
	}
	return int(s.table[b*s.capacity/s.c.block+j/s.c.block]), j % s.c.block
}

// asFloat32 is x (a cache tensor, or a view of one) converted to float32.
func asFloat32(t testing.TB, x Tensor) Tensor {
	f := NewTensor(x.Batch, x.Seq, x.Heads, x.Dim)
	if err := Convert(f, x); err != nil {
		t.Fatal(err)
	}
	return f
}

func checkServe(t *testing.T, c serveCase) {
	s := newServeCall(t, c, uint64(len(c.String())))
	k0, v0 := asFloat32(t, s.k), asFloat32(t, s.v)
	out, lse, err := Forward(s.q, s.k, s.v, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	kf, vf := asFloat32(t, s.k), asFloat32(t, s.v)
	hk, d, dv, hq := c.hk, c.d, vf.Dim, c.hq
	rot := s.opts.KVCache.Rotary
	row := func(x Tensor, tb, r, h int) []float32 {
		off := ((tb*x.Seq+r)*x.Heads + h) * x.Dim
		return x.Data[off : off+x.Dim]
	}
	// Every slot: an appended one holds the new key (rotated at its cache
	// position) and value, within one step of the type; any other is as
	// it was, bit for bit.
	appended := map[[2]int][2]int{} // (tb, row) -> (sequence, new key index)
	for b, sq := range c.seqs {
		for i := range sq.nnew {
			tb, r := s.slot(b, sq.end+i)
			appended[[2]int{tb, r}] = [2]int{b, i}
		}
	}
	totalQ := int(s.cuQ[len(c.seqs)])
	for tb := range kf.Batch {
		for r := range kf.Seq {
			for h := range hk {
				w, ok := appended[[2]int{tb, r}]
				if !ok {
					if !slices.Equal(row(kf, tb, r, h), row(k0, tb, r, h)) || !slices.Equal(row(vf, tb, r, h), row(v0, tb, r, h)) {
						t.Fatalf("cache slot (%d, %d) head %d changed, but no new key goes there", tb, r, h)
					}
					continue
				}
				b, i := w[0], w[1]
				n := int(s.cuNew[b]) + i
				wantK := append([]float32(nil), s.knew[(n*hk+h)*d:][:d]...)
				if rot != nil {
					rope64(wantK, rot, c.seqs[b].end+i) // flash-attn's absolute cache position
				}
				wantV := s.vnew[(n*hk+h)*dv:][:dv]
				if c.dv > 0 {
					wantV = wantK[:dv]
				}
				if err := withinStep(c.dt, row(kf, tb, r, h), wantK); err != nil {
					t.Fatalf("sequence %d new key %d head %d: %v", b, i, h, err)
				}
				if err := withinStep(c.dt, row(vf, tb, r, h), wantV); err != nil {
					t.Fatalf("sequence %d new value %d head %d: %v", b, i, h, err)
				}
			}
		}
	}
	// Each sequence against the reference over its cache as it now holds it.
	for b, sq := range c.seqs {
		nk := sq.end + sq.nnew - sq.pad
		ek, ev := make([]float32, 0, nk*hk*d), make([]float32, 0, nk*hk*dv)
		for j := sq.pad; j < sq.end+sq.nnew; j++ {
			tb, r := s.slot(b, j)
			for h := range hk {
				ek, ev = append(ek, row(kf, tb, r, h)...), append(ev, row(vf, tb, r, h)...)
			}
		}
		q0 := int(s.cuQ[b])
		qb := append([]float32(nil), s.q.Data[q0*hq*d:(q0+sq.nq)*hq*d]...)
		if rot != nil {
			for i := range sq.nq {
				pos := sq.end
				if flashRopeAdvances(c.causal, c.window) {
					pos += i
				}
				for h := range hq {
					rope64(qb[(i*hq+h)*d:][:d], rot, pos)
				}
			}
		}
		par := reference.Params{Batch: 1, SeqQ: sq.nq, SeqK: nk, Heads: hq, KVHeads: hk, HeadDim: d, HeadDimV: dv,
			Causal: c.causal, Softcap: float64(c.softcap)}
		if c.sinks {
			par.Sinks = to64(s.opts.Sinks)
		}
		if c.alibi {
			par.ALiBi = to64(s.opts.ALiBi)
		}
		if c.window != nil {
			par.Window, par.WindowLeft, par.WindowRight = true, c.window.Left, c.window.Right
		}
		gotO := out.Data[q0*hq*dv : (q0+sq.nq)*hq*dv]
		gotL := make([]float32, 0, hq*sq.nq) // LSE is [heads, total_q]
		for h := range hq {
			gotL = append(gotL, lse[h*totalQ+q0:h*totalQ+q0+sq.nq]...)
		}
		if sq.nq == 0 {
			continue
		}
		if err := checkOverCache(c.dt, par, qb, ek, ev, gotO, gotL); err != nil {
			t.Errorf("sequence %d (%+v): %v", b, sq, err)
		}
	}
}

// withinStep reports whether got, a row read back from a cache of type dt,
// holds want within one step of the type (cacheStep).
func withinStep(dt DType, got, want []float32) error {
	for blk := 0; blk < len(want); blk += 32 {
		blockEnd := min(blk+32, len(want))
		bm := 0.0
		for _, x := range want[blk:blockEnd] {
			bm = max(bm, math.Abs(float64(x)))
		}
		for i := blk; i < blockEnd; i++ {
			if e := math.Abs(float64(got[i] - want[i])); !(e <= cacheStep(dt, float64(want[i]), bm)) {
				return fmt.Errorf("dim %d holds %v, want %v", i, got[i], want[i])
			}
		}
	}
	return nil
}

// checkOverCache checks the O and LSE a KV-cache call gave one sequence
// (gotO [nq, heads, dv], gotL [heads, nq]) against the reference over
// the keys and values ek, ev as the cache holds them: a 16-bit cache rounds
// the queries qb to its type and computes in it, a float32 or quantised one
// computes in float32 (the rule of KVCache).
func checkOverCache(dt DType, par reference.Params, qb, ek, ev, gotO, gotL []float32) error {
	if f, ok := dt.Format(); ok {
		qb = f.RoundSlice(qb)
		o64, l64 := reference.Forward64(par, to64(qb), to64(ek), to64(ev))
		oh, lh := reference.ForwardHalf(par, f, qb, ek, ev)
		if err := reference.CheckHalf("O", f, gotO, oh, o64); err != nil {
			return err
		}
		return reference.CheckHalf("LSE", f, gotL, lh, l64)
	}
	o64, l64 := reference.Forward64(par, to64(qb), to64(ek), to64(ev))
	o32, l32 := reference.Forward32(par, qb, ek, ev)
	if err := reference.Check("O", gotO, o32, o64); err != nil {
		return err
	}
	return reference.Check("LSE", gotL, l32, l64)
}

// TestContinuousBatchingErrors: a continuous-batching call with a bad
// argument is refused with an *ArgError naming it, before anything is
// written: the cache (every type, paged and contiguous) is as it was, even
// when the bad part is the last sequence's (no room, a new key a q8_0 or
// q4_0 cache cannot hold).
func TestContinuousBatchingErrors(t *testing.T) {
	last, rot := len(mixedStep)-1, newGridRotation(3)
	for _, tc := range []struct {
		name  string
		arg   string
		paged bool // only on a paged cache
		quant bool // only on a quantised cache
		edit  func(s *serveCall)
	}{
		{"CuSeqlensK set", "Options.VarLen.CuSeqlensK", false, false, func(s *serveCall) { s.opts.VarLen.CuSeqlensK = s.cuNew }},
		{"SeqUsedK set", "Options.VarLen.SeqUsedK", false, false, func(s *serveCall) { s.opts.VarLen.SeqUsedK = make([]int32, len(mixedStep)) }},
		{"no CuSeqlensKNew", "Options.KVCache.CuSeqlensKNew", false, false, func(s *serveCall) { s.opts.KVCache.CuSeqlensKNew = nil }},
		{"CuSeqlensKNew short", "Options.KVCache.CuSeqlensKNew", false, false, func(s *serveCall) { s.opts.KVCache.CuSeqlensKNew = s.cuNew[:last] }},
		{"CuSeqlensKNew decreasing", "Options.KVCache.CuSeqlensKNew", false, false, func(s *serveCall) { s.cuNew[2], s.cuNew[3] = s.cuNew[3], s.cuNew[2] }},
		{"CuSeqlensKNew start", "Options.KVCache.CuSeqlensKNew", false, false, func(s *serveCall) { s.cuNew[0] = 1 }},
		{"CuSeqlensKNew end", "Options.KVCache.CuSeqlensKNew", false, false, func(s *serveCall) { s.cuNew[last+1]-- }},
		{"CuSeqlensKNew without VarLen", "Options.KVCache.CuSeqlensKNew", false, false, func(s *serveCall) {
			s.opts.VarLen = nil
			s.q = Dense(s.q.Data[:len(mixedStep)*s.q.Heads*s.q.Dim], len(mixedStep), 1, s.q.Heads, s.q.Dim)
		}},
		{"no room in the last sequence", "Options.KVCache.SeqLens", false, false, func(s *serveCall) { s.opts.KVCache.SeqLens[last] = int32(s.capacity - 3) }},
		{"rotary table short", "Options.KVCache.Rotary", false, false, func(s *serveCall) {
			r := ropeTables(200, s.c.d) // sequence 0 rotates its new key and query at position 200
			s.opts.KVCache.Rotary = r
		}},
		{"cache rows", "k", false, false, func(s *serveCall) {
			if s.c.block == 0 {
				s.opts.VarLen.CuSeqlensQ = append(s.cuQ, s.cuQ[last+1])
				s.opts.KVCache.CuSeqlensKNew = append(s.cuNew, s.cuNew[last+1])
				s.opts.KVCache.SeqLens = append(s.opts.KVCache.SeqLens, 0)
				s.opts.KVCache.LeftPad = append(s.opts.KVCache.LeftPad, 0)
			}
		}},
		{"two sequences append to one page slot", "Options.KVCache.BlockTable", true, false, func(s *serveCall) {
			per := s.capacity / s.c.block
			s.opts.KVCache.BlockTable[last*per] = s.opts.KVCache.BlockTable[0*per+200/s.c.block] // 31.. and 200.. in one block
			s.opts.KVCache.SeqLens[last] = 200 % int32(s.c.block)
		}},
		{"unquantisable new key in the last sequence", "Options.KVCache.KNew", false, true, func(s *serveCall) {
			s.opts.KVCache.KNew.Data[(int(s.cuNew[last+1])-1)*s.c.hk*s.c.d] = float32(math.Inf(1))
		}},
	} {
		// Under -race each case runs on a rotating share of the types
		// (gridShare): every type still meets some of the cases.
		for _, dt := range gridShare(rot, []DType{Float32, BFloat16, Q8_0, Q4_0, FP8E4M3}) {
			for _, block := range []int{0, 32} {
				if tc.paged && block == 0 || tc.quant && !dt.quantized() || tc.name == "cache rows" && block > 0 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%v/block=%d", tc.name, dt, block), func(t *testing.T) {
					s := newServeCall(t, serveCase{dt: dt, block: block, hq: 8, hk: 2, d: 64, seqs: mixedStep, rotary: true, causal: true}, 3)
					k0, v0 := asFloat32(t, s.k), asFloat32(t, s.v)
					tc.edit(s)
					_, _, err := Forward(s.q, s.k, s.v, s.opts)
					var ae *ArgError
					if !errors.As(err, &ae) || ae.Arg != tc.arg {
						t.Fatalf("got %v, want an *ArgError for %s", err, tc.arg)
					}
					if !slices.Equal(asFloat32(t, s.k).Data, k0.Data) || !slices.Equal(asFloat32(t, s.v).Data, v0.Data) {
						t.Errorf("%v: the cache changed", err)
					}
				})
			}
		}
	}
}

// TestContinuousBatchingRoutes: in one mixed call each sequence takes its
// own K/V route: a decode row and spec-decode rows read a float32 cache
// in place (the decode kernels), the prompt chunk's tiles are packed.
func TestContinuousBatchingRoutes(t *testing.T) {
	s := newServeCall(t, serveCase{dt: Float32, hq: 8, hk: 2, d: 64, seqs: mixedStep, causal: true}, 1)
	c, err := newCall(s.q, s.k, s.v, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.release()
	for b, want := range map[int]kvFrom{0: fromCacheInPlace, 1: fromPacked, 2: fromPacked, 3: fromCacheInPlace, 5: fromCacheInPlace} {
		if got := c.plan.seqs[b].route.from; got != want {
			t.Errorf("sequence %d (%+v) takes route %d, want %d", b, mixedStep[b], got, want)
		}
	}
}

// TestContinuousBatchingSpecRoutes: speculative-decoding rows stacked 17
// to 63 to a KV head read the cache in place (the decode kernels tile
// them), whatever its type and whether paged, rather than staging (paged,
// converted) or transposing K per tile; 64 rows are packed.
func TestContinuousBatchingSpecRoutes(t *testing.T) {
	for _, dt := range []DType{Float32, BFloat16, Q8_0, FP8E4M3} {
		for _, block := range []int{0, 32} {
			c := serveCase{dt: dt, block: block, hq: 16, hk: 2, d: 64, seqs: specStep, causal: true}
			t.Run(c.String(), func(t *testing.T) {
				s := newServeCall(t, c, 1)
				call, err := newCall(s.q, s.k, s.v, s.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer call.release()
				for b, sq := range specStep {
					want := fromCacheInPlace
					if 8*sq.nq >= packRowsMin {
						want = fromPacked
					}
					if got := call.plan.seqs[b].route.from; got != want {
						t.Errorf("sequence %d (%+v, %d rows per KV head) takes route %d, want %d", b, sq, 8*sq.nq, got, want)
					}
				}
			})
		}
	}
}
