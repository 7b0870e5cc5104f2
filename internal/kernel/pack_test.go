package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// testedImpls lists every implementation this CPU can run, whether or not
// it passed its start-up self-check (TestSelfCheck reports that), so that
// a broken kernel fails here with its own message.
func testedImpls() []Impl { return append(archImpls(), Generic) }

// packSource returns rows×cols float32 values with leading dimension ld,
// ending at a guard page: random values mixed with the hard cases of the
// conversions (ties, NaN, ±Inf, subnormals, values that overflow fp16).
func packSource(t *testing.T, r *rand.Rand, sample []float32, rows, cols, ld int) []float32 {
	n := 0
	if rows > 0 && cols > 0 {
		n = (rows-1)*ld + cols
	}
	src := guardedF32(t, n)
	for i := range src {
		if r.IntN(4) == 0 {
			src[i] = sample[r.IntN(len(sample))]
		} else {
			src[i] = r.Float32()*4 - 2
		}
	}
	return src
}

// TestPackVNNIImpl compares PackVNNIInto and PackVNNI16Into of every
// implementation with the Go reference, bit for bit, on every edge: k
// around the blocks of 16 and 32 (odd ones have a pad row), n around the
// strips of 16 and the column blocks of 32, p0 > 0 and strip strides above
// the minimum. dst and src end at guard pages, and dst starts filled with
// canaries, so a write to anything but the chunk's pair rows shows up as
// a difference from the reference (which writes only those).
func TestPackVNNIImpl(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	sample := convSample(r)
	ks := []int{1, 2, 3, 15, 16, 17, 31, 32, 33, 48, 64, 65, 130}
	ns := []int{1, 7, 15, 16, 17, 31, 32, 33, 48, 50, 64}
	if raceEnabled || testing.Short() {
		ks, ns = []int{1, 16, 33, 64}, []int{7, 16, 33}
	}
	for _, im := range testedImpls() {
		for _, k := range ks {
			for _, n := range ns {
				for _, tr := range []bool{false, true} {
					p0 := 2 * ((k + n) % 3)
					kp := k + k%2
					ldb := W * (p0 + kp + (k+2*n)%3)
					rows, cols := k, n
					if tr {
						rows, cols = n, k
					}
					ld := cols + (k+n)%5
					src := packSource(t, r, sample, rows, cols, ld)
					src16 := guardedU16(t, len(src))
					for i, v := range src {
						src16[i] = F32ToBF16(v)
					}
					size := VNNIIntoLen(ldb, p0, k, n)
					for _, e := range []Elem{BF16, F16, 0} {
						got, want := guardedU16(t, size), make([]uint16, size)
						for i := range got {
							got[i], want[i] = canary16, canary16
						}
						if e == 0 {
							im.PackVNNI16Into(got, ldb, p0, src16, ld, k, n, tr)
							PackVNNI16Into(want, ldb, p0, src16, ld, k, n, tr)
						} else {
							im.PackVNNIInto(got, ldb, p0, src, ld, k, n, tr, e)
							PackVNNIInto(want, ldb, p0, src, ld, k, n, tr, e)
						}
						for i := range got {
							if got[i] != want[i] {
								what := "16-bit source"
								if e != 0 {
									what = "float32 source to " + e.String()
								}
								t.Fatalf("%s %s k=%d n=%d transposed=%v p0=%d ldb=%d: dst[%d] = %#04x, want %#04x",
									im.Name, what, k, n, tr, p0, ldb, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestPackVNNIReference pins the reference packer to the layout formula,
// including the zero pad row of an odd k, the zero pad columns, and that it
// writes nothing outside its chunk's pair rows.
func TestPackVNNIReference(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, k := range []int{1, 4, 7} {
		for _, n := range []int{3, 16, 20} {
			for _, tr := range []bool{false, true} {
				const p0 = 4
				kp := k + k%2
				ldb := W * (p0 + kp + 2)
				ld := max(k, n) + 1
				src := randSlice(r, max(k, n)*ld)
				dst := make([]uint16, VNNIIntoLen(ldb, p0, k, n))
				for i := range dst {
					dst[i] = canary16
				}
				PackVNNIInto(dst, ldb, p0, src, ld, k, n, tr, BF16)
				written := map[int]bool{}
				for p := 0; p < kp; p++ {
					for j := 0; j < Pad(n); j++ {
						idx := (j/W)*ldb + ((p0+p)/2)*32 + (j%W)*2 + (p0+p)%2
						written[idx] = true
						want := uint16(0)
						if p < k && j < n {
							v := src[p*ld+j]
							if tr {
								v = src[j*ld+p]
							}
							want = F32ToBF16(v)
						}
						if dst[idx] != want {
							t.Fatalf("k=%d n=%d transposed=%v: (%d, %d) = %#04x, want %#04x", k, n, tr, p, j, dst[idx], want)
						}
					}
				}
				for i, v := range dst {
					if !written[i] && v != canary16 {
						t.Fatalf("k=%d n=%d transposed=%v: wrote dst[%d] outside the chunk", k, n, tr, i)
					}
				}
			}
		}
	}
}

// TestPackVNNIChunks packs a long V (rows = keys) and a long K (rows =
// keys, transposed) in chunks of keys from concurrent goroutines into one
// buffer each, as the attention core does, and compares with packing each
// in one call. Under the race detector this also checks that chunks write
// disjoint memory.
func TestPackVNNIChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	const keys, dim = 203, 40
	chunks := []int{64, 32, 6, 48, 16, 37} // V: even sizes then the odd rest; K: strips of 16
	src := randSlice(r, keys*dim)
	for _, im := range testedImpls() {
		for _, e := range []Elem{BF16, F16} {
			// V: k = keys, n = dim; chunks of rows at p0.
			ldb := W * (keys + keys%2)
			one, par := make([]uint16, Pad(dim)/W*ldb), make([]uint16, Pad(dim)/W*ldb)
			im.PackVNNIInto(one, ldb, 0, src, dim, keys, dim, false, e)
			var wg sync.WaitGroup
			for p0, i := 0, 0; p0 < keys; p0, i = p0+chunks[i], i+1 {
				wg.Add(1)
				go func(p0, c int) {
					defer wg.Done()
					im.PackVNNIInto(par, ldb, p0, src[p0*dim:], dim, c, dim, false, e)
				}(p0, chunks[i])
			}
			wg.Wait()
			if err := sameU16(one, par); err != nil {
				t.Fatalf("%s %v V in chunks: %v", im.Name, e, err)
			}
			// K: k = dim, n = keys; chunks of keys (multiples of 16) at
			// strip offsets.
			ldb = W * (dim + dim%2)
			one, par = make([]uint16, Pad(keys)/W*ldb), make([]uint16, Pad(keys)/W*ldb)
			im.PackVNNIInto(one, ldb, 0, src, dim, dim, keys, true, e)
			for j0 := 0; j0 < keys; j0 += 48 {
				wg.Add(1)
				go func(j0 int) {
					defer wg.Done()
					im.PackVNNIInto(par[j0/W*ldb:], ldb, 0, src[j0*dim:], dim, dim, min(48, keys-j0), true, e)
				}(j0)
			}
			wg.Wait()
			if err := sameU16(one, par); err != nil {
				t.Fatalf("%s %v K in chunks: %v", im.Name, e, err)
			}
		}
	}
}

func sameU16(x, y []uint16) error {
	for i := range x {
		if x[i] != y[i] {
			return fmt.Errorf("element %d: %#04x vs %#04x", i, x[i], y[i])
		}
	}
	return nil
}

// TestPackVNNIPanics: every precondition of the packers is checked on
// every implementation before memory is touched.
func TestPackVNNIPanics(t *testing.T) {
	for _, im := range testedImpls() {
		mustPanic := func(name string, f func()) {
			t.Helper()
			defer func() {
				if recover() == nil {
					t.Errorf("%s %s: no panic", im.Name, name)
				}
			}()
			f()
		}
		src, src16 := make([]float32, 64*64), make([]uint16, 64*64)
		dst := make([]uint16, 4096)
		mustPanic("odd p0", func() { im.PackVNNIInto(dst, 128, 1, src, 16, 4, 16, false, BF16) })
		mustPanic("stride", func() { im.PackVNNIInto(dst, 64+30, 2, src, 16, 4, 32, false, BF16) })
		mustPanic("short dst", func() { im.PackVNNI16Into(dst[:16*9], 16*10, 2, src16, 16, 4, 32, true) })
		mustPanic("short src", func() { im.PackVNNI16Into(dst, 64, 0, src16[:63], 16, 4, 16, false) })
		mustPanic("short src, transposed", func() { im.PackVNNIInto(dst, 64, 0, src[:16*15], 16, 4, 16, true, F16) })
		mustPanic("ld below row", func() { im.PackVNNIInto(dst, 64, 0, src, 3, 4, 16, true, F16) })
		mustPanic("element type", func() { im.PackVNNIInto(dst, 64, 0, src, 16, 4, 16, true, 3) })
		mustPanic("TransposeRound dst", func() { im.TransposeRound(dst[:100], 10, src, 16, 10, 11, BF16) })
		mustPanic("TransposeRound src", func() { im.TransposeRound(dst, 16, src[:100], 11, 10, 11, BF16) })
		mustPanic("RoundF32 element type", func() { im.RoundF32(src, 0) })
		// The exact bounds pass: 16·10 + 16·(2+4) = 256 elements.
		im.PackVNNI16Into(dst[:256], 160, 2, src16, 16, 4, 32, true)
		im.TransposeRound(dst[:10*10+10], 10, src[:9*11+11], 11, 10, 11, F16)
	}
}

// TestTransposeRound compares TransposeRound of every implementation with
// the scalar rounding, bit for bit, on shapes around the 16×16 blocks with
// leading dimensions above the minimum; src and dst end at guard pages and
// dst's other elements must keep their canaries.
func TestTransposeRound(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	sample := convSample(r)
	sizes := []int{1, 2, 15, 16, 17, 31, 32, 33, 47, 64}
	if raceEnabled || testing.Short() {
		sizes = []int{1, 16, 17, 33}
	}
	for _, im := range testedImpls() {
		for _, rows := range sizes {
			for _, cols := range sizes {
				lds, ldd := cols+(rows%3), rows+(cols%4)
				src := packSource(t, r, sample, rows, cols, lds)
				for _, e := range []Elem{BF16, F16} {
					dst := guardedU16(t, (cols-1)*ldd+rows)
					for i := range dst {
						dst[i] = canary16
					}
					im.TransposeRound(dst, ldd, src, lds, rows, cols, e)
					for idx, got := range dst {
						j, i := idx/ldd, idx%ldd
						want := canary16
						if i < rows {
							want = e.FromF32(src[i*lds+j])
						}
						if got != want {
							t.Fatalf("%s %v rows=%d cols=%d: dst[%d][%d] = %#04x, want %#04x", im.Name, e, rows, cols, j, i, got, want)
						}
					}
				}
			}
		}
	}
}

// TestRoundF32 compares RoundF32 of every implementation with the scalar
// round trip, bit for bit, on the conversions' hard cases at every length
// up to 70 (vector blocks and tails), ending at a guard page.
func TestRoundF32(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	sample := convSample(r)
	for _, im := range testedImpls() {
		for _, e := range []Elem{BF16, F16} {
			lengths := []int{len(sample)}
			for n := 0; n <= 70; n++ {
				lengths = append(lengths, n)
			}
			for _, n := range lengths {
				x := guardedF32(t, n)
				off := r.IntN(len(sample) - n + 1)
				copy(x, sample[off:off+n])
				im.RoundF32(x, e)
				for i, got := range x {
					in := sample[off+i]
					if w := e.ToF32(e.FromF32(in)); math.Float32bits(got) != math.Float32bits(w) {
						t.Fatalf("%s %v n=%d: RoundF32(%#08x) = %#08x, want %#08x", im.Name, e, n, math.Float32bits(in), math.Float32bits(got), math.Float32bits(w))
					}
				}
			}
		}
	}
}

// TestPackBtLayout checks PackBt element by element against its documented
// layout, dst[(j/W)*k*W + p*W + j%W] = b[j*ldb+p] with columns n..Pad(n)-1
// zero, over a destination full of garbage: every strip tail (n%W), rows
// taken four at a time and the one to three left over (n%4).
func TestPackBtLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 64))
	for _, n := range []int{1, 3, 4, 5, 7, 15, 16, 17, 30, 32, 45, 64} {
		for _, k := range []int{1, 3, 8, 64} {
			ldb := k + 5
			b := make([]float32, n*ldb)
			for i := range b {
				b[i] = r.Float32()
			}
			dst := make([]float32, Pad(n)*k)
			for i := range dst {
				dst[i] = float32(math.NaN())
			}
			PackBt(dst, b, ldb, n, k)
			for j := 0; j < Pad(n); j++ {
				for p := 0; p < k; p++ {
					var want float32
					if j < n {
						want = b[j*ldb+p]
					}
					if got := dst[(j/W)*k*W+p*W+j%W]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("n=%d k=%d: element (p=%d, j=%d) is %v, want %v", n, k, p, j, got, want)
					}
				}
			}
		}
	}
}
