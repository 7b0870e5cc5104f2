package flashattn

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestOptionsGrid covers every option alone and in combination with the
// others, causal, GQA and Sq ≠ Sk, forward and gradients (under -race, each
// case on one kernel path: see gridRotation).
func TestOptionsGrid(t *testing.T) {
	windows := []*Window{nil, {Left: 5, Right: 3}, {Left: 0, Right: 0}, {Left: -1, Right: 7}, {Left: 9, Right: -1}}
	var cases []tcase
	i := 0
	for _, causal := range []bool{false, true} {
		for _, w := range windows {
			for _, sz := range [][2]int{{33, 47}, {47, 33}} {
				c := tcase{b: 2, sq: sz[0], sk: sz[1], h: 4, hk: 2, d: 20, causal: causal, window: w, bq: 12, bk: 16}
				// Rotate the other options through the grid so that each
				// meets each mask and shape.
				switch i % 5 {
				case 1:
					c.softcap = 3
				case 2:
					c.alibi = 1 + i%2
				case 3:
					c.dropout = 0.3
				case 4:
					c.softcap, c.alibi, c.dropout = 2.5, 2, 0.2
				}
				if w != nil && w.Left == 0 && w.Right == 0 {
					// One key per row: see TestDropoutOneKeyRows.
					c.dropout = 0
				}
				cases = append(cases, c)
				i++
			}
		}
	}
	cases = append(cases,
		tcase{b: 1, sq: 300, sk: 300, h: 2, hk: 2, d: 32, window: &Window{Left: 20, Right: 0}},
		tcase{b: 1, sq: 64, sk: 64, h: 2, hk: 1, d: 64, softcap: 1},
		tcase{b: 1, sq: 64, sk: 64, h: 2, hk: 1, d: 64, dropout: 0.9},
	)
	rot := newGridRotation(kernelPaths())
	forEachKernel(t, func(t *testing.T) {
		for _, c := range gridShare(rot, cases) {
			t.Run(c.String(), func(t *testing.T) { checkCase(t, c) })
		}
	})
}

// TestVarLen compares a packed variable-length batch with each sequence
// computed alone by the reference, including empty sequences, SeqUsedK and
// one long sequence among short ones.
func TestVarLen(t *testing.T) {
	type seq struct{ nq, nk, used int }
	for _, tc := range []struct {
		name    string
		seqs    []seq
		causal  bool
		window  *Window
		alibi   bool
		dropout float32
	}{
		{name: "mixed", seqs: []seq{{5, 9, -1}, {40, 31, -1}, {1, 70, -1}, {17, 17, -1}}},
		{name: "causal", seqs: []seq{{30, 20, -1}, {20, 30, -1}, {130, 130, -1}}, causal: true},
		{name: "empty", seqs: []seq{{0, 5, -1}, {6, 0, -1}, {7, 7, -1}}, causal: true},
		{name: "used", seqs: []seq{{8, 20, 11}, {9, 15, 0}, {12, 12, 12}}},
		{name: "long", seqs: []seq{{3, 3, -1}, {400, 400, -1}, {2, 2, -1}, {5, 5, -1}}, causal: true},
		{name: "window-alibi", seqs: []seq{{25, 40, -1}, {50, 50, -1}}, window: &Window{Left: 6, Right: 2}, alibi: true},
		{name: "dropout", seqs: []seq{{25, 40, -1}, {50, 50, -1}}, dropout: 0.25, causal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const H, Hk, D = 4, 2, 24
			r := rand.New(rand.NewPCG(9, uint64(len(tc.seqs))))
			cuq, cuk := []int32{0}, []int32{0}
			var used []int32
			for _, s := range tc.seqs {
				cuq = append(cuq, cuq[len(cuq)-1]+int32(s.nq))
				cuk = append(cuk, cuk[len(cuk)-1]+int32(s.nk))
				u := s.used
				if u < 0 {
					u = s.nk
				}
				used = append(used, int32(u))
			}
			tq, tk := int(cuq[len(cuq)-1]), int(cuk[len(cuk)-1])
			q, k, v, do := randSlice(r, tq*H*D), randSlice(r, tk*Hk*D), randSlice(r, tk*Hk*D), randSlice(r, tq*H*D)
			var slopes []float32
			if tc.alibi {
				slopes = randSlice(r, len(tc.seqs)*H)
				for i := range slopes {
					slopes[i] = float32(math.Abs(float64(slopes[i])))
				}
			}
			opt := &Options{Causal: tc.causal, Window: tc.window, ALiBi: slopes, Dropout: tc.dropout, Seed: 5,
				VarLen: &VarLen{CuSeqlensQ: cuq, CuSeqlensK: cuk, SeqUsedK: used}, BlockQ: 24, BlockK: 32}
			Q, K, V, DO := Dense(q, 1, tq, H, D), Dense(k, 1, tk, Hk, D), Dense(v, 1, tk, Hk, D), Dense(do, 1, tq, H, D)
			out, lse, err := Forward(Q, K, V, opt)
			if err != nil {
				t.Fatal(err)
			}
			dq, dk, dv, err := Backward(Q, K, V, out, DO, lse, opt)
			if err != nil {
				t.Fatal(err)
			}
			for b, s := range tc.seqs {
				nk := int(used[b])
				// DropoutBatch: sequence b, checked alone, draws batch element b's mask.
				par := reference.Params{Batch: 1, SeqQ: s.nq, SeqK: nk, Heads: H, KVHeads: Hk, HeadDim: D, Causal: tc.causal,
					Dropout: float64(tc.dropout), Seed: 5, DropoutBatch: b}
				if tc.window != nil {
					par.Window, par.WindowLeft, par.WindowRight = true, tc.window.Left, tc.window.Right
				}
				if tc.alibi {
					par.ALiBi = to64(slopes[b*H : (b+1)*H])
				}
				if s.nq == 0 {
					continue
				}
				if nk == 0 {
					// No keys: O = 0, LSE = -Inf, zero gradients.
					for _, x := range out.Data[int(cuq[b])*H*D : int(cuq[b+1])*H*D] {
						if x != 0 {
							t.Fatalf("seq %d has no keys but O = %v", b, x)
						}
					}
					continue
				}
				checkVarLenSeq(t, Float32, b, par, q, k, v, do, tq, int(cuq[b]), int(cuk[b]), out, lse, dq, dk, dv)
			}
			// Keys past SeqUsedK get zero gradients.
			for b := range tc.seqs {
				for _, x := range dk.Data[(int(cuk[b])+int(used[b]))*Hk*D : int(cuk[b+1])*Hk*D] {
					if x != 0 {
						t.Fatalf("sequence %d: unused key has dK %v", b, x)
					}
				}
			}
		})
	}
}

// TestHiddenRows checks the rule for rows that see no key: O = 0,
// LSE = -Inf, zero gradients, no NaN anywhere.
func TestHiddenRows(t *testing.T) {
	c := tcase{b: 1, sq: 40, sk: 10, h: 2, hk: 2, d: 16, causal: true} // rows 0..29 see nothing
	cd := makeCase(c, 1)
	q, k, v, do := Dense(cd.q, 1, 40, 2, 16), Dense(cd.k, 1, 10, 2, 16), Dense(cd.v, 1, 10, 2, 16), Dense(cd.do, 1, 40, 2, 16)
	out, lse, err := Forward(q, k, v, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv, err := Backward(q, k, v, out, do, lse, &cd.opt)
	if err != nil {
		t.Fatal(err)
	}
	for h := 0; h < 2; h++ {
		for i := 0; i < 40; i++ {
			hidden := i < 30
			if l := lse[h*40+i]; hidden != math.IsInf(float64(l), -1) {
				t.Fatalf("row %d head %d: LSE %v", i, h, l)
			}
			for d := 0; d < 16; d++ {
				if hidden && (out.At(0, i, h, d) != 0 || dq.At(0, i, h, d) != 0) {
					t.Fatalf("hidden row %d: O %v dQ %v", i, out.At(0, i, h, d), dq.At(0, i, h, d))
				}
			}
		}
	}
	for _, x := range [][]float32{out.Data, dq.Data, dk.Data, dv.Data} {
		for _, y := range x {
			if math.IsNaN(float64(y)) {
				t.Fatal("NaN in output")
			}
		}
	}
	checkCase(t, c)
}

// TestDropoutStatistics: the kept fraction is 1-p and the output is
// unbiased: the mean over seeds of the dropout output approaches the output
// without dropout.
func TestDropoutStatistics(t *testing.T) {
	const n, p = 64, 0.4
	r := rand.New(rand.NewPCG(3, 3))
	// Head dim n and V = identity: O reads out P·z/(1-p) column by column.
	vdata := make([]float32, n*n)
	for j := 0; j < n; j++ {
		vdata[j*n+j] = 1
	}
	v := Dense(vdata, 1, n, 1, n)
	q, k := Dense(randSlice(r, n*n), 1, n, 1, n), Dense(randSlice(r, n*n), 1, n, 1, n)
	base, _, err := Forward(q, k, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	const seeds = 400
	mean := make([]float64, n*n)
	kept := 0
	for s := 0; s < seeds; s++ {
		out, _, err := Forward(q, k, v, &Options{Dropout: p, Seed: uint64(s)})
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range out.Data {
			mean[i] += float64(x) / seeds
			if x != 0 {
				kept++
			}
		}
	}
	frac := float64(kept) / float64(seeds*n*n)
	if math.Abs(frac-(1-p)) > 0.01 {
		t.Errorf("kept fraction %.4f, want %.2f", frac, 1-p)
	}
	// Each element is P·z/(1-p): its mean over seeds has standard error
	// P·sqrt(p/(1-p)/seeds); allow 5 standard errors.
	for i, m := range mean {
		b := float64(base.Data[i])
		if se := b * math.Sqrt(p/(1-p)/seeds); math.Abs(m-b) > 5*se+1e-6 {
			t.Fatalf("element %d: mean %.5f over %d seeds, want %.5f ± %.5f", i, m, seeds, b, 5*se)
		}
	}
}

// TestDropoutRepeatable: same seed, bit-identical; other seed, different.
func TestDropoutRepeatable(t *testing.T) {
	c := tcase{b: 1, sq: 70, sk: 70, h: 2, hk: 2, d: 16, dropout: 0.5}
	cd := makeCase(c, 2)
	q, k, v := Dense(cd.q, 1, 70, 2, 16), Dense(cd.k, 1, 70, 2, 16), Dense(cd.v, 1, 70, 2, 16)
	a, _, _ := Forward(q, k, v, &Options{Dropout: 0.5, Seed: 1})
	b, _, _ := Forward(q, k, v, &Options{Dropout: 0.5, Seed: 1, Workers: 3})
	c2, _, _ := Forward(q, k, v, &Options{Dropout: 0.5, Seed: 2})
	same, diff := true, false
	for i := range a.Data {
		same = same && math.Float32bits(a.Data[i]) == math.Float32bits(b.Data[i])
		diff = diff || a.Data[i] != c2.Data[i]
	}
	if !same || !diff {
		t.Fatalf("same seed identical: %v, other seed differs: %v", same, diff)
	}
}

// TestDropoutOneKeyRows covers dropout where every row sees exactly one key
// (window {0, 0}). The exact gradient through the softmax is then 0 and the
// plain float32 algorithm, which forms D = Σ_j P·dP, gets exactly 0; FA2
// forms D = dO·O once per row instead, and with the dropout scale inside O
// the cancellation in dS = P·(dP − D) leaves float32 rounding of dP. So the
// error rule (2·0 + 1e-6) is replaced here by the bound that rounding
// allows: |dS| ≤ 4·ε·|dP|, propagated to dQ and dK.
func TestDropoutOneKeyRows(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		for _, c := range []tcase{
			{b: 2, sq: 33, sk: 47, h: 4, hk: 2, d: 20, window: &Window{0, 0}, dropout: 0.2, bq: 12, bk: 16},
			{b: 1, sq: 40, sk: 40, h: 2, hk: 2, d: 64, window: &Window{0, 0}, dropout: 0.5, softcap: 2.5, alibi: 1},
		} {
			cd := makeCase(c, 11)
			q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
			do := Dense(cd.do, c.b, c.sq, c.h, c.d)
			out, lse, err := Forward(q, k, v, &cd.opt)
			if err != nil {
				t.Fatal(err)
			}
			checkForward(t, cd, out.Data, lse)
			dq, dk, dv, err := Backward(q, k, v, out, do, lse, &cd.opt)
			if err != nil {
				t.Fatal(err)
			}
			dq64, dk64, dv64 := reference.Backward64(cd.par, to64(cd.q), to64(cd.k), to64(cd.v), to64(cd.do))
			_, _, dv32 := reference.Backward32(plainPar(cd.par), cd.q, cd.k, cd.v, cd.do)
			if err := reference.Check("dV", dv.Data, dv32, dv64); err != nil {
				t.Error(err)
			}
			// |dP| ≤ |dO|·|V|·s; dQ = scale·dS·K, dK = scale·dSᵀ·Q summed
			// over the heads of a group.
			norm := func(x []float32) float64 {
				m := 0.0
				for i := 0; i < len(x); i += c.d {
					var s float64
					for _, y := range x[i : i+c.d] {
						s += float64(y) * float64(y)
					}
					m = math.Max(m, math.Sqrt(s))
				}
				return m
			}
			eps := math.Pow(2, -23)
			dsBound := 4 * eps * norm(cd.do) * norm(cd.v) / (1 - float64(c.dropout))
			scale := 1 / math.Sqrt(float64(c.d))
			for _, g := range []struct {
				name string
				got  []float32
				ref  []float64
				b    float64
			}{
				{"dQ", dq.Data, dq64, scale * dsBound * norm(cd.k)},
				{"dK", dk.Data, dk64, float64(c.h/c.hk) * scale * dsBound * norm(cd.q)},
			} {
				if e := reference.MaxAbsDiff32vs64(g.got, g.ref); e > g.b {
					t.Errorf("%v %s: error %.3g above the rounding bound %.3g", c, g.name, e, g.b)
				}
			}
		}
	})
}
