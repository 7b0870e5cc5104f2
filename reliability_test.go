package flashattn

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// huge is 2^62 on 64-bit platforms, 2^30 on 32-bit ones.
const huge = 1 << (bits.UintSize - 2)

// TestHugeSizes: sizes and strides whose products overflow int are refused
// with an error, never a panic (before, they wrapped to small numbers and
// passed validation).
func TestHugeSizes(t *testing.T) {
	small := NewTensor(1, 4, 2, 8)
	data := make([]float32, 64)
	for _, tc := range []struct {
		name string
		q    Tensor
	}{
		{"seq huge", Tensor{Data: data, Batch: 1, Seq: huge, Heads: 2, Dim: 8}},
		{"heads·dim overflow", Tensor{Data: data, Batch: 1, Seq: 2, Heads: 1 << (bits.UintSize/2 + 4), Dim: 1 << (bits.UintSize/2 - 2)}},
		{"seq stride huge", Tensor{Data: data, Batch: 1, Seq: 4, Heads: 2, Dim: 8, SeqStride: huge}},
		{"batch stride wraps", Tensor{Data: data, Batch: 1 << 3, Seq: 4, Heads: 2, Dim: 8, BatchStride: math.MaxInt/4 + 3}},
		{"head stride max", Tensor{Data: data, Batch: 1, Seq: 1, Heads: 3, Dim: 8, HeadStride: math.MaxInt}},
		{"negative", Tensor{Data: data, Batch: 1, Seq: 4, Heads: 2, Dim: 8, HeadStride: -8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panic: %v", r)
					}
				}()
				_, _, err = Forward(tc.q, small, small, nil)
			}()
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Arg != "q" {
				t.Fatalf("error %v, want an *ArgError for q", err)
			}
		})
	}
}

// panicky panics on one task: the worker pool must turn it into an error.
type panicky struct {
	at  int
	ran atomic.Int64
}

func (p *panicky) runTask(_ *workspace, t int) {
	p.ran.Add(1)
	if t == p.at {
		panic("injected")
	}
	time.Sleep(100 * time.Microsecond)
}

func TestWorkerPanicIsAnError(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		p := &panicky{at: 3}
		err := parallel(workers, 1000, p)
		if !errors.Is(err, ErrInternal) || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("workers %d: error %v, want ErrInternal with the panic value", workers, err)
		}
		if n := p.ran.Load(); n >= 1000 {
			t.Errorf("workers %d: all %d tasks ran after the panic", workers, n)
		}
	}
	// The pool still works afterwards.
	out, _, err := Forward(NewTensor(1, 3, 1, 4), NewTensor(1, 3, 1, 4), NewTensor(1, 3, 1, 4), nil)
	if err != nil || len(out.Data) != 12 {
		t.Fatal(err)
	}
}

// TestOverlappingOutputs: outputs that share memory with an input or with
// each other are refused; the documented in-place form (out == q) and
// interleaved gradient views of one packed buffer work.
func TestOverlappingOutputs(t *testing.T) {
	const b, s, h, d = 1, 20, 2, 8
	r := rand.New(rand.NewPCG(1, 1))
	qkv := randSlice(r, b*s*3*h*d)
	q, k, v := PackedQKV(qkv, b, s, h, d)
	opts := &Options{Causal: true}
	out, lse, err := Forward(q, k, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	do := Dense(randSlice(r, b*s*h*d), b, s, h, d)
	wantDq, wantDk, wantDv, err := Backward(q, k, v, out, do, lse, opts)
	if err != nil {
		t.Fatal(err)
	}

	bad := []struct {
		name string
		err  error
	}{
		{"lse in q", ForwardInto(NewTensor(b, s, h, d), qkv[5:5+b*h*s], q, k, v, opts)},
		{"out is k", ForwardInto(k, nil, q, k, v, opts)},
		{"out and lse", func() error {
			o := NewTensor(b, s, h, d)
			return ForwardInto(o, o.Data[10:10+b*h*s], q, k, v, opts)
		}()},
		{"dk is k", BackwardInto(NewTensor(b, s, h, d), k, NewTensor(b, s, h, d), q, k, v, out, do, lse, opts)},
		{"dk and dv", func() error {
			g := NewTensor(b, s, h, d)
			return BackwardInto(NewTensor(b, s, h, d), g, g, q, k, v, out, do, lse, opts)
		}()},
		{"dq in dout", BackwardInto(do, NewTensor(b, s, h, d), NewTensor(b, s, h, d), q, k, v, out, do, lse, opts)},
		{"dv in lse", func() error {
			buf := make([]float32, 2000)
			l := buf[:len(lse)]
			copy(l, lse)
			return BackwardInto(NewTensor(b, s, h, d), NewTensor(b, s, h, d), Dense(buf[3:], b, s, h, d), q, k, v, out, do, l, opts)
		}()},
	}
	for _, tc := range bad {
		var ae *ArgError
		if !errors.As(tc.err, &ae) || !strings.Contains(tc.err.Error(), "memory") {
			t.Errorf("%s: error %v, want a shared-memory *ArgError", tc.name, tc.err)
		}
	}

	// dQ, dK, dV as interleaved views of one gradient buffer: accepted.
	grad := make([]float32, len(qkv))
	dq, dk, dv := PackedQKV(grad, b, s, h, d)
	if err := BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts); err != nil {
		t.Fatalf("packed gradients: %v", err)
	}
	for i, pair := range [][2]Tensor{{dq, wantDq}, {dk, wantDk}, {dv, wantDv}} {
		if g, w := gather(pair[0]), gather(pair[1]); !equalBits(g, w) {
			t.Errorf("packed gradient %d differs from the dense one", i)
		}
	}
	// out == q: O overwrites Q.
	qCopy := append([]float32(nil), qkv...)
	q2, k2, v2 := PackedQKV(qCopy, b, s, h, d)
	if err := ForwardInto(q2, nil, q2, k2, v2, opts); err != nil {
		t.Fatalf("in place: %v", err)
	}
	if !equalBits(gather(q2), gather(out)) {
		t.Error("in-place output differs")
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestPyTorchLayouts: [B,H,S,D] and [S,B,H,D] strided views give the same
// bits as the dense layout.
func TestPyTorchLayouts(t *testing.T) {
	const B, S, H, D = 2, 33, 3, 16
	r := rand.New(rand.NewPCG(2, 2))
	dense := randSlice(r, B*S*H*D)
	layouts := map[string]func(b, s, h int) int{
		"bhsd": func(b, s, h int) int { return ((b*H+h)*S + s) * D },
		"sbhd": func(b, s, h int) int { return ((s*B+b)*H + h) * D },
	}
	want, wantLSE, err := Forward(Dense(dense, B, S, H, D), Dense(dense, B, S, H, D), Dense(dense, B, S, H, D), &Options{Causal: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, at := range layouts {
		buf := make([]float32, len(dense))
		for b := 0; b < B; b++ {
			for s := 0; s < S; s++ {
				for h := 0; h < H; h++ {
					copy(buf[at(b, s, h):][:D], dense[((b*S+s)*H+h)*D:][:D])
				}
			}
		}
		tt := Tensor{Data: buf, Batch: B, Seq: S, Heads: H, Dim: D,
			BatchStride: at(1, 0, 0), SeqStride: at(0, 1, 0), HeadStride: at(0, 0, 1)}
		out, lse, err := Forward(tt, tt, tt, &Options{Causal: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !equalBits(out.Data, want.Data) || !equalBits(lse, wantLSE) {
			t.Errorf("%s: results differ from the dense layout", name)
		}
		o2 := Tensor{Data: make([]float32, len(dense)), Batch: B, Seq: S, Heads: H, Dim: D,
			BatchStride: at(1, 0, 0), SeqStride: at(0, 1, 0), HeadStride: at(0, 0, 1)}
		if err := ForwardInto(o2, nil, tt, tt, tt, &Options{Causal: true}); err != nil {
			t.Fatalf("%s out: %v", name, err)
		}
		if !equalBits(gather(o2), want.Data) {
			t.Errorf("%s: strided output differs", name)
		}
	}
}

// TestNaNPropagates: a NaN in one query row gives NaN in that row's O and
// LSE on every kernel path, also when every tile the row sees is partially
// masked, and NaN in its dQ; the other rows stay finite.
func TestNaNPropagates(t *testing.T) {
	for _, c := range []tcase{
		{b: 1, sq: 40, sk: 40, h: 2, hk: 1, d: 16},
		{b: 1, sq: 40, sk: 40, h: 2, hk: 1, d: 16, causal: true},
		{b: 1, sq: 40, sk: 40, h: 2, hk: 1, d: 16, window: &Window{Left: 3, Right: 2}},
		{b: 1, sq: 1, sk: 300, h: 4, hk: 2, d: 32},                                  // stacked decode rows, key splits
		{b: 1, sq: 40, sk: 40, h: 2, hk: 1, d: 16, causal: true, mods: modCases[6]}, // element mask on every tile
	} {
		forEachKernel(t, func(t *testing.T) {
			cd := makeCase(c, 3)
			row := min(17, c.sq-1)
			for dd := 0; dd < c.d; dd++ {
				cd.q[(row*c.h+1)*c.d+dd] = float32(math.NaN()) // head 1 of that row
			}
			q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
			out, lse, err := Forward(q, k, v, &cd.opt)
			if err != nil {
				t.Fatal(err)
			}
			dq, _, _, err := Backward(q, k, v, out, Dense(cd.do, c.b, c.sq, c.h, c.d), lse, &cd.opt)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < c.sq; i++ {
				for h := 0; h < c.h; h++ {
					bad := i == row && h == 1
					l := lse[h*c.sq+i]
					if bad != math.IsNaN(float64(l)) {
						t.Fatalf("%v: row %d head %d LSE %v", c, i, h, l)
					}
					for dd := 0; dd < c.d; dd++ {
						o := out.Data[(i*c.h+h)*c.d+dd]
						g := dq.Data[(i*c.h+h)*c.d+dd]
						if bad != math.IsNaN(float64(o)) || bad && !math.IsNaN(float64(g)) {
							t.Fatalf("%v: row %d head %d: O %v, dQ %v", c, i, h, o, g)
						}
					}
				}
			}
		})
	}
}

// TestBlockTableCopied: the call reads a copy of the page table, so a caller
// that scribbles over it while calls run cannot send them out of bounds.
func TestBlockTableCopied(t *testing.T) {
	if raceEnabled {
		t.Skip("the test writes the table concurrently on purpose: a data race by design")
	}
	const blocks, bs, hk, d = 8, 16, 2, 16
	cache := NewTensor(blocks, bs, hk, d)
	for i := range cache.Data {
		cache.Data[i] = float32(i%13) / 13
	}
	table := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	c := &KVCache{SeqLens: []int32{100, 50}, BlockTable: table, BlocksPerSeq: 4}
	q := NewTensor(2, 1, 4, d)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				table[i%8] = int32(1 << 30 * (i % 2))
			}
		}
	}()
	for i := 0; i < 300; i++ {
		Forward(q, cache, cache, &Options{KVCache: c}) // an error or a result; never a crash
	}
	close(stop)
	<-done
}

// TestTaskCounts: the forward's and the backward's task lists give every
// worker at least four tasks for the shapes of the scaling targets at 16
// and 64 workers, and with few KV heads (GQA, one sequence) at 16. (The KV
// pass has at most kv_heads · seqlen/64 tasks per sequence: two KV heads of
// 4096 keys give 128.)
func TestTaskCounts(t *testing.T) {
	for _, sh := range []struct {
		b, h, hk, n, d int
		workers        []int
	}{
		{1, 8, 8, 4096, 128, []int{16, 64}}, {4, 16, 16, 2048, 128, []int{16, 64}},
		{1, 8, 2, 4096, 64, []int{16}}, {1, 2, 1, 4096, 128, []int{16}},
	} {
		q := NewTensor(sh.b, sh.n, sh.h, sh.d)
		kv := NewTensor(sh.b, sh.n, sh.hk, sh.d)
		for _, workers := range sh.workers {
			for _, causal := range []bool{false, true} {
				c, err := newCall(q, kv, kv, &Options{Workers: workers, Causal: causal})
				if err != nil {
					t.Fatal(err)
				}
				var blocks []rowBlock
				var ft []fwdTask
				var bt []bwdTask
				var qt []rowBlock
				fwd, _, _ := c.plan.forwardTasks(&blocks, &ft)
				kvTasks, withDQ := c.plan.backwardTasks(&bt, c.plan.workers)
				dq := 0
				if !withDQ {
					dq = len(c.plan.dqTasks(&qt, c.plan.workers))
				}
				want := unitsPerWorker * workers
				if len(kvTasks) < want || !withDQ && dq < want {
					t.Errorf("%+v causal %v, %d workers: %d KV, %d dQ tasks; want ≥ %d each",
						sh, causal, workers, len(kvTasks), dq, want)
				}
				// The forward's splits do not depend on the worker count:
				// four tasks per worker up to designWorkers, and beyond,
				// its tasks taken heaviest first by the free workers end
				// within 15% of an even share.
				span := forwardSpan(fwd, workers)
				t.Logf("%+v causal %v, %d workers: %d forward tasks, span %.3f of an even share", sh, causal, workers, len(fwd), span)
				if len(fwd) < unitsPerWorker*min(workers, designWorkers) || span > 1.15 {
					t.Errorf("%+v causal %v, %d workers: %d forward tasks, ending at %.3f of an even share; want ≥ %d, ≤ 1.15",
						sh, causal, workers, len(fwd), span, unitsPerWorker*min(workers, designWorkers))
				}
				c.release()
			}
		}
	}
}

// forwardSpan returns how long the forward's tasks (heaviest first, by
// their estimated cost) take on workers workers that each take the next
// task when free, as a fraction of an even share of their total cost.
func forwardSpan(tasks []fwdTask, workers int) float64 {
	busy := make([]int, workers)
	total := 0
	for _, tk := range tasks {
		free := slices.Index(busy, slices.Min(busy))
		busy[free] += tk.cost
		total += tk.cost
	}
	return float64(slices.Max(busy)) * float64(workers) / float64(total)
}

// TestNilContext: a nil context is a bad argument (an *ArgError naming
// ctx), not a worker panic reported as ErrInternal; nothing is computed.
func TestNilContext(t *testing.T) {
	q := Dense([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 1, 2, 1, 4)
	out := NewTensor(1, 2, 1, 4)
	out.Data[0] = 42
	g := Grads{DQ: NewTensor(1, 2, 1, 4), DK: NewTensor(1, 2, 1, 4), DV: NewTensor(1, 2, 1, 4)}
	lse := make([]float32, 2)
	for name, call := range map[string]func() error{
		"ForwardContext": func() error {
			_, _, err := ForwardContext(nil, q, q, q, nil) //nolint:staticcheck // a nil context on purpose
			return err
		},
		"ForwardIntoContext": func() error { return ForwardIntoContext(nil, out, nil, q, q, q, nil) }, //nolint:staticcheck
		"BackwardGrads": func() error {
			return BackwardGrads(nil, g, q, q, q, q, q, lse, nil, nil) //nolint:staticcheck
		},
	} {
		var ae *ArgError
		if err := call(); !errors.As(err, &ae) || ae.Arg != "ctx" || errors.Is(err, ErrInternal) {
			t.Errorf("%s(nil, ...): error %v, want an *ArgError for ctx", name, err)
		}
	}
	if out.Data[0] != 42 {
		t.Errorf("ForwardIntoContext(nil, ...) wrote out: %v", out.Data[:4])
	}
}
