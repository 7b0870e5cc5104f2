package flashattn

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/flashattn/flashattn/half"

	"github.com/flashattn/flashattn/internal/kernel"
)

// nonproduct_test.go counts the work outside the matrix products that one
// Forward gives the kernels (conversions, vector scaling), by running it on
// the active kernel set with those kernels wrapped: the work that caps the
// fraction of peak on cores whose products run twice as fast.

// kernelWork is what countingSet's wrappers count.
type kernelWork struct {
	bf16ToF32, f32ToBF16 int // elements converted
	f32ToBF16Calls       int
	toHalfSrcs           map[*float32]bool // F32ToBF16, F32ToF16: the first elements of the rows converted
	scaleBF16Calls       int
	scaleCalls           int
	roundF32             int           // elements rounded in float32
	halfMulAdd           int           // calls of the bfloat16 products' MulAdd
	halfMulA             []halfOperand // the A operands of the bfloat16 products' Mul
}

// halfOperand is the A operand of one bfloat16 product: its first element
// and its depth k.
type halfOperand struct {
	a *uint16
	k int
}

// inside reports whether o's first element lies in s.
func (o halfOperand) inside(s []half.BF16) bool {
	if len(s) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(&s[0]))
	x := uintptr(unsafe.Pointer(o.a))
	return x >= lo && x < lo+uintptr(len(s))*unsafe.Sizeof(s[0])
}

// toHalfSrc records the first element of a row converted to 16 bits.
func (w *kernelWork) toHalfSrc(src []float32) {
	if len(src) > 0 {
		if w.toHalfSrcs == nil {
			w.toHalfSrcs = map[*float32]bool{}
		}
		w.toHalfSrcs[&src[0]] = true
	}
}

// countingSet forces the active set with its BF16ToF32, F32ToBF16, Scale,
// RoundF32 and bfloat16 MulAdd wrapped to count into w.
func countingSet(t *testing.T, w *kernelWork) {
	t.Helper()
	s := *kernel.Active()
	im := s.Impl
	s.Impl.BF16ToF32 = func(dst []float32, src []uint16) { w.bf16ToF32 += len(src); im.BF16ToF32(dst, src) }
	s.Impl.F32ToBF16 = func(dst []uint16, src []float32) {
		w.f32ToBF16 += len(src)
		w.f32ToBF16Calls++
		w.toHalfSrc(src)
		im.F32ToBF16(dst, src)
	}
	s.Impl.F32ToF16 = func(dst []uint16, src []float32) { w.toHalfSrc(src); im.F32ToF16(dst, src) }
	s.Impl.ScaleBF16 = func(dst []uint16, x []float32, a float32) { w.scaleBF16Calls++; im.ScaleBF16(dst, x, a) }
	s.Impl.Scale = func(x []float32, a float32) { w.scaleCalls++; im.Scale(x, a) }
	s.Impl.RoundF32 = func(x []float32, e kernel.Elem) { w.roundF32 += len(x); im.RoundF32(x, e) }
	mul := s.BF16.Mul
	s.BF16.Mul = func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
		w.halfMulA = append(w.halfMulA, halfOperand{&a[0], k})
		mul(c, ldc, a, lda, b, ldb, m, n, k)
	}
	mulAdd := s.BF16.MulAdd
	s.BF16.MulAdd = func(c []float32, ldc int, a []uint16, lda int, b []uint16, ldb int, m, n, k int) {
		w.halfMulAdd++
		mulAdd(c, ldc, a, lda, b, ldb, m, n, k)
	}
	t.Cleanup(kernel.ForceSet(&s))
}

// TestForwardNonProductWork: with one key tile per row (no online rescale)
// and packed K/V, a Forward normalises each output row with the vector
// kernel (one Scale per row, not an element loop; a bfloat16 row with one
// ScaleBF16, normalised and rounded into O in one pass, and a float16 one
// converted from the normalised accumulator row itself, not from a copy
// of it), converts P to bfloat16 a
// tile at a time (not a row at a time), and converts no element of a
// bfloat16 Q to float32 (its bits feed the bfloat16 products as they are;
// the last three where the bfloat16 products are native, not the "f32" path),
// and sets each block's accumulator with its first P·V rather than adding
// it to a cleared one; P itself is written in bfloat16 by the exponential,
// not converted from a float32 tile; the scores' products read Q's own
// bfloat16 rows, not a copy of them.
// One worker, so that the counters need no lock.
func TestForwardNonProductWork(t *testing.T) {
	const b, n, h, d, bq = 1, 256, 2, 64, 32
	rows := b * n * h
	for _, tc := range []struct {
		dt     DType
		causal bool
	}{{Float32, false}, {Float32, true}, {Float16, false}, {BFloat16, false}, {BFloat16, true}} {
		t.Run(tc.dt.String()+map[bool]string{false: "", true: "/causal"}[tc.causal], func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			mk := func() Tensor { return toType(randSlice(r, b*n*h*d), tc.dt, b, n, h, d) }
			q, k, v := mk(), mk(), mk()
			opts := &Options{Causal: tc.causal, BlockQ: bq, BlockK: n, Workers: 1}
			var w kernelWork
			countingSet(t, &w)
			if _, _, err := Forward(q, k, v, opts); err != nil {
				t.Fatal(err)
			}
			if w.scaleCalls+w.scaleBF16Calls < rows {
				t.Errorf("Scale and ScaleBF16 called %d times for %d output rows: the rows are not normalised by the vector kernel", w.scaleCalls+w.scaleBF16Calls, rows)
			}
			switch tc.dt {
			case BFloat16:
				// O's rows normalised and rounded into O in one pass.
				if w.scaleBF16Calls != rows {
					t.Errorf("ScaleBF16 called %d times for %d bfloat16 output rows: the rows are normalised, then converted", w.scaleBF16Calls, rows)
				}
			case Float16:
				// O's rows are converted straight from the block's
				// accumulator rows (one per row), not from a float32 copy
				// in one scratch row.
				if srcs := len(w.toHalfSrcs); srcs < bq {
					t.Errorf("O's rows converted from %d distinct float32 rows for blocks of %d rows: they are copied to a scratch row first", srcs, bq)
				}
			}
			if tc.dt != BFloat16 || kernel.Active().BF16.Name == "f32" {
				return // no 16-bit products: float32 Q and P are what they use
			}
			if w.bf16ToF32 != 0 {
				t.Errorf("%d elements converted from bfloat16 to float32 (Q has %d): Q makes a round trip through float32", w.bf16ToF32, rows*d)
			}
			// Tiles of bq rows: all n keys; under the causal mask, the
			// keys left of the diagonal block and the diagonal block.
			tiles := rows / bq
			if tc.causal {
				tiles *= 2
			}
			// P is written in bfloat16 by the exponential
			// (Impl.ExpSumBF16), and O by ScaleBF16: F32ToBF16 converts
			// neither a float32 P tile in a second pass nor O's rows.
			if w.f32ToBF16 != 0 {
				t.Errorf("%d elements converted from float32 to bfloat16 in %d calls: P after the exponential or O after its normalisation", w.f32ToBF16, w.f32ToBF16Calls)
			}
			// The scores S = Q·Kᵀ, one product per tile, read Q's rows
			// where they lie, not from a copy of them. Under the causal
			// mask each head's first block has its diagonal tile only.
			scoreTiles := tiles
			if tc.causal {
				scoreTiles -= h
			}
			inQ := 0
			for _, o := range w.halfMulA {
				if o.k == d && o.inside(q.BF16) {
					inQ++
				}
			}
			if inQ != scoreTiles {
				t.Errorf("%d of %d Q·Kᵀ products read Q's own rows: the others read a copy of Q", inQ, scoreTiles)
			}
			// The first P·V of each block sets its accumulator (Mul), not
			// adds to a cleared one (MulAdd).
			if first := rows / bq; w.halfMulAdd > tiles-first {
				t.Errorf("%d P·V products add to the accumulator for %d tiles of %d row blocks: the first one adds to zeros", w.halfMulAdd, tiles, first)
			}
		})
	}
}

// TestForwardNonProductWorkFloat32Q: a float32 Q beside bfloat16 K and V
// (the products round to bfloat16; a prompt chunk over a bfloat16 cache)
// with packed K/V and native bfloat16 products is converted to bfloat16
// once per row block, straight from its rows: not copied to float32, rounded
// there, then converted. Each key split of a row block loads Q again, so the
// round trip cost a pass over Q per split. The result is the same bits as
// with Q rounded to bfloat16 first.
func TestForwardNonProductWorkFloat32Q(t *testing.T) {
	if kernel.Active().BF16.Name == "f32" {
		t.Skip("no native bfloat16 products on this kernel set")
	}
	const b, n, h, d = 1, 512, 2, 64
	for _, causal := range []bool{false, true} {
		t.Run(map[bool]string{false: "full", true: "causal"}[causal], func(t *testing.T) {
			r := rand.New(rand.NewPCG(8, 8))
			q := NewTensor(b, n, h, d)
			copy(q.Data, randSlice(r, b*n*h*d))
			k := toType(randSlice(r, b*n*h*d), BFloat16, b, n, h, d)
			v := toType(randSlice(r, b*n*h*d), BFloat16, b, n, h, d)
			opts := &Options{Causal: causal, Workers: 1}
			want, wantLSE, err := Forward(toType(q.Data, BFloat16, b, n, h, d), k, v, opts)
			if err != nil {
				t.Fatal(err)
			}
			var w kernelWork
			countingSet(t, &w)
			o, lse, err := Forward(q, k, v, opts)
			if err != nil {
				t.Fatal(err)
			}
			if w.roundF32 != 0 {
				t.Errorf("%d elements rounded in float32 (Q has %d): Q makes a round trip through float32", w.roundF32, b*n*h*d)
			}
			// O in the type of the products (a float32 O rounded to it).
			got := gather(toType(gather(o), BFloat16, b, n, h, d))
			if !equalBits(got, gather(want)) || !equalBits(lse, wantLSE) {
				t.Errorf("a float32 Q gives other bits than Q rounded to bfloat16 first")
			}
		})
	}
}
