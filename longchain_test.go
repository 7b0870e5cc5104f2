package flashattn

import (
	"testing"

	"github.com/flashattn/flashattn/reference"
)

// TestLongChainGradients applies the error rule to dK and dV where each
// of their elements sums over many query rows and query heads: causal GQA
// with 1000 rows (2000 terms per element) and MQA with 16 query heads on
// one KV head (4800 terms). The baseline is the plain float32 algorithm
// as PyTorch runs it (perHeadGrads32). Kernels that add every product into the running dK/dV element
// make one float32 chain over all the terms, 3-4× the baseline's error on
// the AVX paths; the rule allows 2×.
func TestLongChainGradients(t *testing.T) {
	cases := []tcase{
		{b: 1, sq: 1000, sk: 1000, h: 4, hk: 2, d: 128, causal: true},
		{b: 1, sq: 300, sk: 300, h: 16, hk: 1, d: 64},
	}
	if raceEnabled {
		// The float64 references of the long chains take minutes under
		// the race detector, which is there for the passes' concurrency:
		// a shorter chain of the same kinds runs the same code; the plain
		// run keeps the lengths that showed the error.
		cases = []tcase{
			{b: 1, sq: 256, sk: 256, h: 4, hk: 2, d: 64, causal: true},
			{b: 1, sq: 128, sk: 128, h: 16, hk: 1, d: 32},
		}
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			cd := makeCase(c, uint64(c.sq*1000+c.sk*10+c.d))
			q, k, v := Dense(cd.q, c.b, c.sq, c.h, c.d), Dense(cd.k, c.b, c.sk, c.hk, c.d), Dense(cd.v, c.b, c.sk, c.hk, c.d)
			do := Dense(cd.do, c.b, c.sq, c.h, c.d)
			_, dk64, dv64 := reference.Backward64(cd.par, to64(cd.q), to64(cd.k), to64(cd.v), to64(cd.do))
			dk32, dv32 := perHeadGrads32(c, cd)
			forEachKernel(t, func(t *testing.T) {
				out, lse, err := Forward(q, k, v, &cd.opt)
				if err != nil {
					t.Fatal(err)
				}
				_, dk, dv, err := Backward(q, k, v, out, do, lse, &cd.opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := reference.Check("dK", dk.Data, dk32, dk64); err != nil {
					t.Error(err)
				}
				if err := reference.Check("dV", dv.Data, dv32, dv64); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// perHeadGrads32 returns dK and dV of the plain float32 algorithm as
// PyTorch runs it on grouped heads: each query head alone (its KV head
// repeated), its products summed as a BLAS sums them (the query rows,
// the product's k, in blocks of blasKC from zero, each block's sum added
// to the result), then the heads of each KV head summed. Rows are
// independent, so a block of rows [i0, i1) is the plain algorithm on
// those rows (causal, Sq == Sk: against keys [0, i1)).
func perHeadGrads32(c tcase, cd caseData) (dk, dv []float32) {
	const blasKC = 256
	dk, dv = make([]float32, len(cd.k)), make([]float32, len(cd.v))
	pick := func(x []float32, i0, i1, heads, h int) []float32 {
		y := make([]float32, (i1-i0)*c.d)
		for i := i0; i < i1; i++ {
			copy(y[(i-i0)*c.d:(i-i0+1)*c.d], x[(i*heads+h)*c.d:])
		}
		return y
	}
	for h := 0; h < c.h; h++ {
		kh := h / (c.h / c.hk)
		for i0 := 0; i0 < c.sq; i0 += blasKC {
			i1, nk := min(c.sq, i0+blasKC), c.sk
			if c.causal {
				nk = i1
			}
			one := cd.par
			one.Heads, one.KVHeads, one.SeqQ, one.SeqK = 1, 1, i1-i0, nk
			_, dkh, dvh := reference.Backward32(plainPar(one), pick(cd.q, i0, i1, c.h, h), pick(cd.k, 0, nk, c.hk, kh),
				pick(cd.v, 0, nk, c.hk, kh), pick(cd.do, i0, i1, c.h, h))
			for j := 0; j < nk; j++ {
				for e := 0; e < c.d; e++ {
					dk[(j*c.hk+kh)*c.d+e] += dkh[j*c.d+e]
					dv[(j*c.hk+kh)*c.d+e] += dvh[j*c.d+e]
				}
			}
		}
	}
	return dk, dv
}
