package flashattn

import (
	"math"
	"testing"
)

// TestWidenSuperBlocks checks that with few workers the forward joins the
// super-blocks of one head into tasks of up to wideSuperRows rows (widen),
// every query row in exactly one task, that with many workers it does not,
// and that the results are the same bits either way, on every float32
// kernel set and for bfloat16 inputs (the default 16-bit products). A
// small Options.CacheBytes makes a small call walk super-blocks.
func TestWidenSuperBlocks(t *testing.T) {
	const b, n, h, d, cache = 1, 1024, 8, 64, 256 << 10
	q, k, v := NewTensor(b, n, h, d), NewTensor(b, n, h, d), NewTensor(b, n, h, d)
	for i := range q.Data {
		q.Data[i] = float32(math.Sin(float64(i) * 0.37))
		k.Data[i] = float32(math.Cos(float64(i) * 0.11))
		v.Data[i] = float32(i%17)/17 - 0.5
	}
	for _, workers := range []int{1, 2, 64} {
		c, err := newCall(q, k, v, &Options{CacheBytes: cache, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		p := &c.plan
		var blocks []rowBlock
		var ft []fwdTask
		var last []int32
		tasks, _, _ := p.forwardTasks(&blocks, &ft)
		nBlocks, superQ, bq := len(tasks), p.superQ, p.blockQ
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
				t.Fatalf("%d workers: head %d row %d in %d tasks, want 1", workers, i/n, i%n, c)
			}
		}
		if superQ <= bq || wideSuperRows/superQ < 2 {
			t.Fatalf("super-blocks of %d rows, tiles of %d: the case does not test widen", superQ, bq)
		}
		joined := workers == 1
		if got := len(tasks) < nBlocks && tallest > superQ && tallest <= wideSuperRows; got != joined {
			t.Errorf("%d workers: %d row blocks of up to %d rows → %d tasks of up to %d rows; want joined %v (at most %d rows)",
				workers, nBlocks, superQ, len(tasks), tallest, joined, wideSuperRows)
		}
	}
	qh, kh, vh := toType(q.Data, BFloat16, b, n, h, d), toType(k.Data, BFloat16, b, n, h, d), toType(v.Data, BFloat16, b, n, h, d)
	forEachKernel(t, func(t *testing.T) {
		for _, in := range [][3]Tensor{{q, k, v}, {qh, kh, vh}} {
			var first Tensor
			for _, workers := range []int{1, 64} {
				out, _, err := Forward(in[0], in[1], in[2], &Options{CacheBytes: cache, Workers: workers})
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
						t.Fatalf("%v, %d workers: O[%d] = %v, with one worker (joined super-blocks) %v", in[0].DType(), workers, i, x, first.Data[i])
					}
				}
			}
		}
	})
}
