package flashattn

import (
	"math"
	"testing"
)

// TestWidenSuperBlocks checks that with few workers the forward joins the
// super-blocks of one head into tasks of up to wideSuperRows rows (widen) —
// also the row blocks of one microtile where the cache is too small for
// super-blocks of two (a 64 KiB cache here, like d = 256 on a 1 MiB L2) —
// every query row in exactly one task, that with many workers it does not,
// and that the results are the same bits either way, on every float32
// kernel set and for bfloat16 inputs (the default 16-bit products). A
// small Options.CacheBytes makes a small call walk super-blocks.
func TestWidenSuperBlocks(t *testing.T) {
	const b, n, h, d = 1, 1024, 8, 64
	q, k, v := NewTensor(b, n, h, d), NewTensor(b, n, h, d), NewTensor(b, n, h, d)
	for i := range q.Data {
		q.Data[i] = float32(math.Sin(float64(i) * 0.37))
		k.Data[i] = float32(math.Cos(float64(i) * 0.11))
		v.Data[i] = float32(i%17)/17 - 0.5
	}
	caches := []int{256 << 10, 64 << 10}
	for _, cache := range caches {
		for _, workers := range []int{1, 2, 64} {
			widenCase(t, q, k, v, cache, workers)
		}
	}
	// The bits: unmasked, causal (no two blocks see the same keys) and a
	// window whose first blocks see the same keys, partly masked (joined
	// super-blocks; blocks of one microtile not joined).
	var cases []Options
	for _, cache := range caches {
		for _, o := range []Options{{}, {Causal: true}, {Window: &Window{Left: 100, Right: 2000}}} {
			o.CacheBytes = cache
			cases = append(cases, o)
		}
	}
	qh, kh, vh := toType(q.Data, BFloat16, b, n, h, d), toType(k.Data, BFloat16, b, n, h, d), toType(v.Data, BFloat16, b, n, h, d)
	forEachKernel(t, func(t *testing.T) {
		for _, in := range [][3]Tensor{{q, k, v}, {qh, kh, vh}} {
			for _, c := range cases {
				var first Tensor
				for _, workers := range []int{1, 64} {
					o := c
					o.Workers = workers
					out, _, err := Forward(in[0], in[1], in[2], &o)
					if err != nil {
						t.Fatal(err)
					}
					out = asFloat32(t, out)
					if workers == 1 {
						first = out
						continue
					}
					for i, x := range out.Data {
						if math.Float32bits(x) != math.Float32bits(first.Data[i]) {
							t.Fatalf("%v, cache %d, causal %v, window %v, %d workers: O[%d] = %v, with one worker (joined tasks) %v",
								in[0].DType(), c.CacheBytes, c.Causal, c.Window, workers, i, x, first.Data[i])
						}
					}
				}
			}
		}
	})
}

// widenCase checks widen's tasks for q, k, v with a cache of cache bytes
// and workers workers (see TestWidenSuperBlocks).
func widenCase(t *testing.T, q, k, v Tensor, cache, workers int) {
	h, n := q.Heads, q.Seq
	c, err := newCall(q, k, v, &Options{CacheBytes: cache, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	p := &c.plan
	var blocks []rowBlock
	var ft []fwdTask
	var last []int32
	tasks, _, _ := p.forwardTasks(&blocks, &ft)
	nBlocks, superQ, bq, dp := len(tasks), p.superQ, p.blockQ, p.dimPad
	tasks = p.widen(tasks, &last)
	rows := make([]int, h*n)
	tallest := 0
	for _, tk := range tasks {
		tallest = max(tallest, tk.height())
		for r := tk.i0; r < tk.i1; r++ {
			rows[tk.h0*n+r]++
		}
	}
	c.release()
	for i, c := range rows {
		if c != 1 {
			t.Fatalf("cache %d, %d workers: head %d row %d in %d tasks, want 1", cache, workers, i/n, i%n, c)
		}
	}
	if wideSuperRows/superQ < 2 || 4*n*2*dp <= cache/2 {
		t.Fatalf("cache %d: super-blocks of %d rows, tiles of %d: the case does not test widen", cache, superQ, bq)
	}
	joined := workers == 1
	if got := len(tasks) < nBlocks && tallest > superQ && tallest <= wideSuperRows; got != joined {
		t.Errorf("cache %d, %d workers: %d row blocks of up to %d rows → %d tasks of up to %d rows; want joined %v (at most %d rows)",
			cache, workers, nBlocks, superQ, len(tasks), tallest, joined, wideSuperRows)
	}
}
