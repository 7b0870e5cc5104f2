// Package kernel holds the microkernels that do the arithmetic inside an
// attention tile: three small matrix products, the exponential of a score
// row, and a few row reductions. Everything else in flashattn (tiling,
// online softmax, masks, scheduling) is plain Go that calls these.
//
// Each kernel has a pure-Go version (generic.go) and, on amd64, AVX-512 and
// AVX2+FMA versions generated with avo from ./_asm. Active returns the Set
// in use (see set.go); FLASHATTN_KERNEL forces a choice.
//
// Conventions shared by every implementation:
//   - Matrices are row-major float32 slices with an explicit leading
//     dimension (ld, in elements).
//   - Every width marked "multiple of W" is padded by the caller to a
//     multiple of W = 16 floats, so kernels never need a column tail.
//   - Bᵀ operands of MulABt are packed by PackBt into strips of W columns.
//
// Half precision (bfloat16 and fp16): Impl carries exact bulk converters
// (F32ToBF16 and friends; the scalar conversions are in halfconv.go), the
// packers into the VNNI pair layout (PackVNNIInto, PackVNNI16Into: whole
// matrices or chunks of rows of a long one, with a strip stride), and
// TransposeRound and RoundF32 for float32 tiles; Half is a separate set of
// matrix products on 16-bit inputs with float32 accumulation, B in the
// pair layout with a strip stride. Its paths ("amx", "avx512bf16", "f32",
// "generic") are listed by HalfAvailable; the active Set holds the one
// measured fastest on this machine at first use.
package kernel

// W is the width, in float32 elements, that kernel row lengths and column
// counts are padded to: one AVX-512 register, two AVX2 registers.
const W = 16

// Pad rounds n up to a multiple of W.
func Pad(n int) int { return (n + W - 1) / W * W }

// Impl is one implementation of the microkernels.
type Impl struct {
	// Name is "generic", "avx2" or "avx512".
	Name string

	// MulABt sets C = A·Bᵀ: c[i*ldc+j] = Σ_{p<k} a[i*lda+p] * B[j][p] for
	// i < m, j < n. n is a multiple of W; bt holds Bᵀ packed by PackBt with
	// depth k. C is overwritten.
	MulABt func(c []float32, ldc int, a []float32, lda int, bt []float32, m, n, k int)

	// MulAddAB adds A·B to C: c[i*ldc+j] += Σ_{p<k} a[i*lda+p] * b[p*ldb+j]
	// for i < m, j < n. n is a multiple of W.
	MulAddAB func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)

	// MulAddAtB adds Aᵀ·B to C: c[i*ldc+j] += Σ_{p<k} a[p*lda+i] * b[p*ldb+j]
	// for i < m, j < n. n is a multiple of W.
	MulAddAtB func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int)

	// ExpSum sets x[j] = exp(scale*x[j] - sub) and returns the sum of the new
	// values. len(x) is a multiple of W. exp(-Inf) is 0 and arguments below
	// about -87.3 (where float32 exp leaves the normal range) give 0.
	ExpSum func(x []float32, scale, sub float32) float32

	// Max returns the largest element of x (-Inf if all are -Inf).
	// len(x) is a multiple of W and at least W.
	Max func(x []float32) float32

	// Scale multiplies x by a in place. len(x) is a multiple of W.
	Scale func(x []float32, a float32)

	// DsFromDp sets dp[j] = p[j] * (dp[j] - d): the softmax backward of one
	// row, with d = rowsum(dO ∘ O). len(dp) == len(p), a multiple of W.
	DsFromDp func(dp, p []float32, d float32)

	// Dot returns Σ a[i]*b[i] (len(b) >= len(a)) accumulated in index order
	// with the same arithmetic as one element of MulABt, so that dot(dO, O)
	// cancels exactly against an element of dO·Vᵀ when P is one-hot.
	Dot func(a, b []float32) float32

	// Dot4T computes Sᵀ for four rows of A against n rows of B read in
	// place (decoding, where a K tile is used once and packing it would
	// cost more than the product): c[j*ldc+r] = Σ_{p<k} a[r*k+p]·b[j*ldb+p]
	// for r < 4, j < n. A is 4×k contiguous; k is a multiple of 8;
	// ldc >= 4.
	Dot4T func(c []float32, ldc int, a, b []float32, ldb, n, k int)

	// Softcap sets x[j] = c·tanh(x[j]/c) and, if g is not nil,
	// g[j] = 1 − tanh²(x[j]/c), the derivative factor of the backward pass.
	// len(x) is a multiple of W; g is nil or as long as x.
	Softcap func(x, g []float32, c float32)

	// ALiBi subtracts the linear bias: x[j] −= slope·|pos − j|. len(x) is a
	// multiple of W; |pos − j| must stay below 2^24 (exact in float32).
	ALiBi func(x []float32, slope, pos float32)

	// BF16ToF32 sets dst[i] = BF16ToF32(src[i]) and F16ToF32 sets
	// dst[i] = F16ToF32(src[i]) for i < len(src); F32ToBF16 and F32ToF16
	// round src[i] into dst[i] as the scalar functions do (to nearest
	// even, bit for bit). Any length works (the assembly converts blocks of
	// 16 and Go the rest); dst must be at least as long as src.
	BF16ToF32 func(dst []float32, src []uint16)
	F16ToF32  func(dst []float32, src []uint16)
	F32ToBF16 func(dst []uint16, src []float32)
	F32ToF16  func(dst []uint16, src []float32)

	// PackVNNIInto and PackVNNI16Into do what the functions of the same
	// names do (pack a k×n matrix, or a chunk of rows of a longer one,
	// into the VNNI pair layout of Half with strip stride ldb), with the
	// same results bit for bit and the same preconditions.
	PackVNNIInto   func(dst []uint16, ldb, p0 int, src []float32, ld, k, n int, transposed bool, e Elem)
	PackVNNI16Into func(dst []uint16, ldb, p0 int, src []uint16, ld, k, n int, transposed bool)

	// TransposeRound sets dst[j*ldd+i] = src[i*lds+j] rounded to type e
	// (to nearest even, as Elem.FromF32) for i < rows, j < cols: the
	// transposed 16-bit A operands of the backward products (Pᵀ, dSᵀ) from
	// float32 tiles. Nothing else of dst is written; lds ≥ cols and
	// ldd ≥ rows.
	TransposeRound func(dst []uint16, ldd int, src []float32, lds, rows, cols int, e Elem)

	// RoundF32 rounds every element of x to type e and stores its float32
	// value back: x[i] = e.ToF32(e.FromF32(x[i])). Any length works.
	RoundF32 func(x []float32, e Elem)
}

// PackBt packs the n×k row-major matrix B (row j at b[j*ldb:], k elements)
// into dst as Bᵀ in strips of W columns: element (p, j) goes to
// dst[(j/W)*k*W + p*W + j%W]. Columns n..Pad(n)-1 are zero. dst must hold
// Pad(n)*k elements.
func PackBt(dst []float32, b []float32, ldb, n, k int) {
	np := Pad(n)
	dst = dst[:np*k]
	for s := 0; s < np; s += W {
		strip := dst[s*k : (s+W)*k]
		cols := min(W, n-s)
		for jj := 0; jj < cols; jj++ {
			row := b[(s+jj)*ldb : (s+jj)*ldb+k]
			for p, v := range row {
				strip[p*W+jj] = v
			}
		}
		for jj := max(cols, 0); jj < W; jj++ {
			for p := 0; p < k; p++ {
				strip[p*W+jj] = 0
			}
		}
	}
}

// PackRows copies the n×k row-major matrix B (row j at b[j*ldb:]) into dst
// with leading dimension Pad(k), zeroing the padding columns. dst must hold
// n*Pad(k) elements.
func PackRows(dst []float32, b []float32, ldb, n, k int) {
	kp := Pad(k)
	for j := 0; j < n; j++ {
		d := dst[j*kp : (j+1)*kp]
		copy(d, b[j*ldb:j*ldb+k])
		clear(d[k:])
	}
}
