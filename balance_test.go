package flashattn

import (
	"math"
	"testing"
)

// stepShape is a serving step as a VarLen call: decode rows (one query
// row each) over ctxMin..ctxMax keys, a prompt chunk of chunk rows over a
// cached prefix, and spec sequences verifying specToks rows over ctxMin
// keys, every sequence causal (bottom-right).
type stepShape struct {
	decode, ctxMin, ctxMax int
	chunk, prefix          int
	spec, specToks         int
}

// varLen returns the step's VarLen and its packed query rows and keys.
func (st stepShape) varLen() (vl *VarLen, sq, sk int) {
	cuQ, cuK := []int32{0}, []int32{0}
	add := func(nq, nk int) {
		cuQ = append(cuQ, cuQ[len(cuQ)-1]+int32(nq))
		cuK = append(cuK, cuK[len(cuK)-1]+int32(nk))
	}
	for i := range st.decode {
		ctx := st.ctxMin
		if st.decode > 1 {
			ctx += (st.ctxMax - st.ctxMin) * i / (st.decode - 1)
		}
		add(1, ctx+1)
	}
	if st.chunk > 0 {
		add(st.chunk, st.prefix+st.chunk)
	}
	for range st.spec {
		add(st.specToks, st.ctxMin+st.specToks)
	}
	return &VarLen{CuSeqlensQ: cuQ, CuSeqlensK: cuK}, int(cuQ[len(cuQ)-1]), int(cuK[len(cuK)-1])
}

// TestServeStepBalance: in a serving step's one call the forward's largest
// task is at most 1/64 of its work (16 workers get four tasks' worth each),
// whether the prompt chunk brings few row blocks (long prefix: super-blocks)
// or many (a prompt's first chunk: blocks of BlockQ rows, more than
// splitTarget of them, which once left every decode row unsplit: its 32k
// keys a twentieth of the step).
func TestServeStepBalance(t *testing.T) {
	for _, st := range []stepShape{
		{decode: 32, ctxMin: 4096, ctxMax: 32768, chunk: 512, prefix: 2048, spec: 4, specToks: 4},
		{decode: 32, ctxMin: 4096, ctxMax: 32768, chunk: 512, spec: 4, specToks: 4},
		{decode: 32, ctxMin: 4096, ctxMax: 32768, chunk: 2048, prefix: 2048, spec: 4, specToks: 4},
		{decode: 8, ctxMin: 32768, ctxMax: 32768, chunk: 1024},
		{decode: 64, ctxMin: 1024, ctxMax: 8192},
	} {
		vl, sq, sk := st.varLen()
		s := Shape{Batch: 1, Heads: 32, KVHeads: 4, SeqQ: sq, SeqK: sk, Dim: 128}
		tr, err := CountTraffic(s, &Options{Causal: true, VarLen: vl}, 1<<20, PassForward)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v: %d tasks, largest %.4f", st, tr.ForwardTasks, tr.ForwardLargestTask)
		if want := 1.0 / (unitsPerWorker * 16); tr.ForwardLargestTask > want || tr.ForwardTasks < unitsPerWorker*16 {
			t.Errorf("%+v: %d tasks, the largest %.4f of the work; want ≥ %d tasks, ≤ %.4f",
				st, tr.ForwardTasks, tr.ForwardLargestTask, unitsPerWorker*16, want)
		}
	}
}

// TestServeStepSplitsBitIdentical: a call whose long decoding row is split
// although its prompt brings more than splitTarget row blocks gives the same
// bits for every worker count, and what one call per sequence gives within
// float32 rounding.
func TestServeStepSplitsBitIdentical(t *testing.T) {
	st := stepShape{decode: 2, ctxMin: 2000, ctxMax: 6000, chunk: 1100, spec: 1, specToks: 3}
	vl, sq, sk := st.varLen()
	const h, hk, d = 4, 2, 16
	cd := makeCase(tcase{b: 1, sq: sq, sk: sk, h: h, hk: hk, d: d}, 5)
	q, k, v := Dense(cd.q, 1, sq, h, d), Dense(cd.k, 1, sk, hk, d), Dense(cd.v, 1, sk, hk, d)
	o := Options{Causal: true, VarLen: vl, BlockQ: 16, BlockK: 32}
	tr, err := CountTraffic(Shape{Batch: 1, Heads: h, KVHeads: hk, SeqQ: sq, SeqK: sk, Dim: d}, &o, 1<<20, PassForward)
	if err != nil {
		t.Fatal(err)
	}
	if tr.ForwardLargestTask > 1.0/64 {
		t.Fatalf("the largest task is %.4f of the work: the case does not split its decode rows", tr.ForwardLargestTask)
	}
	var first []float32
	for w := 1; w <= 4; w++ {
		o.Workers = w
		out, lse, err := Forward(q, k, v, &o)
		if err != nil {
			t.Fatal(err)
		}
		res := append(append([]float32{}, out.Data...), lse...)
		if w == 1 {
			first = res
			continue
		}
		for i := range res {
			if math.Float32bits(res[i]) != math.Float32bits(first[i]) {
				t.Fatalf("workers=%d: value %d is %v, %v with one worker", w, i, res[i], first[i])
			}
		}
	}
	for b := 0; b+1 < len(vl.CuSeqlensQ); b++ {
		q0, q1, k0, k1 := int(vl.CuSeqlensQ[b]), int(vl.CuSeqlensQ[b+1]), int(vl.CuSeqlensK[b]), int(vl.CuSeqlensK[b+1])
		one, _, err := Forward(Dense(cd.q[q0*h*d:q1*h*d], 1, q1-q0, h, d), Dense(cd.k[k0*hk*d:k1*hk*d], 1, k1-k0, hk, d),
			Dense(cd.v[k0*hk*d:k1*hk*d], 1, k1-k0, hk, d), &Options{Causal: true})
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range one.Data {
			if y := first[q0*h*d+i]; math.Abs(float64(x-y)) > 1e-5 {
				t.Fatalf("sequence %d: value %d is %v, %v in its own call", b, i, y, x)
			}
		}
	}
}

// TestForwardSplitBalance: on designWorkers (16) workers the forward's
// largest task is at most 1/64 of its work and it has at least 64 tasks,
// for the shapes the schedule is designed for — dense and causal, d 64 and
// 128, one to four sequences of 8 to 32 query heads (GQA too), 1k to 64k
// rows, VarLen batches and serving steps — at a 1 MiB cache, where K and V
// past 512 KiB per head walk in super-blocks, 64–128 of them in a B1 H8
// call. Causal blocks are unequal: 64 of them leave the last ones twice the
// mean, which the rule must still split. (B1 H8 N1024 d128 causal is left
// out: its 40 super-blocks see at most two 512-key tiles, so no split rule
// reaches 1/64.)
func TestForwardSplitBalance(t *testing.T) {
	type balanceCase struct {
		s Shape
		o Options
	}
	var cases []balanceCase
	for _, d := range []int{64, 128} {
		for _, causal := range []bool{false, true} {
			for _, b := range []int{1, 4} {
				for _, h := range []int{8, 32} {
					for _, n := range []int{1024, 4096, 16384, 65536} {
						if d == 128 && causal && b == 1 && h == 8 && n == 1024 {
							continue
						}
						for _, hk := range []int{h, h / 4} {
							cases = append(cases, balanceCase{Shape{Batch: b, Heads: h, KVHeads: hk, SeqQ: n, SeqK: n, Dim: d}, Options{Causal: causal}})
						}
					}
				}
			}
		}
	}
	for _, lens := range [][]int32{{4096, 2048, 1024, 512}, {8192, 300, 300, 300}, {16384, 4096}} {
		cu := []int32{0}
		for _, n := range lens {
			cu = append(cu, cu[len(cu)-1]+n)
		}
		n := int(cu[len(cu)-1])
		for _, d := range []int{64, 128} {
			vl := &VarLen{CuSeqlensQ: cu, CuSeqlensK: cu}
			cases = append(cases,
				balanceCase{Shape{Batch: 1, Heads: 8, KVHeads: 2, SeqQ: n, SeqK: n, Dim: d}, Options{VarLen: vl}},
				balanceCase{Shape{Batch: 1, Heads: 8, KVHeads: 2, SeqQ: n, SeqK: n, Dim: d}, Options{Causal: true, VarLen: vl}})
		}
	}
	for _, st := range []stepShape{
		{decode: 32, ctxMin: 4096, ctxMax: 32768, chunk: 512, prefix: 2048, spec: 4, specToks: 4},
		{decode: 16, ctxMin: 1024, ctxMax: 8192, chunk: 4096},
		{decode: 4, ctxMin: 65536, ctxMax: 65536, chunk: 2048, prefix: 8192},
	} {
		vl, sq, sk := st.varLen()
		cases = append(cases, balanceCase{Shape{Batch: 1, Heads: 8, KVHeads: 2, SeqQ: sq, SeqK: sk, Dim: 128}, Options{Causal: true, VarLen: vl}})
	}
	const workers = 16
	for _, c := range cases {
		tr, err := CountTraffic(c.s, &c.o, 1<<20, PassForward)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1.0 / (unitsPerWorker * workers); tr.ForwardLargestTask > want || tr.ForwardTasks < unitsPerWorker*workers {
			t.Errorf("%+v causal %v varlen %v: %d tasks, the largest %.4f of the work; want ≥ %d tasks, ≤ %.4f",
				c.s, c.o.Causal, c.o.VarLen != nil, tr.ForwardTasks, tr.ForwardLargestTask, unitsPerWorker*workers, want)
		}
	}
}

// TestForwardNoSplitWhenBalanced: a dense call of 64 or more nearly equal
// row blocks already balances 16 workers, so it splits none
// of them (each split costs partial-result rows, a merge and a tail): its
// tasks are its row blocks. B1 H8 N4096 is the benchmark's shape: 72
// super-blocks at d 64, 176 at d 128, once split into 280 and 344 tasks.
func TestForwardNoSplitWhenBalanced(t *testing.T) {
	for _, s := range []Shape{
		{Batch: 1, Heads: 8, SeqQ: 4096, SeqK: 4096, Dim: 64},
		{Batch: 1, Heads: 8, SeqQ: 4096, SeqK: 4096, Dim: 128},
		{Batch: 2, Heads: 16, KVHeads: 4, SeqQ: 2048, SeqK: 2048, Dim: 128},
	} {
		tr, err := CountTraffic(s, nil, 1<<20, PassForward)
		if err != nil {
			t.Fatal(err)
		}
		blocks := s.Batch * s.Heads * ceilDiv(s.SeqQ, tr.SuperBlockQ)
		if blocks < unitsPerWorker*16 {
			t.Fatalf("%+v: %d row blocks, the case needs ≥ %d", s, blocks, unitsPerWorker*16)
		}
		if tr.ForwardTasks != blocks {
			t.Errorf("%+v: %d tasks for %d balanced row blocks (super-blocks of %d rows): key splits where none are needed",
				s, tr.ForwardTasks, blocks, tr.SuperBlockQ)
		}
	}
}
