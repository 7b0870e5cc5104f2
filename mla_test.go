package flashattn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestMLAHeadDims: V (and O, dO, dV) with another head dim than Q and K,
// up to DeepSeek's 576/512, forward and backward, float32 on every kernel
// path and bf16, against the float64 reference.
func TestMLAHeadDims(t *testing.T) {
	for _, c := range []struct {
		sq, sk, h, hk, d, dv int
		causal               bool
	}{
		{37, 53, 4, 2, 24, 40, true},
		{45, 29, 2, 1, 64, 16, false},
		{3, 130, 16, 1, 576, 512, true}, // decode-like: stacked heads, one KV head
		{20, 33, 2, 2, 33, 7, false},
	} {
		name := fmt.Sprintf("sq%d_sk%d_h%d_hk%d_d%d_dv%d", c.sq, c.sk, c.h, c.hk, c.d, c.dv)
		forEachKernel(t, func(t *testing.T) {
			t.Run(name, func(t *testing.T) {
				checkMLA(t, c.sq, c.sk, c.h, c.hk, c.d, c.dv, c.causal, Float32)
			})
		})
		t.Run(name+"/bf16", func(t *testing.T) { checkMLA(t, c.sq, c.sk, c.h, c.hk, c.d, c.dv, c.causal, BFloat16) })
	}
}

func checkMLA(t *testing.T, sq, sk, h, hk, d, dv int, causal bool, dt DType) {
	r := newRand(uint64(sq*sk + d + dv))
	q, k, v, do := randSlice(r, sq*h*d), randSlice(r, sk*hk*d), randSlice(r, sk*hk*dv), randSlice(r, sq*h*dv)
	par := reference.Params{Batch: 1, SeqQ: sq, SeqK: sk, Heads: h, KVHeads: hk, HeadDim: d, HeadDimV: dv, Causal: causal}
	opts := &Options{Causal: causal}
	if dt != Float32 {
		prec := precisionOf(dt)
		q, k, v, do = prec.RoundSlice(q), prec.RoundSlice(k), prec.RoundSlice(v), prec.RoundSlice(do)
	}
	qt, kt, vt := toType(q, dt, 1, sq, h, d), toType(k, dt, 1, sk, hk, d), toType(v, dt, 1, sk, hk, dv)
	out, lse, err := Forward(qt, kt, vt, opts)
	if err != nil {
		t.Fatal(err)
	}
	if out.Dim != dv {
		t.Fatalf("O has head dim %d, want V's %d", out.Dim, dv)
	}
	dq, dk, dvg, err := Backward(qt, kt, vt, out, toType(do, dt, 1, sq, h, dv), lse, opts)
	if err != nil {
		t.Fatal(err)
	}
	o64, l64 := reference.Forward64(par, to64(q), to64(k), to64(v))
	g64 := func() [3][]float64 {
		a, b, c := reference.Backward64(par, to64(q), to64(k), to64(v), to64(do))
		return [3][]float64{a, b, c}
	}()
	var o32, l32 []float32
	var g32 [3][]float32
	if dt == Float32 {
		o32, l32 = reference.Forward32(plainPar(par), q, k, v)
		a, b, c := reference.Backward32(plainPar(par), q, k, v, do)
		g32 = [3][]float32{a, b, c}
	} else {
		o32, l32 = reference.ForwardHalf(par, precisionOf(dt), q, k, v)
		a, b, c := reference.BackwardHalf(par, precisionOf(dt), q, k, v, do)
		g32 = [3][]float32{a, b, c}
	}
	check := func(name string, got, plain []float32, ref []float64) {
		var err error
		if dt == Float32 {
			err = reference.Check(name, got, plain, ref)
		} else {
			err = reference.CheckHalf(name, precisionOf(dt), got, plain, ref)
		}
		if err != nil {
			t.Error(err)
		}
	}
	check("O", gather(out), o32, o64)
	check("LSE", lse, l32, l64)
	check("dQ", gather(dq), g32[0], g64[0])
	check("dK", gather(dk), g32[1], g64[1])
	check("dV", gather(dvg), g32[2], g64[2])
}

// TestMLALatentCache: DeepSeek's absorbed MLA decoding — one 576-wide latent
// per token in the cache, V a view of its first 512 columns (no copy),
// appended with KNew alone — for f32, bf16, fp16 and q8_0 caches, paged or
// not, against the float64 reference of the same keys.
func TestMLALatentCache(t *testing.T) {
	const B, H, D, DV, capacity, sq = 2, 16, 576, 512, 96, 1
	for _, dt := range []DType{Float32, BFloat16, Float16, Q8_0, FP8E4M3} {
		for _, paged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/paged=%v", dt, paged), func(t *testing.T) {
				r := newRand(5)
				nb, rows := B, capacity
				var c KVCache
				if paged {
					nb, rows = 2*capacity/16, 16
					c.BlocksPerSeq = capacity / 16
					c.BlockTable = make([]int32, B*c.BlocksPerSeq)
					for i := range c.BlockTable {
						c.BlockTable[i] = int32((i*5 + 1) % nb)
					}
				}
				lat := newCache(dt, nb, rows, 1, D)
				if err := Convert(lat, Dense(randSlice(r, nb*rows*D), nb, rows, 1, D)); err != nil {
					t.Fatal(err)
				}
				v := lat
				v.Dim = DV
				v.HeadStride, v.SeqStride, v.BatchStride = D, D, rows*D // the first 512 columns of each latent row
				knew := Dense(randSlice(r, B*sq*D), B, sq, 1, D)
				q := Dense(randSlice(r, B*sq*H*D), B, sq, H, D)
				c.SeqLens, c.KNew = []int32{70, 33}, knew
				out, lse, err := Forward(q, lat, v, &Options{KVCache: &c})
				if err != nil {
					t.Fatal(err)
				}
				// The reference of each sequence: its keys read back from the
				// cache (after the append) as float32.
				for b := 0; b < B; b++ {
					n := int(c.SeqLens[b]) + sq
					keys := make([]float32, n*D)
					for j := 0; j < n; j++ {
						tb, row := b, j
						if paged {
							tb, row = int(c.BlockTable[b*c.BlocksPerSeq+j/16]), j%16
						}
						for x := 0; x < D; x++ {
							keys[j*D+x] = lat.At(tb, row, 0, x)
						}
					}
					vals := make([]float32, n*DV)
					for j := 0; j < n; j++ {
						copy(vals[j*DV:(j+1)*DV], keys[j*D:j*D+DV])
					}
					qb := q.Data[b*sq*H*D : (b+1)*sq*H*D]
					if dt == BFloat16 || dt == Float16 {
						qb = precisionOf(dt).RoundSlice(qb)
					}
					par := reference.Params{Batch: 1, SeqQ: sq, SeqK: n, Heads: H, KVHeads: 1, HeadDim: D, HeadDimV: DV}
					o64, l64 := reference.Forward64(par, to64(qb), to64(keys), to64(vals))
					o32, l32 := reference.Forward32(plainPar(par), qb, keys, vals)
					got := gather(out)[b*sq*H*DV : (b+1)*sq*H*DV]
					if dt == BFloat16 || dt == Float16 {
						// 16-bit cache: the products are in the type; allow its rule.
						oh, lh := reference.ForwardHalf(par, precisionOf(dt), qb, keys, vals)
						if err := reference.CheckHalf("O", precisionOf(dt), got, oh, o64); err != nil {
							t.Errorf("sequence %d: %v", b, err)
						}
						if err := reference.CheckHalf("LSE", precisionOf(dt), lse[b*H*sq:(b+1)*H*sq], lh, l64); err != nil {
							t.Errorf("sequence %d: %v", b, err)
						}
						continue
					}
					if err := reference.Check("O", got, o32, o64); err != nil {
						t.Errorf("sequence %d: %v", b, err)
					}
					if err := reference.Check("LSE", lse[b*H*sq:(b+1)*H*sq], l32, l64); err != nil {
						t.Errorf("sequence %d: %v", b, err)
					}
				}
			})
		}
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 11)) }
