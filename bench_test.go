package flashattn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/plain"
)

// Benchmarks report GFLOP/s as 4·B·H·Sq·Sk·D per forward (visible
// pairs only under a causal mask; backward 2.5×). Compare flashattn with the
// plain algorithm (BenchmarkPlain*) from the same run, e.g.
//
//	go test -run '^$' -bench 'Forward|PlainForward' -benchtime 3x

type benchShape struct {
	b, h, n, d int
	causal     bool
}

func (s benchShape) String() string {
	m := ""
	if s.causal {
		m = "_causal"
	}
	return fmt.Sprintf("B%d_H%d_N%d_D%d%s", s.b, s.h, s.n, s.d, m)
}

func (s benchShape) flops() float64 {
	pairs := float64(s.n) * float64(s.n)
	if s.causal {
		pairs = float64(s.n) * float64(s.n+1) / 2
	}
	return 4 * float64(s.b*s.h) * pairs * float64(s.d)
}

var benchShapes = []benchShape{
	{1, 8, 1024, 64, false}, {1, 8, 4096, 64, false}, {1, 8, 4096, 64, true},
	{1, 4, 4096, 128, false}, {1, 4, 4096, 128, true},
}

func benchInputs(s benchShape) (q, k, v, do Tensor) { return benchInputsOf(s, Float32) }

// benchInputsOf returns random inputs of element type dt.
func benchInputsOf(s benchShape, dt DType) (q, k, v, do Tensor) {
	r := rand.New(rand.NewPCG(1, 1))
	mk := func() Tensor { return toType(randSlice(r, s.b*s.n*s.h*s.d), dt, s.b, s.n, s.h, s.d) }
	return mk(), mk(), mk(), mk()
}

var benchTypes = []DType{Float32, BFloat16, Float16}

func BenchmarkForward(b *testing.B) {
	for _, s := range benchShapes {
		for _, dt := range benchTypes {
			b.Run(s.String()+"_"+dt.String(), func(b *testing.B) { benchForward(b, s, dt) })
		}
	}
}

func benchForward(b *testing.B, s benchShape, dt DType) {
	q, k, v, _ := benchInputsOf(s, dt)
	out, lse := NewTensorOf(dt, s.b, s.n, s.h, s.d), make([]float32, s.b*s.h*s.n)
	opts := &Options{Causal: s.causal}
	b.ReportAllocs()
	for b.Loop() {
		if err := ForwardInto(out, lse, q, k, v, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(s.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkBackward(b *testing.B) {
	for _, s := range benchShapes {
		for _, dt := range benchTypes {
			b.Run(s.String()+"_"+dt.String(), func(b *testing.B) { benchBackward(b, s, dt) })
		}
	}
}

func benchBackward(b *testing.B, s benchShape, dt DType) {
	q, k, v, do := benchInputsOf(s, dt)
	opts := &Options{Causal: s.causal}
	out, lse, _ := Forward(q, k, v, opts)
	dq, dk, dv := NewTensorOf(dt, s.b, s.n, s.h, s.d), NewTensorOf(dt, s.b, s.n, s.h, s.d), NewTensorOf(dt, s.b, s.n, s.h, s.d)
	b.ReportAllocs()
	for b.Loop() {
		if err := BackwardInto(dq, dk, dv, q, k, v, out, do, lse, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2.5*s.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkDecode: one query row per sequence against a long KV cache
// (GQA 32/8 heads, D 128), the flash-decoding path, for each cache type;
// GB/s counts the cache bytes stored.
func BenchmarkDecode(b *testing.B) {
	const n, h, hk, d = 32768, 32, 8, 128
	r := rand.New(rand.NewPCG(1, 1))
	q := Dense(randSlice(r, h*d), 1, 1, h, d)
	kf, vf := Dense(randSlice(r, n*hk*d), 1, n, hk, d), Dense(randSlice(r, n*hk*d), 1, n, hk, d)
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, Q4_0, FP8E4M3, FP8E5M2} {
		k, v := newCache(dt, 1, n, hk, d), newCache(dt, 1, n, hk, d)
		if err := Convert(k, kf); err != nil {
			b.Fatal(err)
		}
		if err := Convert(v, vf); err != nil {
			b.Fatal(err)
		}
		bytes := quantBytes(dt, 2*n*hk*d)
		b.Run(dt.String(), func(b *testing.B) {
			out, lse := NewTensor(1, 1, h, d), make([]float32, h)
			opts := &Options{KVCache: &KVCache{SeqLens: []int32{n}}}
			b.ReportAllocs()
			for b.Loop() {
				if err := ForwardInto(out, lse, q, k, v, opts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

func BenchmarkPlainForward(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(s.String(), func(b *testing.B) {
			q, k, v, _ := benchInputs(s)
			p := &plain.Problem{B: s.b, Sq: s.n, Sk: s.n, H: s.h, Hk: s.h, D: s.d, Causal: s.causal, Workers: (&Options{}).workers()}
			b.ReportAllocs()
			for b.Loop() {
				p.Forward(q.Data, k.Data, v.Data)
			}
			b.ReportMetric(s.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkPlainBackward(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(s.String(), func(b *testing.B) {
			q, k, v, do := benchInputs(s)
			p := &plain.Problem{B: s.b, Sq: s.n, Sk: s.n, H: s.h, Hk: s.h, D: s.d, Causal: s.causal, Workers: (&Options{}).workers()}
			o, _ := p.Forward(q.Data, k.Data, v.Data)
			b.ReportAllocs()
			for b.Loop() {
				p.Backward(q.Data, k.Data, v.Data, o, do.Data)
			}
			b.ReportMetric(2.5*s.flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkDecodeMLA: DeepSeek-style absorbed MLA decoding, 128 query heads
// against one 576-wide latent per token (V = its first 512 columns, a view),
// bf16 cache of 32k tokens: GB/s counts the latent bytes (read once per
// step), GFLOP/s the 2·H·N·(576+512) FLOPs of a step.
func BenchmarkDecodeMLA(b *testing.B) {
	const n, h, d, dv = 32768, 128, 576, 512
	r := rand.New(rand.NewPCG(1, 1))
	q := Dense(randSlice(r, h*d), 1, 1, h, d)
	lat := NewTensorOf(BFloat16, 1, n, 1, d)
	if err := Convert(lat, Dense(randSlice(r, n*d), 1, n, 1, d)); err != nil {
		b.Fatal(err)
	}
	v := lat
	v.Dim, v.HeadStride, v.SeqStride, v.BatchStride = dv, d, d, n*d
	out, lse := NewTensor(1, 1, h, dv), make([]float32, h)
	opts := &Options{KVCache: &KVCache{SeqLens: []int32{n}}}
	b.ReportAllocs()
	for b.Loop() {
		if err := ForwardInto(out, lse, q, lat, v, opts); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(n*d*2)/sec/1e9, "GB/s")
	b.ReportMetric(2*float64(h)*float64(n)*float64(d+dv)/sec/1e9, "GFLOP/s")
}

// BenchmarkForwardSinks: the forward with learnable sinks and a 128-token
// sliding window (gpt-oss's local layers) against the same call without
// sinks.
func BenchmarkForwardSinks(b *testing.B) {
	s := benchShape{1, 8, 4096, 64, true}
	q, k, v, _ := benchInputs(s)
	sinks := make([]float32, s.h)
	for _, o := range []struct {
		name string
		opts *Options
	}{
		{"window128", &Options{Causal: true, Window: &Window{Left: 127, Right: 0}}},
		{"window128_sinks", &Options{Causal: true, Window: &Window{Left: 127, Right: 0}, Sinks: sinks}},
	} {
		b.Run(o.name, func(b *testing.B) {
			out, lse := NewTensor(s.b, s.n, s.h, s.d), make([]float32, s.b*s.h*s.n)
			for b.Loop() {
				if err := ForwardInto(out, lse, q, k, v, o.opts); err != nil {
					b.Fatal(err)
				}
			}
			pairs := float64(s.n) * 128
			b.ReportMetric(4*float64(s.b*s.h)*pairs*float64(s.d)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
