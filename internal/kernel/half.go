package kernel

import (
	"fmt"
	"math"
)

// Elem is a 16-bit floating-point element type.
type Elem uint8

const (
	// BF16 is bfloat16: the top 16 bits of a float32.
	BF16 Elem = 1 + iota
	// F16 is IEEE 754 binary16.
	F16
)

// String returns "bf16" or "f16".
func (e Elem) String() string {
	switch e {
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("Elem(%d)", uint8(e))
}

// ToF32 returns the float32 value of h as an element of type e.
func (e Elem) ToF32(h uint16) float32 {
	if e == F16 {
		return F16ToF32(h)
	}
	return BF16ToF32(h)
}

// FromF32 rounds f to type e (to nearest even).
func (e Elem) FromF32(f float32) uint16 {
	if e == F16 {
		return F32ToF16(f)
	}
	return F32ToBF16(f)
}

// Half is one implementation of the half-precision matrix products: A and
// B hold 16-bit elements of type Elem, products and sums are float32.
//
// Layouts. A is row-major, m×k with leading dimension lda (in elements),
// k even (pad with a zero column). B (k×n) is in the VNNI pair layout with
// strip stride ldb: element (p, j) is at
//
//	(j/16)·ldb + (p/2)·32 + (j%16)·2 + p%2
//
// i.e. strips of 16 columns, ldb elements apart, each a sequence of k/2
// rows of 16 element pairs (B[p, j], B[p+1, j]) — 64 bytes, the operand of
// one VDPBF16PS and one row of an AMX B tile. ldb ≥ 16·k; PackVNNI packs
// with ldb = 16·k (k rounded up to even), PackVNNIInto with any larger
// stride, so that one packed long matrix (say V of a whole sequence, k the
// keys, with ldb = 16·keys) can be multiplied by any even-aligned range of
// its rows: rows [p0, p0+k) of it are the matrix at b[p0·16:] with the same
// ldb. C is row-major float32 with leading dimension ldc; n is a multiple
// of W (C is padded like every kernel's output).
//
// Arithmetic. Every path multiplies exact products (a product of two
// bfloat16 or two fp16 values is exact in float32) and accumulates in
// float32 with round-to-nearest-even, but in different orders: the
// "avx512bf16" and "generic" paths add, per pair of k, first the odd then
// the even product (VDPBF16PS's order), and agree bit for bit; "amx" and
// "f32" sum in their own orders and differ from them by float32 rounding
// only. The bfloat16 instructions ignore MXCSR and treat subnormals as
// zero: "avx512bf16", "amx" (TDPBF16PS) and "generic" read subnormal
// bfloat16 inputs as ±0 and flush subnormal float32 sums to ±0, while
// "f32" keeps both (IEEE arithmetic). Values of attention (|x| ≥ 2^-126)
// never meet the difference.
type Half struct {
	// Name is "amx" (TDPBF16PS or TDPFP16PS tiles), "avx512bf16"
	// (VDPBF16PS), "f32" (widen to float32 and use the float32 kernels of
	// the Set it belongs to) or "generic" (Go, VDPBF16PS's arithmetic).
	Name string
	// Elem is the element type of A and B.
	Elem Elem

	// Mul sets C = A·B: c[i*ldc+j] = Σ_{p<k} A[i,p]·B[p,j] for i < m,
	// j < n, with B read from b in the pair layout with strip stride ldb
	// (ldb ≥ 16·k; b holds at least (n/16−1)·ldb + 16·k elements).
	Mul func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int)

	// MulAdd adds A·B to C (arguments as for Mul): the product summed
	// from zero, as Mul computes it, then added to C once (see
	// Impl.MulAddAB).
	MulAdd func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int)

	// Peak runs iters iterations of the path's register-only throughput
	// loop and returns the FLOPs of one iteration (see FMAPeak).
	Peak func(iters int) (flopsPerIter int)
}

// bf16DAZ widens a bfloat16 treating subnormals as zero, as VDPBF16PS and
// TDPBF16PS do.
func bf16DAZ(h uint16) float32 {
	if h&0x7f80 == 0 {
		return math.Float32frombits(uint32(h&0x8000) << 16)
	}
	return math.Float32frombits(uint32(h) << 16)
}

// ftz flushes a float32 subnormal to zero of the same sign.
func ftz(x float32) float32 {
	if b := math.Float32bits(x); b&0x7f800000 == 0 {
		return math.Float32frombits(b & 0x80000000)
	}
	return x
}

// halfGeneric is the Go twin of the VDPBF16PS kernel. For every output and
// every pair (A[i,p], A[i,p+1]), (B[p,j], B[p+1,j]) it does what Intel's
// pseudo-code of VDPBF16PS does, in the same order:
//
//	c += A[i,p+1]·B[p+1,j]   (rounded to float32, subnormal result → 0)
//	c += A[i,p]·B[p,j]       (likewise)
//
// with subnormal bfloat16 inputs read as zero. A product of two bfloat16
// (8-bit significands) is exact in float32, so with a fused or a separate
// multiply-add the result is the same, and it equals VDPBF16PS bit for bit
// as long as no product falls below the float32 normal range. For fp16 the
// same order is used without flushing (fp16 products, 11-bit significands,
// are exact and normal in float32 too).
//
// MulAdd (accumulate) sums A·B from zero, as Mul does, then adds the sum
// to C once (see Impl.MulAddAB).
func halfGeneric(e Elem, accumulate bool, c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
	if accumulate {
		if m == 0 || k == 0 {
			return
		}
		// One row and one strip at a time into a buffer on the stack
		// (no allocation): each output's sum is computed on its own, so
		// the order of the outputs does not change a bit.
		var t [W]float32
		for i := 0; i < m; i++ {
			for s := 0; s < n; s += W {
				w := min(W, n-s)
				halfGeneric(e, false, t[:], W, a[i*lda:], lda, b[s/W*ldb:], ldb, 1, w, k)
				crow := c[i*ldc+s : i*ldc+s+w]
				for j, x := range t[:w] {
					crow[j] += x
				}
			}
		}
		return
	}
	for i := 0; i < m; i++ {
		clear(c[i*ldc : i*ldc+n])
	}
	if k == 0 {
		return
	}
	dec := bf16DAZ
	if e == F16 {
		dec = F16ToF32
	}
	var bq [2 * W]float32 // one pair row of a strip, widened
	for s := 0; s < n; s += W {
		strip := b[s/W*ldb : s/W*ldb+W*k]
		for q := 0; q < k/2; q++ {
			for t, h := range strip[q*2*W : (q+1)*2*W] {
				bq[t] = dec(h)
			}
			for i := 0; i < m; i++ {
				a0, a1 := dec(a[i*lda+2*q]), dec(a[i*lda+2*q+1])
				crow := c[i*ldc+s : i*ldc+s+W]
				if e == F16 {
					for j := range crow {
						crow[j] = crow[j] + a1*bq[2*j+1] + a0*bq[2*j]
					}
					continue
				}
				for j := range crow {
					crow[j] = ftz(ftz(crow[j]+a1*bq[2*j+1]) + a0*bq[2*j])
				}
			}
		}
	}
}

// GenericHalf returns the pure-Go implementation for e.
func GenericHalf(e Elem) Half {
	return Half{
		Name: "generic",
		Elem: e,
		Mul: wrapHalf("generic Mul", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
			halfGeneric(e, false, c, ldc, a, lda, b, ldb, m, n, k)
		}),
		MulAdd: wrapHalf("generic MulAdd", func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
			halfGeneric(e, true, c, ldc, a, lda, b, ldb, m, n, k)
		}),
		Peak: fmaPeakGeneric,
	}
}

// f32Half returns the path that widens A and B to float32 and runs the
// float32 kernels of im. Mul and MulAdd allocate their float32 copies:
// they exist for uniformity and tests; the attention core takes this path
// by keeping its tiles in float32 and calling im directly.
func f32Half(e Elem, im Impl) Half {
	mul := func(accumulate bool) func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
		return func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
			if !accumulate {
				for i := 0; i < m; i++ {
					clear(c[i*ldc : i*ldc+n])
				}
			}
			if m == 0 || k == 0 {
				return
			}
			af := make([]float32, m*k)
			for i := 0; i < m; i++ {
				row := a[i*lda : i*lda+k]
				if e == F16 {
					im.F16ToF32(af[i*k:(i+1)*k], row)
				} else {
					im.BF16ToF32(af[i*k:(i+1)*k], row)
				}
			}
			bf := make([]float32, k*n)
			UnpackVNNI(bf, n, b, ldb, k, n, e)
			im.MulAddAB(c, ldc, af, k, bf, n, m, n, k)
		}
	}
	return Half{
		Name:   "f32",
		Elem:   e,
		Mul:    wrapHalf("f32 Mul", mul(false)),
		MulAdd: wrapHalf("f32 MulAdd", mul(true)),
		Peak:   FMAPeak,
	}
}

// wrapHalf checks every precondition of the half-precision products before
// f touches memory; a violation is a caller bug, so it panics.
func wrapHalf(name string, f func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int)) func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
	nameC, nameA, nameB := name+" C", name+" A", name+" B" // once, not per call
	return func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
		checkWidth(n)
		if k < 0 || k%2 != 0 {
			bad(name + ": k must be even and >= 0")
		}
		checkMatrix(nameC, len(c), m, n, ldc)
		checkMatrix(nameA, len(a), m, k, lda)
		checkVNNI(nameB, len(b), ldb, k, n)
		if m == 0 || n == 0 {
			return
		}
		f(c, ldc, a, lda, b, ldb, m, n, k)
	}
}

// checkVNNI panics unless a k×n matrix (k even, n a multiple of W) in the
// pair layout with strip stride ldb fits in a slice of length size:
// ldb ≥ 16·k and (n/16−1)·ldb + 16·k ≤ size.
func checkVNNI(name string, size, ldb, k, n int) {
	if ldb < W*k {
		bad(name + ": strip stride below 16·k")
	}
	if n > 0 && k > 0 && (n/W-1)*ldb+W*k > size {
		bad(name + ": packed matrix too short")
	}
}
