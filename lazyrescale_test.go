package flashattn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flashattn/flashattn/internal/kernel"
	"github.com/flashattn/flashattn/reference"
)

// lazyrescale_test.go tests the lazy rescale of the online softmax
// (rowState.update, rescaleSlack): the accumulator is rescaled only when a
// tile's maximum passes the row's reference max by more than τ, and the
// result is the eager softmax's all the same.

// TestForwardLazyRescale: random scores, whose row max grows only a little
// after a row's first key tile, cost no rescale at all: Scale and ScaleBF16
// run once per output row (its normalisation), not once more per tile that
// raised the row's max (at 16 key tiles a row, about log 16 of them). The
// shape's 64 equal row blocks split none of their keys (tasks.go:
// splitTarget), so that every row is normalised by its block's finish.
// One worker, so that the counters need no lock.
func TestForwardLazyRescale(t *testing.T) {
	const b, n, h, d, bq, bk = 1, 512, 4, 64, 32, 32
	rows := b * n * h
	for _, dt := range []DType{Float32, Float16, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 3))
			mk := func() Tensor { return toType(randSlice(r, b*n*h*d), dt, b, n, h, d) }
			q, k, v := mk(), mk(), mk()
			var w kernelWork
			countingSet(t, &w)
			if _, _, err := Forward(q, k, v, &Options{BlockQ: bq, BlockK: bk, Workers: 1}); err != nil {
				t.Fatal(err)
			}
			if rescales := w.scaleCalls + w.scaleBF16Calls - rows; rescales != 0 {
				t.Errorf("%d Scale and %d ScaleBF16 calls for %d output rows: %d accumulator rescales, want 0", w.scaleCalls, w.scaleBF16Calls, rows, rescales)
			}
		})
	}
}

// lazyRow is one key row's scores for TestLazyRescaleAdversarial: the
// maximum of each key tile (16 keys), the others below it.
type lazyRow struct {
	name   string
	tiles  [4]float32 // the tile maxima
	hidden int        // keys 0..hidden-1 masked
}

// TestLazyRescaleAdversarial: rows whose maximum jumps by just under and
// just over τ per tile, by 10^4, of large logits, falling, whose first
// tile is hidden and all hidden, under the error rule (the same-type rule
// for bf16 and fp16) on every kernel path: O and LSE are the eager
// softmax's. Scale 1 and Q = c·e₀, K = x·e₀ set the scores exactly; a NaN
// score in the third tile makes the row's O and LSE NaN, whether its tile
// moves the kept maximum ("over τ": a rescale) or not ("under τ",
// "falling": the exponentials against the kept maximum carry it).
func TestLazyRescaleAdversarial(t *testing.T) {
	const tau, eps = float32(rescaleSlack), float32(1.0 / 64)
	rowsOf := []lazyRow{
		{name: "under τ", tiles: [4]float32{0, tau - eps, 2 * (tau - eps), 3 * (tau - eps)}},
		{name: "over τ", tiles: [4]float32{0, tau + eps, 2 * (tau + eps), 3 * (tau + eps)}},
		{name: "jump 1e4", tiles: [4]float32{0, 1e4, 1e4, 1e4 + 3}},
		{name: "large logits", tiles: [4]float32{1e4, 1e4 + 5, 1e4 + 10, 1e4 + 17}},
		{name: "falling", tiles: [4]float32{10, 0, -10, -1e4}},
		{name: "first tile hidden", tiles: [4]float32{50, 0, 6, 1}, hidden: 16},
		{name: "all hidden", tiles: [4]float32{0, 1, 2, 3}, hidden: 64},
	}
	// 3 query rows (the decode kernels' path) and 48 (the tiled forward's,
	// in row blocks of 16 whose keys split: a part's later tiles keep or
	// move the maximum of its first).
	for _, sq := range []int{3, 48} {
		t.Run(fmt.Sprintf("sq%d", sq), func(t *testing.T) { lazyAdversarial(t, rowsOf, sq) })
	}
}

// lazyAdversarial is TestLazyRescaleAdversarial with sq query rows.
func lazyAdversarial(t *testing.T, rowsOf []lazyRow, sq int) {
	const sk, d, bk = 64, 8, 16
	qs := make([]float32, sq) // each batch element's query rows: scores c·x
	for i := range qs {
		qs[i] = []float32{1, 0.5, 2}[i%3]
	}
	bn := len(rowsOf)
	bq := 0 // the default
	if sq > 3 {
		// Row blocks of 16: 21 of them split their keys in two parts of
		// two tiles (tasks.go), so that a part's second tile is checked
		// against its first's max (one block a row would split into
		// four parts of one tile: each a first tile).
		bq = 16
	}
	r := rand.New(rand.NewPCG(29, 1))
	q, k := make([]float32, bn*sq*d), make([]float32, bn*sk*d)
	v := randSlice(r, bn*sk*d)
	for bi, lr := range rowsOf {
		for i, c := range qs {
			q[(bi*sq+i)*d] = c
		}
		for j := 0; j < sk; j++ {
			x := lr.tiles[j/bk]
			if j%bk != 0 {
				x -= float32(r.Float64() * 3)
			}
			k[(bi*sk+j)*d] = x
		}
	}
	hide := func(b, _, _, j int) bool { return j >= rowsOf[b].hidden }
	par := reference.Params{Batch: bn, SeqQ: sq, SeqK: sk, Heads: 1, KVHeads: 1, HeadDim: d, Scale: 1, Mask: hide}
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			qr, kr, vr := q, k, v
			if dt != Float32 {
				prec := precisionOf(dt)
				qr, kr, vr = prec.RoundSlice(q), prec.RoundSlice(k), prec.RoundSlice(v)
			}
			run := func(t *testing.T) {
				for _, workers := range []int{1, 4} {
					opt := &Options{Scale: 1, BlockQ: bq, BlockK: bk, Workers: workers, Mask: MaskFunc(hide)}
					out, lse, err := Forward(toType(qr, dt, bn, sq, 1, d), toType(kr, dt, bn, sk, 1, d), toType(vr, dt, bn, sk, 1, d), opt)
					if err != nil {
						t.Fatal(err)
					}
					o64, l64 := reference.Forward64(par, to64(qr), to64(kr), to64(vr))
					if dt == Float32 {
						o32, l32 := reference.Forward32(plainPar(par), qr, kr, vr)
						lazyCheck(t, workers, rowsOf, sq, d, gather(out), o32, o64, lse, l32, l64, reference.Check)
					} else {
						prec := precisionOf(dt)
						oh, lh := reference.ForwardHalf(par, prec, qr, kr, vr)
						check := func(name string, got, pl []float32, ref []float64) error {
							return reference.CheckHalf(name, prec, got, pl, ref)
						}
						lazyCheck(t, workers, rowsOf, sq, d, gather(out), oh, o64, lse, lh, l64, check)
					}
					// A NaN score in the third tile of the "under τ", "over τ"
					// and "falling" rows.
					nanRows := []int{0, 1, 4}
					kn := append([]float32(nil), kr...)
					for _, bi := range nanRows {
						kn[(bi*sk+2*bk+5)*d] = float32(math.NaN())
					}
					out, lse, err = Forward(toType(qr, dt, bn, sq, 1, d), toType(kn, dt, bn, sk, 1, d), toType(vr, dt, bn, sk, 1, d), opt)
					if err != nil {
						t.Fatal(err)
					}
					o := gather(out)
					for _, bi := range nanRows {
						for i := bi * sq; i < (bi+1)*sq; i++ {
							row := o[i*d : (i+1)*d]
							if l := lse[i]; l == l || row[0] == row[0] || row[d-1] == row[d-1] {
								t.Errorf("workers %d, %s: a NaN score gives O %v and LSE %v in its row, want NaN", workers, rowsOf[bi].name, row, l)
							}
						}
					}
				}
			}
			if dt == Float32 {
				forEachKernel(t, run)
				return
			}
			forEachHalf(t, dt, func(t *testing.T) { forEachKernel(t, run) })
		})
	}
}

// lazyCheck applies check to O and LSE of each of TestLazyRescaleAdversarial's
// batch elements (rows of sq queries of d elements).
func lazyCheck(t *testing.T, workers int, rowsOf []lazyRow, sq, d int, out, opl []float32, o64 []float64, lse, lpl []float32, l64 []float64,
	check func(name string, got, pl []float32, ref []float64) error) {
	t.Helper()
	for bi, lr := range rowsOf {
		o0, o1, l0, l1 := bi*sq*d, (bi+1)*sq*d, bi*sq, (bi+1)*sq
		if err := check("O", out[o0:o1], opl[o0:o1], o64[o0:o1]); err != nil {
			t.Errorf("%s, workers %d: %v", lr.name, workers, err)
		}
		if err := check("LSE", lse[l0:l1], lpl[l0:l1], l64[l0:l1]); err != nil {
			t.Errorf("%s, workers %d: %v", lr.name, workers, err)
		}
	}
}

// TestLazyRescaleLargeMax: a row whose kept maximum m is 2^26 (float32's
// grid there is 8) and whose next tile's maximum is m + 8 moves m, since
// 8 > τ: the exponentials of a kept m never exceed e^τ. (Compared with
// m + τ, which rounds to m + 8 on that grid, m stayed and P reached e^8.)
func TestLazyRescaleLargeMax(t *testing.T) {
	for _, im := range kernel.Available() {
		k := im
		const n = kernel.W
		m0 := float32(1 << 26)
		st := rowState{m: []float32{m0}, l: []float32{1}, o: make([]float32, n), dimPad: n, fresh: []bool{false}}
		row := make([]float32, n)
		for i := range row {
			row[i] = m0 - 64
		}
		row[3] = m0 + 8
		st.update(&k, 0, row, 1, nil)
		if st.m[0] != m0+8 {
			t.Errorf("%s: m = %v after a tile of maximum m+8, want %v (P up to %v)", k.Name, st.m[0], m0+8, row[3])
		}
		if row[3] > float32(math.Exp(rescaleSlack))*(1+1e-6) {
			t.Errorf("%s: P = %v, over e^τ", k.Name, row[3])
		}
	}
}
