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
