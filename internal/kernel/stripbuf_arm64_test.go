//go:build !purego

package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestStripBufGuardPages runs the kernels that take a buffer (BFMMLA's B
// blocks and packed A, FMLAL's split strips) on a buffer of exactly the
// length their wrapper gives them (mmlaBufLen, f16BufLen) that ends right
// before, or starts right after, an inaccessible page (Linux; elsewhere a
// plain slice), so that a kernel writing or reading past either end of it
// faults; the buffer starts full of NaN (a pooled buffer holds whatever
// the last call left), and the results are held to the float32 bound
// against the float64 sum, on every row tail, odd and even k/2, and k
// with a half last group of four.
func TestStripBufGuardPages(t *testing.T) {
	type kern = func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int, buf []uint16)
	type path struct {
		name   string
		e      Elem
		mul    [2]kern // Mul, MulAdd
		bufLen func(m, k int) int
	}
	var paths []path
	if hasBF16 {
		paths = append(paths, path{"neonbfmmla", BF16, [2]kern{mulBF16MMLANEON, mulAddBF16MMLANEON}, mmlaBufLen})
	}
	if hasFHM {
		paths = append(paths, path{"neonfp16", F16, [2]kern{mulF16NEON, mulAddF16NEON}, f16BufLen})
	}
	if len(paths) == 0 {
		t.Skip("no FEAT_BF16 or FEAT_FHM")
	}
	r := rand.New(rand.NewPCG(29, 30))
	for _, p := range paths {
		for _, after := range []bool{true, false} {
			for _, m := range []int{1, 2, 3, 5, 6, 7, 12, 13} {
				for _, k := range []int{2, 4, 6, 8, 10, 14, 16, 18} {
					for acc, mul := range p.mul {
						const n = 32
						lda, ldb, ldc := k+2, W*k, n
						a := guarded[uint16](t, (m-1)*lda+k, after)
						copy(a, randHalf(r, p.e, len(a)))
						b := guarded[uint16](t, VNNILen(k, n), after)
						bsrc := randHalf(r, p.e, k*n)
						PackVNNI16Into(b, ldb, 0, bsrc, n, k, n, false)
						buf := guarded[uint16](t, p.bufLen(m, k), after)
						for i := range buf {
							buf[i] = p.e.FromF32(float32(math.NaN()))
						}
						c := make([]float32, m*ldc)
						for i := range c {
							c[i] = r.Float32()*2 - 1
						}
						c0 := append([]float32(nil), c...)
						mul(c, ldc, a, lda, b, ldb, m, n, k, buf)
						tag := fmt.Sprintf("%s MulAdd=%v after=%v m=%d k=%d", p.name, acc == 1, after, m, k)
						for i := 0; i < m; i++ {
							for j := 0; j < n; j++ {
								want, mag := 0.0, 0.0
								if acc == 1 {
									want, mag = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
								}
								for q := 0; q < k; q++ {
									x := float64(p.e.ToF32(a[i*lda+q])) * float64(p.e.ToF32(bsrc[q*n+j]))
									want += x
									mag += math.Abs(x)
								}
								got := c[i*ldc+j]
								if d := math.Abs(float64(got) - want); !(d <= float64(k+2)*0x1p-23*mag) {
									t.Fatalf("%s: C[%d, %d] = %v, want %v", tag, i, j, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
