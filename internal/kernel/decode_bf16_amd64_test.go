//go:build amd64 && !purego

package kernel

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDecodeBF16Native: on a CPU with AVX512_BF16 the best decode set is
// "avx512bf16", and its bf16 Scores and Accum for 8 or more query rows are
// the VDPBF16PS products (rows in tiles of 4, 8 and 16: the first nativeRows(m)): Q and P rounded to bfloat16, the sums within a
// float32 sum's error of the exact products of the rounded operands, and
// measurably not the float32 products of the unrounded ones (what the
// "avx512" set computes). Row counts of one and more tiles of 4, 8 and 16
// (with tiles of 2 and 1 that the float32 kernels take), key counts around the
// scores' groups of 8 and the accum's blocks of 64, every head dimension
// the native kernels take.
func TestDecodeBF16Native(t *testing.T) {
	if !hasAVX512BF16 {
		if _, err := LookupDecode("avx512bf16"); err == nil {
			t.Fatal(`decode set "avx512bf16" registered on a CPU without AVX512_BF16`)
		}
		return
	}
	if got := DecodeAvailable()[0].Name; got != "avx512bf16" {
		t.Fatalf(`best decode set is %q, want "avx512bf16"`, got)
	}
	dk, err := LookupDecode("avx512bf16")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(31, 32))
	for _, d := range []int{32, 64, 128, 256} {
		for _, m := range []int{4, 8, 12, 16, 28, 31} {
			for _, n := range []int{1, 9, 64, 65, 300} {
				c := newTestCache(t, r, FormatBF16, n, d, 3, true)
				q := make([]float32, m*d)
				for i := range q {
					q[i] = r.Float32()*2 - 1
				}
				lds := n + 5
				s := make([]float32, m*lds)
				c.scores(dk, s, lds, q, m, n, d)
				qr := roundBF16(q)
				far := false
				for rr := 0; rr < m; rr++ {
					for j := 0; j < n; j++ {
						got := float64(s[rr*lds+j])
						qw := qr
						if rr >= nativeRows(m) { // a tile of 2 or 1: the float32 kernels, q as it is
							qw = q
						}
						want, mag := dotF64(qw[rr*d:(rr+1)*d], c.vals[j*d:(j+1)*d])
						plain, _ := dotF64(q[rr*d:(rr+1)*d], c.vals[j*d:(j+1)*d])
						tol := float64(d+2) * 0x1p-24 * mag
						if e := math.Abs(got - want); !(e <= tol) {
							t.Fatalf("Scores m=%d n=%d d=%d: S[%d][%d] = %v, want %v (bf16 q; error %.3g, tolerance %.3g)", m, n, d, rr, j, got, want, e, tol)
						}
						far = far || rr < nativeRows(m) && math.Abs(got-plain) > tol
					}
				}
				if !far && nativeRows(m) > 0 {
					t.Errorf("Scores m=%d n=%d d=%d: every score within a float32 sum's error of the unrounded q's: not the native products", m, n, d)
				}

				ldp, ldo := n+3, d+7
				p := make([]float32, m*ldp)
				for i := range p {
					p[i] = r.Float32()
				}
				o := make([]float32, m*ldo)
				for i := range o {
					o[i] = r.Float32()*2 - 1
				}
				o0 := append([]float32(nil), o...)
				c.accum(dk, o, ldo, p, ldp, m, n, d)
				pr := roundBF16(p)
				far = false
				for rr := 0; rr < m; rr++ {
					for col := 0; col < d; col++ {
						got := float64(o[rr*ldo+col])
						want, mag := float64(o0[rr*ldo+col]), math.Abs(float64(o0[rr*ldo+col]))
						plain, pw := want, pr
						if rr >= nativeRows(m) {
							pw = p
						}
						for j := 0; j < n; j++ {
							x := c.vals[j*d+col]
							want += float64(pw[rr*ldp+j]) * x
							plain += float64(p[rr*ldp+j]) * x
							mag += math.Abs(float64(pw[rr*ldp+j]) * x)
						}
						tol := float64(n+2) * 0x1p-24 * mag
						if e := math.Abs(got - want); !(e <= tol) {
							t.Fatalf("Accum m=%d n=%d d=%d: O[%d][%d] = %v, want %v (bf16 p; error %.3g, tolerance %.3g)", m, n, d, rr, col, got, want, e, tol)
						}
						far = far || rr < nativeRows(m) && math.Abs(got-plain) > tol
					}
				}
				if !far && nativeRows(m) > 0 {
					t.Errorf("Accum m=%d n=%d d=%d: every sum within a float32 sum's error of the unrounded p's: not the native products", m, n, d)
				}
			}
		}
	}
}

// dotF64 returns Σ x[i]·y[i] in float64 and Σ|x[i]·y[i]|.
func dotF64(x []float32, y []float64) (sum, mag float64) {
	for i, v := range x {
		t := float64(v) * y[i]
		sum += t
		mag += math.Abs(t)
	}
	return sum, mag
}

// roundBF16 returns x rounded to bfloat16 (to nearest even).
func roundBF16(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = BF16ToF32(F32ToBF16(v))
	}
	return y
}

// nativeRows is the number of leading rows of an m-row call the native
// kernels take: its tiles of 4, 8 and 16 rows, in calls of natMinCall
// rows or more.
func nativeRows(m int) int {
	if m < natMinCall {
		return 0
	}
	return m &^ 3
}
