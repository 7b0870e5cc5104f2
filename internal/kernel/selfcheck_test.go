package kernel

import (
	"math"
	"strings"
	"testing"
)

// The start-up self-checks (selfCheck, selfCheckHalf, selfCheckDecode)
// decide which assembly runs. These tests show that each accepts every
// implementation this CPU has and the pure-Go twins, and, as a negative
// control, rejects an implementation with one deliberately broken kernel,
// for every kind of bug it is meant to catch: a dropped row, column, key
// or term, a value beyond the tolerance, a flipped bit, a wrong special
// value, a write outside the result, a panic.

// TestSelfCheckAccepts: every candidate of this CPU and the pure-Go
// implementations pass (so none is silently dropped).
func TestSelfCheckAccepts(t *testing.T) {
	for _, im := range append(archImpls(), Generic) {
		if err := selfCheck(im); err != nil {
			t.Error(err)
		}
	}
	for _, dk := range append(archDecode(), GenericDecode) {
		if err := selfCheckDecode(dk); err != nil {
			t.Error(err)
		}
	}
	for _, e := range []Elem{BF16, F16} {
		for _, h := range testedHalf(e) {
			if err := selfCheckHalf(h); err != nil {
				t.Error(err)
			}
		}
	}
}

// beyondTol moves x by three times the self-check's tolerance for it.
func beyondTol(x float32) float32 {
	return x + 3e-4*(1+float32(math.Abs(float64(x))))
}

// TestSelfCheckRejectsBroken: Generic with one kernel broken fails
// selfCheck, naming that kernel.
func TestSelfCheckRejectsBroken(t *testing.T) {
	type mm = func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)
	g := Generic
	for _, c := range []struct {
		name   string // what the error must mention
		bug    string
		inject func(im *Impl)
	}{
		{"MulABt", "drops the last column", func(im *Impl) {
			im.MulABt = func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int) {
				keep := make([]float32, m)
				for i := range keep {
					keep[i] = c[i*ldc+n-1]
				}
				g.MulABt(c, ldc, a, lda, bt, m, n, k)
				for i, v := range keep {
					c[i*ldc+n-1] = v
				}
			}
		}},
		{"MulAddAB", "drops the last row", func(im *Impl) {
			im.MulAddAB = func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
				g.MulAddAB(c, ldc, a, lda, b, ldb, m-1, n, k)
			}
		}},
		{"MulAddAtB", "drops the last term", func(im *Impl) {
			im.MulAddAtB = func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
				g.MulAddAtB(c, ldc, a, lda, b, ldb, m, n, k-1)
			}
		}},
		{"MulAddAB", "overwrites C instead of adding", func(im *Impl) {
			im.MulAddAB = mm(func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
				for i := 0; i < m; i++ {
					clear(c[i*ldc : i*ldc+n])
				}
				g.MulAddAB(c, ldc, a, lda, b, ldb, m, n, k)
			})
		}},
		{"ExpSum", "one value off by 3× the tolerance", func(im *Impl) {
			im.ExpSum = func(x []float32, scale, sub float32) float32 {
				s := g.ExpSum(x, scale, sub)
				x[len(x)-1] = beyondTol(x[len(x)-1])
				return s
			}
		}},
		{"ExpSum", "the sum off by 3× the tolerance", func(im *Impl) {
			im.ExpSum = func(x []float32, scale, sub float32) float32 { return beyondTol(g.ExpSum(x, scale, sub)) }
		}},
		{"ExpSum", "NaN for exp(-Inf)", func(im *Impl) {
			im.ExpSum = func(x []float32, scale, sub float32) float32 {
				inf := make([]bool, len(x))
				for j, v := range x {
					inf[j] = math.IsInf(float64(v), -1)
				}
				s := g.ExpSum(x, scale, sub)
				for j := range x {
					if inf[j] {
						x[j] = float32(math.NaN())
					}
				}
				return s
			}
		}},
		{"Max", "skips the last vector", func(im *Impl) {
			im.Max = func(x []float32) float32 { return g.Max(x[:len(x)-W]) }
		}},
		{"Max", "reads only the first vector", func(im *Impl) {
			im.Max = func(x []float32) float32 { return g.Max(x[:W]) }
		}},
		{"Scale/DsFromDp", "Scale skips the last vector", func(im *Impl) {
			im.Scale = func(x []float32, a float32) { g.Scale(x[:len(x)-W], a) }
		}},
		{"Scale/DsFromDp", "DsFromDp adds d", func(im *Impl) {
			im.DsFromDp = func(dp, p []float32, d float32) { g.DsFromDp(dp, p, -d) }
		}},
		{"Dot", "drops the last term", func(im *Impl) {
			im.Dot = func(a, b []float32) float32 { return g.Dot(a[:len(a)-1], b) }
		}},
		{"Dot4T", "reads one key short", func(im *Impl) {
			im.Dot4T = func(c []float32, ldc int, a, b []float32, ldb, n, k int) { g.Dot4T(c, ldc, a, b, ldb, n-1, k) }
		}},
		{"Softcap", "leaves g unwritten", func(im *Impl) {
			im.Softcap = func(x, _ []float32, c float32) { g.Softcap(x, nil, c) }
		}},
		{"Softcap", "caps at 2c", func(im *Impl) {
			im.Softcap = func(x, gr []float32, c float32) {
				g.Softcap(x, gr, c)
				for j := range x {
					x[j] *= 2
				}
			}
		}},
		{"ALiBi", "forgets the absolute value", func(im *Impl) {
			im.ALiBi = func(x []float32, slope, pos float32) {
				for j := range x {
					x[j] -= slope * (pos - float32(j))
				}
			}
		}},
		{"bf16 conversion", "F32ToBF16 truncates", func(im *Impl) {
			im.F32ToBF16 = func(dst []uint16, src []float32) {
				for i, v := range src {
					dst[i] = uint16(math.Float32bits(v) >> 16)
				}
			}
		}},
		{"bf16 conversion", "BF16ToF32 flips a bit in a full block", func(im *Impl) {
			im.BF16ToF32 = func(dst []float32, src []uint16) {
				g.BF16ToF32(dst, src)
				dst[5] = math.Float32frombits(math.Float32bits(dst[5]) ^ 1<<16)
			}
		}},
		{"f16 conversion", "F32ToF16 flips a bit in the tail", func(im *Impl) {
			im.F32ToF16 = func(dst []uint16, src []float32) {
				g.F32ToF16(dst, src)
				dst[len(src)-1] ^= 1
			}
		}},
		{"f16 conversion", "F16ToF32 flips a bit", func(im *Impl) {
			im.F16ToF32 = func(dst []float32, src []uint16) {
				g.F16ToF32(dst, src)
				dst[20] = math.Float32frombits(math.Float32bits(dst[20]) ^ 1<<13)
			}
		}},
		{"packing", "PackVNNIInto ignores p0", func(im *Impl) {
			im.PackVNNIInto = func(dst []uint16, ldb, p0 int, src []float32, ld, k, n int, transposed bool, e Elem) {
				g.PackVNNIInto(dst, ldb, 0, src, ld, k, n, transposed, e)
			}
		}},
		{"packing", "PackVNNI16Into packs strips 16·k apart", func(im *Impl) {
			im.PackVNNI16Into = func(dst []uint16, ldb, p0 int, src []uint16, ld, k, n int, transposed bool) {
				g.PackVNNI16Into(dst, W*(p0+k+k%2), p0, src, ld, k, n, transposed)
			}
		}},
		{"TransposeRound", "truncates to bf16", func(im *Impl) {
			im.TransposeRound = func(dst []uint16, ldd int, src []float32, lds, rows, cols int, e Elem) {
				g.TransposeRound(dst, ldd, src, lds, rows, cols, e)
				for i := 0; i < rows && e == BF16; i++ {
					for j, v := range src[i*lds : i*lds+cols] {
						dst[j*ldd+i] = uint16(math.Float32bits(v) >> 16)
					}
				}
			}
		}},
		{"ExpSumBF16", "truncates P to bfloat16", func(im *Impl) {
			im.ExpSumBF16 = func(dst []uint16, x []float32, scale, sub float32) float32 {
				s := g.ExpSum(x, scale, sub)
				for i, v := range x {
					dst[i] = uint16(math.Float32bits(v) >> 16)
				}
				return s
			}
		}},
		{"RoundF32", "skips the tail", func(im *Impl) {
			im.RoundF32 = func(x []float32, e Elem) { g.RoundF32(x[:len(x)&^15], e) }
		}},
		{"kernel broken", "panics", func(im *Impl) {
			im.Dot = func(a, b []float32) float32 { return a[len(a)] }
		}},
	} {
		im := Generic
		im.Name = "broken"
		c.inject(&im)
		err := selfCheck(im)
		if err == nil {
			t.Errorf("selfCheck accepted a kernel set whose %s %s", c.name, c.bug)
			continue
		}
		if !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s %s: rejected for another reason: %v", c.name, c.bug, err)
		}
	}
}

// TestSelfCheckHalfRejectsBroken: a generic path with one bug fails
// selfCheckHalf.
func TestSelfCheckHalfRejectsBroken(t *testing.T) {
	type mul = func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int)
	for _, e := range []Elem{BF16, F16} {
		g := GenericHalf(e)
		for _, c := range []struct {
			bug         string
			mul, mulAdd mul
		}{
			{"drops the last pair", nil, func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
				g.MulAdd(c, ldc, a, lda, b, ldb, m, n, k-2)
			}},
			{"panics", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) { _ = a[len(a)] }, nil},
			{"ignores the strip stride", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
				g.Mul(c, ldc, a, lda, b, W*k, m, n, k)
			}, nil},
			{"leaves the row tail (m%16)", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
				g.Mul(c, ldc, a, lda, b, ldb, m&^15, n, k)
			}, nil},
			{"overwrites instead of adding", nil, g.Mul},
			{"writes past n", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
				g.Mul(c, ldc, a, lda, b, ldb, m, n, k)
				for i := 0; i < m; i++ {
					c[i*ldc+n] = 0
				}
			}, nil},
			{"is off in one element by 3× the largest tolerance", nil, func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
				g.MulAdd(c, ldc, a, lda, b, ldb, m, n, k)
				c[(m-1)*ldc+n-1] += 3 * 1e-5 * float32(1+k) // |A|, |B| ≤ 1: Σ|A·B| ≤ k
			}},
		} {
			h := g
			h.Name = "broken"
			if c.mul != nil {
				h.Mul = c.mul
			}
			if c.mulAdd != nil {
				h.MulAdd = c.mulAdd
			}
			if selfCheckHalf(h) == nil {
				t.Errorf("%s: selfCheckHalf accepted a path that %s", e, c.bug)
			}
		}
	}
}

// TestSelfCheckDecodeRejectsBroken: GenericDecode with one bug fails
// selfCheckDecode, naming the kernel.
func TestSelfCheckDecodeRejectsBroken(t *testing.T) {
	g := GenericDecode
	for _, c := range []struct {
		name   string // what the error must mention
		bug    string
		inject func(dk *Decode)
	}{
		{"Scores f32", "reads one key short", func(dk *Decode) {
			dk.Scores[FormatF32] = func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) {
				g.Scores[FormatF32](s, lds, q, m, k, ldk, n-1, d)
			}
		}},
		{"Scores f16", "reads one element of each key short", func(dk *Decode) {
			dk.Scores[FormatF16] = func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) {
				qs := make([]float32, m*(d-1))
				for r := 0; r < m; r++ {
					copy(qs[r*(d-1):], q[r*d:r*d+d-1])
				}
				g.Scores[FormatF16](s, lds, qs, m, k, ldk, n, d-1)
			}
		}},
		{"Scores bf16", "leaves the rows beyond 16", func(dk *Decode) {
			dk.Scores[FormatBF16] = func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) {
				g.Scores[FormatBF16](s, lds, q, min(m, 16), k, ldk, n, d)
			}
		}},
		{"Accum bf16", "misses the last key", func(dk *Decode) {
			dk.Accum[FormatBF16] = func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int) {
				g.Accum[FormatBF16](o, ldo, p, ldp, m, v, ldv, n-1, d)
			}
		}},
		{"Accum f32", "writes the column after d", func(dk *Decode) {
			dk.Accum[FormatF32] = func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int) {
				g.Accum[FormatF32](o, ldo, p, ldp, m, v, ldv, n, d)
				for r := 0; r < m; r++ {
					o[r*ldo+d]++
				}
			}
		}},
		{"Accum q8_0", "ignores the block scales", func(dk *Decode) {
			dk.Accum[FormatQ8] = func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int) {
				one := append([]byte(nil), v...)
				for j := 0; j < n; j++ {
					for b := 0; b < d/Q8Block; b++ {
						one[j*ldv+b*Q8BlockBytes], one[j*ldv+b*Q8BlockBytes+1] = 0x00, 0x3c // fp16 1.0
					}
				}
				g.Accum[FormatQ8](o, ldo, p, ldp, m, one, ldv, n, d)
			}
		}},
		{"Scores q4_0", "swaps the nibbles of the codes", func(dk *Decode) {
			dk.Scores[FormatQ4] = func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) {
				sw := append([]byte(nil), k...)
				for j := 0; j < n; j++ {
					for b := 0; b < d/Q4Block; b++ {
						codes := sw[j*ldk+b*Q4BlockBytes+2 : j*ldk+(b+1)*Q4BlockBytes]
						for i, c := range codes {
							codes[i] = c<<4 | c>>4
						}
					}
				}
				g.Scores[FormatQ4](s, lds, q, m, sw, ldk, n, d)
			}
		}},
		{"Accum q4_0", "forgets the offset 8 of the codes", func(dk *Decode) {
			dk.Accum[FormatQ4] = func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int) {
				row := make([]float32, d)
				for j := 0; j < n; j++ {
					widenQ4(row, v[j*ldv:])
					for i, x := range row {
						blk := v[j*ldv+i/Q4Block*Q4BlockBytes:]
						row[i] = x + 8*F16ToF32(uint16(blk[0])|uint16(blk[1])<<8)
					}
					for r := 0; r < m; r++ {
						for c, x := range row {
							o[r*ldo+c] += p[r*ldp+j] * x
						}
					}
				}
			}
		}},
		{"ScoresHeads q8_0", "swaps the last two heads", func(dk *Decode) {
			dk.ScoresHeads[FormatQ8] = func(s []float32, lds int, q []float32, heads int, k []byte, ldk, hs, n, d int) {
				g.ScoresHeads[FormatQ8](s, lds, q, heads, k, ldk, hs, n, d)
				a, b := s[(heads-2)*lds:(heads-2)*lds+n], s[(heads-1)*lds:(heads-1)*lds+n]
				for j := range a {
					a[j], b[j] = b[j], a[j]
				}
			}
		}},
		{"AccumHeads f16", "skips the last key of the first head", func(dk *Decode) {
			dk.AccumHeads[FormatF16] = func(o []float32, ldo int, p []float32, ldp, heads int, v []byte, ldv, hs, n, d int) {
				g.Accum[FormatF16](o, ldo, p, ldp, 1, v, ldv, n-1, d)
				g.AccumHeads[FormatF16](o[ldo:], ldo, p[ldp:], ldp, heads-1, v[hs:], ldv, hs, n, d)
			}
		}},
		{"ScoresGroup f32", "swaps the first two rows of each head", func(dk *Decode) {
			dk.ScoresGroup[FormatF32] = func(s []float32, lds int, q []float32, m, heads int, k []byte, ldk, hs, n, d int) {
				groupScores(FormatF32, g.Scores[FormatF32])(s, lds, q, m, heads, k, ldk, hs, n, d)
				for h := 0; h < heads; h++ {
					a, b := s[h*m*lds:h*m*lds+n], s[(h*m+1)*lds:(h*m+1)*lds+n]
					for j := range a {
						a[j], b[j] = b[j], a[j]
					}
				}
			}
			dk.AccumGroup[FormatF32] = groupAccum(FormatF32, g.Accum[FormatF32])
		}},
		{"AccumGroup bf16", "misses the last key", func(dk *Decode) {
			dk.ScoresGroup[FormatBF16] = groupScores(FormatBF16, g.Scores[FormatBF16])
			dk.AccumGroup[FormatBF16] = func(o []float32, ldo int, p []float32, ldp, m, heads int, v []byte, ldv, hs, n, d int) {
				groupAccum(FormatBF16, g.Accum[FormatBF16])(o, ldo, p, ldp, m, heads, v, ldv, hs, n-1, d)
			}
		}},
		{"ScoresGroup f16", "swaps the first two heads' sums for 8 rows per head", func(dk *Decode) {
			dk.AccumGroup[FormatF16] = groupAccum(FormatF16, g.Accum[FormatF16])
			dk.ScoresGroup[FormatF16] = func(s []float32, lds int, q []float32, m, heads int, k []byte, ldk, hs, n, d int) {
				groupScores(FormatF16, g.Scores[FormatF16])(s, lds, q, m, heads, k, ldk, hs, n, d)
				if m == 8 && heads >= 2 {
					a, b := s[:n], s[m*lds:m*lds+n]
					for j := range a {
						a[j], b[j] = b[j], a[j]
					}
				}
			}
		}},
		{"AccumGroup f32", "misses the last key for 2 rows per head", func(dk *Decode) {
			dk.ScoresGroup[FormatF32] = groupScores(FormatF32, g.Scores[FormatF32])
			dk.AccumGroup[FormatF32] = func(o []float32, ldo int, p []float32, ldp, m, heads int, v []byte, ldv, hs, n, d int) {
				if m == 2 {
					n--
				}
				groupAccum(FormatF32, g.Accum[FormatF32])(o, ldo, p, ldp, m, heads, v, ldv, hs, n, d)
			}
		}},
		{"boom", "panics", func(dk *Decode) {
			dk.Scores[FormatQ8] = func(s []float32, lds int, q []float32, m int, k []byte, ldk, n, d int) { panic("boom") }
		}},
		{"Scores fp8_e4m3", "reads the codes as e5m2", func(dk *Decode) {
			dk.Scores[FormatE4M3] = g.Scores[FormatE5M2]
		}},
		{"Accum fp8_e5m2", "drops the sign", func(dk *Decode) {
			dk.Accum[FormatE5M2] = func(o []float32, ldo int, p []float32, ldp, m int, v []byte, ldv, n, d int) {
				abs := append([]byte(nil), v...)
				for i := range abs {
					abs[i] &= 0x7f
				}
				g.Accum[FormatE5M2](o, ldo, p, ldp, m, abs, ldv, n, d)
			}
		}},
		{"ReadSum", "skips the last byte", func(dk *Decode) {
			dk.ReadSum = func(b []byte) uint32 { return g.ReadSum(b[:len(b)-1]) }
		}},
	} {
		dk := g
		dk.Name = "broken"
		c.inject(&dk)
		err := selfCheckDecode(dk)
		if err == nil {
			t.Errorf("selfCheckDecode accepted decode kernels whose %s %s", c.name, c.bug)
			continue
		}
		if !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s %s: rejected for another reason: %v", c.name, c.bug, err)
		}
	}
}
