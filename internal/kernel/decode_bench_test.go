package kernel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkDecode measures the decode kernels on a KV cache much larger
// than the last-level cache (by default 4 KV heads of 128 dims and as many
// keys as make 128 MiB of K and as much of V: 65536 keys in float32,
// 131072 in bf16/fp16, 245760 in q8_0, 465920 in q4_0, 262144 in fp8) against a plain read of the same
// bytes (ReadSum), the two timed alternately within each iteration so
// that both see the same machine load. It reports
//
//	GB/s       cache bytes read per second by the kernels
//	read-GB/s  the same bytes per second by ReadSum
//	ratio      GB/s / read-GB/s
//	GFLOP/s    2·m FLOPs per cache element read
//	of-peak    GFLOP/s over the FMA peak (FMAPeak, also timed alternately)
//
// for Scores alone (K), Accum alone (V) and a decode step (per block of
// 1024 keys: Scores then Accum, as the attention core runs them), with m
// query rows per KV head and 1 or 2 goroutines. S and P rows are n+16
// floats apart. With the interleaved layout and m = 1 the heads-scores,
// heads-accum and heads-step runs do the same with the multi-head kernels
// (ScoresHeads …), one call for every head of a block of keys, and with
// m > 1 where GroupFast holds the group-… runs with the grouped-query
// kernels (ScoresGroup …).
// Environment:
//
//	FLASHATTN_DECODE_BENCH=heads,keys,dim  the cache shape
//	FLASHATTN_DECODE_LAYOUT=interleaved    the heads of a key side by side
//	                                       (flash-attn's [keys, heads, dim])
//	                                       instead of one after the other
//	FLASHATTN_DECODE_BLOCK=keys            keys per call (default 1024)
//	FLASHATTN_DECODE_PAD=0                 S and P rows n floats apart
func BenchmarkDecode(b *testing.B) {
	requireSets(b)
	heads, keys, dim := 4, 0, 128
	if s := os.Getenv("FLASHATTN_DECODE_BENCH"); s != "" {
		if _, err := fmt.Sscanf(s, "%d,%d,%d", &heads, &keys, &dim); err != nil {
			b.Fatalf("FLASHATTN_DECODE_BENCH=%q: want heads,keys,dim", s)
		}
	}
	interleaved := os.Getenv("FLASHATTN_DECODE_LAYOUT") == "interleaved"
	dk := Active().Decode
	for _, typ := range cacheTypes {
		n := keys
		if n == 0 {
			n = (128 << 20) / heads / typ.RowBytes(dim) &^ 1023
		}
		var c *benchCache // built by the first run of the type that the -bench pattern selects
		cache := func() *benchCache {
			if c == nil {
				c = newBenchCache(typ, heads, n, dim, interleaved)
			}
			return c
		}
		for _, m := range []int{1, 2, 4, 8, 16} {
			for _, threads := range []int{1, 2} {
				ops := []string{"scores", "accum", "step"}
				if interleaved && m == 1 {
					ops = append(ops, "heads-scores", "heads-accum", "heads-step")
				}
				if interleaved && (dk.GroupFast(true, typ, m, heads) || dk.GroupFast(false, typ, m, heads)) {
					ops = append(ops, "group-scores", "group-accum", "group-step")
				}
				for _, op := range ops {
					name := fmt.Sprintf("%s/%s/m=%d/t=%d/%s", dk.Name, typ, m, threads, op)
					b.Run(name, func(b *testing.B) { cache().run(b, dk, m, threads, op) })
				}
			}
		}
	}
}

// benchCache is a K and a V cache of heads×keys rows of dim values.
type benchCache struct {
	typ              cacheType
	heads, keys, dim int
	interleaved      bool
	kb, vb           []byte // the caches' bytes
	row              int    // row length in bytes
}

func newBenchCache(typ cacheType, heads, keys, dim int, interleaved bool) *benchCache {
	c := &benchCache{typ: typ, heads: heads, keys: keys, dim: dim, interleaved: interleaved, row: typ.RowBytes(dim)}
	r := rand.New(rand.NewPCG(1, 2))
	n := heads * keys
	x := make([]float32, dim)
	fill := func() []byte {
		rb := c.row
		s := Bytes(make([]float32, (n*rb+3)/4))[:n*rb] // aligned for float32
		for j := 0; j < n; j++ {
			for i := range x {
				x[i] = r.Float32() - 0.5
			}
			if err := typ.Quantize(s[j*rb:(j+1)*rb], x); err != nil {
				panic(err)
			}
		}
		return s
	}
	c.kb = fill()
	c.vb = fill()
	return c
}

// head returns the byte offset of head h's first row and the row stride.
func (c *benchCache) head(h int) (off, ld int) {
	if c.interleaved {
		return h * c.row, c.heads * c.row
	}
	return h * c.keys * c.row, c.row
}

// decodeBlockDefault is the number of keys per Scores/Accum call of a
// step (FLASHATTN_DECODE_BLOCK changes it).
const decodeBlockDefault = 1024

func (c *benchCache) run(b *testing.B, dk Decode, m, threads int, op string) {
	d := c.dim
	decodeBlock := decodeBlockDefault
	if s := os.Getenv("FLASHATTN_DECODE_BLOCK"); s != "" {
		if _, err := fmt.Sscanf(s, "%d", &decodeBlock); err != nil || decodeBlock < 1 {
			b.Fatalf("FLASHATTN_DECODE_BLOCK=%q", s)
		}
	}
	group := strings.HasPrefix(op, "group-")
	heads := strings.HasPrefix(op, "heads-") || group
	op = strings.TrimPrefix(strings.TrimPrefix(op, "heads-"), "group-")
	rows := m // query rows of a call
	switch {
	case group:
		rows = c.heads * m
	case heads:
		rows = c.heads
	}
	type work struct{ s, q, o []float32 }
	ws := make([]work, threads)
	for i := range ws {
		ws[i] = work{s: make([]float32, rows*(decodeBlock+16)), q: make([]float32, rows*d), o: make([]float32, rows*d)}
		for j := range ws[i].q {
			ws[i].q[j] = 0.01
		}
		for j := range ws[i].s {
			ws[i].s[j] = 1 / float32(decodeBlock)
		}
	}
	pad := 16 // S and P rows 4 KiB apart would alias in L1 (see Decode)
	if os.Getenv("FLASHATTN_DECODE_PAD") == "0" {
		pad = 0
	}
	block := func(w work, h, j0 int) {
		off, ld := c.head(h)
		jn := min(decodeBlock, c.keys-j0)
		ko := off + j0*ld
		if op != "accum" {
			c.scores(dk, w.s, jn+pad, w.q, m, ko, ld, jn, d)
		}
		if op != "scores" {
			c.accum(dk, w.o, d, w.s, jn+pad, m, ko, ld, jn, d)
		}
	}
	blockHeads := func(w work, j0 int) {
		jn := min(decodeBlock, c.keys-j0)
		_, ld := c.head(0)
		switch {
		case group && op != "accum":
			dk.ScoresGroup[c.typ](w.s, jn+pad, w.q, m, c.heads, c.kb[j0*ld:], ld, c.row, jn, d)
		case op != "accum":
			c.scoresHeads(dk, w.s, jn+pad, w.q, c.heads, j0*ld, ld, c.row, jn, d)
		}
		switch {
		case group && op != "scores":
			dk.AccumGroup[c.typ](w.o, d, w.s, jn+pad, m, c.heads, c.vb[j0*ld:], ld, c.row, jn, d)
		case op != "scores":
			c.accumHeads(dk, w.o, d, w.s, jn+pad, c.heads, j0*ld, ld, c.row, jn, d)
		}
	}
	// Heads one after the other take whole heads per goroutine; heads side
	// by side take a range of keys per goroutine and every head of a block
	// of keys before the next block, so that memory is read in order.
	work1 := func(t int) {
		if !c.interleaved {
			for h := t; h < c.heads; h += threads {
				for j0 := 0; j0 < c.keys; j0 += decodeBlock {
					block(ws[t], h, j0)
				}
			}
			return
		}
		per := (c.keys/decodeBlock + threads - 1) / threads * decodeBlock
		for j0 := t * per; j0 < min(c.keys, (t+1)*per); j0 += decodeBlock {
			if heads {
				blockHeads(ws[t], j0)
				continue
			}
			for h := 0; h < c.heads; h++ {
				block(ws[t], h, j0)
			}
		}
	}
	parallel := func(f func(t int)) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f(t)
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	var bufs [][]byte
	switch op {
	case "scores":
		bufs = [][]byte{c.kb}
	case "accum":
		bufs = [][]byte{c.vb}
	default:
		bufs = [][]byte{c.kb, c.vb}
	}
	bytes := 0
	for _, buf := range bufs {
		bytes += len(buf)
	}
	var sink uint32
	var tk, tr, tp time.Duration
	peakIters, peakFlops := 1<<20, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk += parallel(work1)
		tr += parallel(func(t int) {
			var sum uint32
			for _, buf := range bufs {
				part := (len(buf)/threads + 255) &^ 255
				lo := min(t*part, len(buf))
				sum += dk.ReadSum(buf[lo:min(lo+part, len(buf))])
			}
			sink += sum
		})
		tp += parallel(func(int) { peakFlops = FMAPeak(peakIters) })
	}
	b.StopTimer()
	_ = sink
	gbs := float64(bytes) * float64(b.N) / tk.Seconds() / 1e9
	rgbs := float64(bytes) * float64(b.N) / tr.Seconds() / 1e9
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(rgbs, "read-GB/s")
	b.ReportMetric(gbs/rgbs, "ratio")
	// FLOPs: 2·m per cache element read (K in Scores, V in Accum; m = 1
	// for the multi-head kernels).
	elems := float64(c.heads*c.keys*c.dim) * float64(len(bufs))
	gflops := 2 * float64(m) * elems * float64(b.N) / tk.Seconds() / 1e9
	peak := float64(threads*peakIters*peakFlops) * float64(b.N) / tp.Seconds() / 1e9
	b.ReportMetric(gflops, "GFLOP/s")
	b.ReportMetric(gflops/peak, "of-peak")
}

func (c *benchCache) scores(dk Decode, s []float32, lds int, q []float32, m, off, ld, n, d int) {
	dk.Scores[c.typ](s, lds, q, m, c.kb[off:], ld, n, d)
}

func (c *benchCache) scoresHeads(dk Decode, s []float32, lds int, q []float32, heads, off, ld, hs, n, d int) {
	dk.ScoresHeads[c.typ](s, lds, q, heads, c.kb[off:], ld, hs, n, d)
}

func (c *benchCache) accumHeads(dk Decode, o []float32, ldo int, p []float32, ldp, heads, off, ld, hs, n, d int) {
	dk.AccumHeads[c.typ](o, ldo, p, ldp, heads, c.vb[off:], ld, hs, n, d)
}

func (c *benchCache) accum(dk Decode, o []float32, ldo int, p []float32, ldp, m, off, ld, n, d int) {
	dk.Accum[c.typ](o, ldo, p, ldp, m, c.vb[off:], ld, n, d)
}
