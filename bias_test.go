package flashattn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/reference"
)

// biasCase is a call with a bias: the call's shape, the bias's (1 where it
// broadcasts) and its values.
type biasCase struct {
	b, sq, sk, h, hk, d int
	causal              bool
	softcap             float64
	shape               [4]int
	data                []float32
}

// newBiasCase draws q, k, v, dO and a bias of the given shape whose values
// are random, with −Inf at every 7th value and, if the bias has more than
// one query row, all of row 1 of its first (batch, head) −Inf (a fully
// masked row where the call's row 1 reads it).
func newBiasCase(seed uint64, c biasCase) (biasCase, []float32, []float32, []float32, []float32) {
	r := newRand(seed)
	s := c.shape
	c.data = randSlice(r, s[0]*s[1]*s[2]*s[3])
	for i := range c.data {
		if i%7 == 3 {
			c.data[i] = float32(math.Inf(-1))
		}
	}
	if s[2] > 1 {
		for j := range s[3] {
			c.data[s[3]+j] = float32(math.Inf(-1))
		}
	}
	q, k := randSlice(r, c.b*c.sq*c.h*c.d), randSlice(r, c.b*c.sk*c.hk*c.d)
	v, do := randSlice(r, c.b*c.sk*c.hk*c.d), randSlice(r, c.b*c.sq*c.h*c.d)
	return c, q, k, v, do
}

// biasIndex is the index of the bias value that score (b, h, i, j) reads.
func biasIndex(s [4]int, b, h, i, j int) int {
	at := func(x, n int) int {
		if n == 1 {
			return 0
		}
		return x
	}
	return ((at(b, s[0])*s[1]+at(h, s[1]))*s[2]+at(i, s[2]))*s[3] + at(j, s[3])
}

// params is the reference's description of c, its bias as a ScoreMod of
// the values data (float64, so that finite differences can move them).
func (c biasCase) params(data []float64) reference.Params {
	return reference.Params{Batch: c.b, SeqQ: c.sq, SeqK: c.sk, Heads: c.h, KVHeads: c.hk, HeadDim: c.d, Causal: c.causal, Softcap: c.softcap,
		ScoreMod: func(b, h, i, j int, x float64) (float64, float64) { return x + data[biasIndex(c.shape, b, h, i, j)], 1 }}
}

// reduceBias sums score gradients [b, h, sq, sk] over the broadcast
// dimensions of the bias shape s, in index order.
func reduceBias[T float32 | float64](c biasCase, ds []T) []T {
	s := c.shape
	out := make([]T, s[0]*s[1]*s[2]*s[3])
	for b := range c.b {
		for h := range c.h {
			for i := range c.sq {
				for j := range c.sk {
					out[biasIndex(s, b, h, i, j)] += ds[((b*c.h+h)*c.sq+i)*c.sk+j]
				}
			}
		}
	}
	return out
}

// runBias runs the forward and the backward of c with opts (ScoreMod set
// to bias) and returns O, LSE and DBias.
func runBias(t *testing.T, c biasCase, bias *Bias, q, k, v, do []float32, opts Options) (o, lse, dbias []float32) {
	t.Helper()
	opts.ScoreMod, opts.Causal, opts.Softcap = bias, c.causal, float32(c.softcap)
	qt, kt, vt := Dense(q, c.b, c.sq, c.h, c.d), Dense(k, c.b, c.sk, c.hk, c.d), Dense(v, c.b, c.sk, c.hk, c.d)
	out, lse, err := Forward(qt, kt, vt, &opts)
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := NewTensor(c.b, c.sq, c.h, c.d), NewTensor(c.b, c.sk, c.hk, c.d), NewTensor(c.b, c.sk, c.hk, c.d)
	dbias = make([]float32, len(c.data))
	g := Grads{DQ: dq, DK: dk, DV: dv, DBias: dbias}
	if err := BackwardGrads(context.Background(), g, qt, kt, vt, out, Dense(do, c.b, c.sq, c.h, c.d), lse, nil, &opts); err != nil {
		t.Fatal(err)
	}
	return out.Data, lse, dbias
}

// checkBias checks O, LSE and DBias of c against the float64 reference.
func checkBias(t *testing.T, c biasCase, q, k, v, do, o, lse, dbias []float32) {
	t.Helper()
	par := c.params(to64(c.data))
	o64, l64 := reference.Forward64(par, to64(q), to64(k), to64(v))
	o32, l32 := reference.Forward32(plainPar(par), q, k, v)
	db64 := reduceBias(c, reference.ScoreGrads64(par, to64(q), to64(k), to64(v), to64(do), nil))
	db32 := reduceBias(c, reference.ScoreGrads32(plainPar(par), q, k, v, do, nil))
	for _, g := range []struct {
		name    string
		got, pl []float32
		ref     []float64
	}{{"O", o, o32, o64}, {"LSE", lse, l32, l64}, {"DBias", dbias, db32, db64}} {
		if err := reference.Check(g.name, g.got, g.pl, g.ref); err != nil {
			t.Error(err)
		}
	}
}

// TestBiasBroadcastShapes: a bias with every combination of broadcast
// dimensions (batch, heads, query rows, keys of size 1), with −Inf values
// and a fully masked row, forward and DBias against the float64 reference,
// with GQA and more keys than a backward block.
func TestBiasBroadcastShapes(t *testing.T) {
	const B, Sq, Sk, H, Hk, D = 2, 21, 150, 4, 2, 16
	for m := range 16 {
		s := [4]int{B, H, Sq, Sk}
		for d := range 4 {
			if m&(1<<d) != 0 {
				s[d] = 1
			}
		}
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			c, q, k, v, do := newBiasCase(uint64(20+m), biasCase{b: B, sq: Sq, sk: Sk, h: H, hk: Hk, d: D, causal: m%3 == 0, shape: s})
			bias, err := NewBias(c.data, s[0], s[1], s[2], s[3])
			if err != nil {
				t.Fatal(err)
			}
			o, lse, dbias := runBias(t, c, bias, q, k, v, do, Options{})
			checkBias(t, c, q, k, v, do, o, lse, dbias)
		})
	}
}

// TestBiasKeyPaddingKernels: a key-padding bias [B, 1, 1, Sk] (−Inf on the
// padded keys of batch element 1) on every kernel path, forward and DBias
// against the float64 reference.
func TestBiasKeyPaddingKernels(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		const B, Sq, Sk, H, D = 2, 37, 90, 3, 32
		c, q, k, v, do := newBiasCase(5, biasCase{b: B, sq: Sq, sk: Sk, h: H, hk: H, d: D, shape: [4]int{B, 1, 1, Sk}})
		for j := range Sk {
			c.data[j] = 0
			c.data[Sk+j] = 0
			if j >= 60 {
				c.data[Sk+j] = float32(math.Inf(-1))
			}
		}
		bias, err := NewBias(c.data, B, 1, 1, Sk)
		if err != nil {
			t.Fatal(err)
		}
		o, lse, dbias := runBias(t, c, bias, q, k, v, do, Options{})
		checkBias(t, c, q, k, v, do, o, lse, dbias)
		for j := 60; j < Sk; j++ {
			if dbias[Sk+j] != 0 {
				t.Fatalf("DBias of a padded key (hidden by −Inf) is %g, want 0", dbias[Sk+j])
			}
		}
	})
}

// TestDBiasFiniteDifferences: DBias (and the reference's score gradient it
// is checked against) against central differences, in float64, of the
// reference's loss Σ O∘dO with respect to each bias value, with and
// without Softcap (the bias is added after it: its derivative is not part
// of the bias's gradient).
func TestDBiasFiniteDifferences(t *testing.T) {
	for n, s := range [][4]int{{1, 2, 6, 9}, {2, 1, 1, 9}, {2, 2, 1, 1}, {2, 2, 6, 9}} {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			c, q, k, v, do := newBiasCase(9, biasCase{b: 2, sq: 6, sk: 9, h: 2, hk: 2, d: 8, causal: true, softcap: float64(n % 2), shape: s})
			for i := range c.data {
				if math.IsInf(float64(c.data[i]), -1) && i%2 == 0 {
					c.data[i] = 0.5 // keep some −Inf, differentiate the rest
				}
			}
			bias, err := NewBias(c.data, s[0], s[1], s[2], s[3])
			if err != nil {
				t.Fatal(err)
			}
			_, _, dbias := runBias(t, c, bias, q, k, v, do, Options{})
			q64, k64, v64, do64 := to64(q), to64(k), to64(v), to64(do)
			loss := func(data []float64) float64 {
				o, _ := reference.Forward64(c.params(data), q64, k64, v64)
				var l float64
				for i, x := range o {
					l += x * do64[i]
				}
				return l
			}
			const step = 1e-4
			data := to64(c.data)
			fd := make([]float64, len(data))
			for i, x := range data {
				if math.IsInf(x, -1) {
					continue // a hidden position: its gradient is 0
				}
				data[i] = x + step
				up := loss(data)
				data[i] = x - step
				fd[i] = (up - loss(data)) / (2 * step)
				data[i] = x
			}
			par := c.params(to64(c.data))
			ref := reduceBias(c, reference.ScoreGrads64(par, q64, k64, v64, do64, nil))
			for i := range fd {
				if d := math.Abs(ref[i] - fd[i]); d > 1e-7 {
					t.Errorf("reference score gradient %d: %g, finite differences %g", i, ref[i], fd[i])
				}
			}
			pl := reduceBias(c, reference.ScoreGrads32(plainPar(par), q, k, v, do, nil))
			if err := reference.Check("DBias vs finite differences", dbias, pl, fd); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDBiasWorkers: DBias is the same bit for bit for any number of workers
// (the sums over broadcast batch, heads and rows run in a fixed order), and
// Grads.Accumulate adds it to what DBias holds.
func TestDBiasWorkers(t *testing.T) {
	const B, Sq, Sk, H, D = 3, 70, 200, 4, 16
	for _, s := range [][4]int{{B, 1, 1, Sk}, {1, H, Sq, Sk}, {1, 1, 1, 1}} {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			c, q, k, v, do := newBiasCase(3, biasCase{b: B, sq: Sq, sk: Sk, h: H, hk: 1, d: D, causal: true, shape: s})
			bias, err := NewBias(c.data, s[0], s[1], s[2], s[3])
			if err != nil {
				t.Fatal(err)
			}
			var first []float32
			for _, w := range []int{1, 2, 3, 8} {
				_, _, db := runBias(t, c, bias, q, k, v, do, Options{Workers: w})
				if first == nil {
					first = db
					continue
				}
				for i := range db {
					if math.Float32bits(db[i]) != math.Float32bits(first[i]) {
						t.Fatalf("Workers %d: DBias[%d] = %g, with 1 worker %g", w, i, db[i], first[i])
					}
				}
			}
			// Accumulate: DBias starts at 1, 2, 3, ...
			opts := Options{ScoreMod: bias, Causal: true}
			qt, kt, vt := Dense(q, B, Sq, H, D), Dense(k, B, Sk, 1, D), Dense(v, B, Sk, 1, D)
			out, lse, err := Forward(qt, kt, vt, &opts)
			if err != nil {
				t.Fatal(err)
			}
			acc := make([]float32, len(first))
			for i := range acc {
				acc[i] = float32(i + 1)
			}
			g := Grads{DQ: NewTensor(B, Sq, H, D), DK: NewTensor(B, Sk, 1, D), DV: NewTensor(B, Sk, 1, D), DBias: acc, Accumulate: true}
			if err := BackwardGrads(context.Background(), g, qt, kt, vt, out, Dense(do, B, Sq, H, D), lse, nil, &opts); err != nil {
				t.Fatal(err)
			}
			for i, x := range acc {
				if want := float32(i+1) + first[i]; math.Abs(float64(x-want)) > 1e-6*float64(i+1) {
					t.Fatalf("accumulated DBias[%d] = %g, want %g + %g", i, x, float32(i+1), first[i])
				}
			}
		})
	}
}

// TestBias16: a bf16 or fp16 bias (NewBiasOf) gives the same O, LSE and
// DBias, bit for bit, as a float32 bias of its values, across the
// conversion chunks and broadcasting its one key.
func TestBias16(t *testing.T) {
	const B, Sq, Sk, H, D = 2, 19, 150, 2, 16
	for _, s := range [][4]int{{1, H, Sq, Sk}, {B, 1, Sq, 1}} {
		for _, f := range []half.Format{half.BFloat16, half.Float16} {
			t.Run(fmt.Sprint(f, s), func(t *testing.T) {
				c, q, k, v, do := newBiasCase(4, biasCase{b: B, sq: Sq, sk: Sk, h: H, hk: H, d: D, shape: s})
				var b16 *Bias
				var err error
				if f == half.BFloat16 {
					h := make([]half.BF16, len(c.data))
					half.EncodeBF16(h, c.data)
					half.DecodeBF16(c.data, h)
					b16, err = NewBiasOf(h, s[0], s[1], s[2], s[3])
				} else {
					h := make([]half.F16, len(c.data))
					half.EncodeF16(h, c.data)
					half.DecodeF16(c.data, h)
					b16, err = NewBiasOf(h, s[0], s[1], s[2], s[3])
				}
				if err != nil {
					t.Fatal(err)
				}
				b32, err := NewBias(c.data, s[0], s[1], s[2], s[3])
				if err != nil {
					t.Fatal(err)
				}
				o1, l1, d1 := runBias(t, c, b16, q, k, v, do, Options{})
				o2, l2, d2 := runBias(t, c, b32, q, k, v, do, Options{})
				for _, x := range [][2][]float32{{o1, o2}, {l1, l2}, {d1, d2}} {
					for i := range x[0] {
						if math.Float32bits(x[0][i]) != math.Float32bits(x[1][i]) {
							t.Fatalf("element %d: %g with the 16-bit bias, %g with float32", i, x[0][i], x[1][i])
						}
					}
				}
				checkBias(t, c, q, k, v, do, o1, l1, d1)
			})
		}
	}
}

// TestDBiasRefused: DBias without a Bias, of the wrong length, or sharing
// memory with the bias is an *ArgError.
func TestDBiasRefused(t *testing.T) {
	const N, H, D = 8, 2, 8
	r := newRand(1)
	x := Dense(randSlice(r, N*H*D), 1, N, H, D)
	out, lse, err := Forward(x, x, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, H*N*N)
	bias, _ := NewBias(data, 1, H, N, N)
	for _, c := range []struct {
		name  string
		opts  *Options
		dbias []float32
	}{
		{"no options", nil, make([]float32, H*N*N)},
		{"a ScoreFunc", &Options{ScoreMod: relBias}, make([]float32, H*N*N)},
		{"short", &Options{ScoreMod: bias}, make([]float32, H*N*N-1)},
		{"the bias itself", &Options{ScoreMod: bias}, data},
	} {
		g := Grads{DQ: NewTensor(1, N, H, D), DK: NewTensor(1, N, H, D), DV: NewTensor(1, N, H, D), DBias: c.dbias}
		err := BackwardGrads(context.Background(), g, x, x, x, out, out, lse, nil, c.opts)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != "DBias" {
			t.Errorf("%s: %v, want an *ArgError for DBias", c.name, err)
		}
	}
}

// TestDBiasHalfInputs: bf16 and fp16 q, k, v and dO with a bias [1, H, Sq,
// Sk] and Softcap (the bias's gradient is taken after the softcap's
// derivative would apply), on every 16-bit product path: O and DBias
// against the float64 reference of the rounded inputs by the same-type
// rule.
func TestDBiasHalfInputs(t *testing.T) {
	const B, Sq, Sk, H, D = 2, 33, 100, 2, 32
	for _, dt := range []DType{BFloat16, Float16} {
		t.Run(dt.String(), func(t *testing.T) {
			forEachHalf(t, dt, func(t *testing.T) {
				prec := precisionOf(dt)
				c, q, k, v, do := newBiasCase(6, biasCase{b: B, sq: Sq, sk: Sk, h: H, hk: H, d: D, causal: true, shape: [4]int{1, H, Sq, Sk}})
				bias, err := NewBias(c.data, 1, H, Sq, Sk)
				if err != nil {
					t.Fatal(err)
				}
				opts := &Options{ScoreMod: bias, Causal: true, Softcap: 5}
				qt, kt, vt := toType(q, dt, B, Sq, H, D), toType(k, dt, B, Sk, H, D), toType(v, dt, B, Sk, H, D)
				out, lse, err := Forward(qt, kt, vt, opts)
				if err != nil {
					t.Fatal(err)
				}
				dbias := make([]float32, len(c.data))
				g := Grads{DQ: NewTensorOf(dt, B, Sq, H, D), DK: NewTensorOf(dt, B, Sk, H, D), DV: NewTensorOf(dt, B, Sk, H, D), DBias: dbias}
				if err := BackwardGrads(context.Background(), g, qt, kt, vt, out, toType(do, dt, B, Sq, H, D), lse, nil, opts); err != nil {
					t.Fatal(err)
				}
				par := c.params(to64(c.data))
				par.Softcap = 5
				qr, kr, vr, dor := prec.RoundSlice(q), prec.RoundSlice(k), prec.RoundSlice(v), prec.RoundSlice(do)
				o64, _ := reference.Forward64(par, to64(qr), to64(kr), to64(vr))
				oh, _ := reference.ForwardHalf(par, prec, q, k, v)
				db64 := reduceBias(c, reference.ScoreGrads64(par, to64(qr), to64(kr), to64(vr), to64(dor), nil))
				dbh := reduceBias(c, reference.ScoreGradsHalf(par, prec, q, k, v, do, nil))
				o := make([]float32, len(o64))
				if dt == BFloat16 {
					half.DecodeBF16(o, out.BF16)
				} else {
					half.DecodeF16(o, out.F16)
				}
				if err := reference.CheckHalf("O", prec, o, oh, o64); err != nil {
					t.Error(err)
				}
				if err := reference.CheckHalf("DBias", prec, dbias, dbh, db64); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// TestDBiasOffsets: with Options.Offsets the call's rows and keys read the
// bias from positions (Query, Key) on (Key not a multiple of a backward
// block, so a block straddles two of the gradient's slabs); DBias is 0
// where no score reads the bias.
func TestDBiasOffsets(t *testing.T) {
	const B, Sq, Sk, H, D, oq, ok = 2, 13, 90, 2, 16, 5, 70
	c, q, k, v, do := newBiasCase(11, biasCase{b: B, sq: Sq, sk: Sk, h: H, hk: H, d: D, shape: [4]int{1, H, oq + Sq, ok + Sk + 3}})
	s := c.shape
	bias, err := NewBias(c.data, s[0], s[1], s[2], s[3])
	if err != nil {
		t.Fatal(err)
	}
	_, _, dbias := runBias(t, c, bias, q, k, v, do, Options{Offsets: &Offsets{Query: oq, Key: ok}, Workers: 3})
	// The reference's call: the bias seen from the offsets.
	sub := make([]float32, H*Sq*Sk)
	for h := range H {
		for i := range Sq {
			for j := range Sk {
				sub[(h*Sq+i)*Sk+j] = c.data[(h*s[2]+oq+i)*s[3]+ok+j]
			}
		}
	}
	rc := c
	rc.shape, rc.data = [4]int{1, H, Sq, Sk}, sub
	par := rc.params(to64(sub))
	db64 := reduceBias(rc, reference.ScoreGrads64(par, to64(q), to64(k), to64(v), to64(do), nil))
	db32 := reduceBias(rc, reference.ScoreGrads32(plainPar(par), q, k, v, do, nil))
	got := make([]float32, len(sub))
	for h := range H {
		for i := range s[2] {
			for j := range s[3] {
				x := dbias[(h*s[2]+i)*s[3]+j]
				if i < oq || j < ok || j >= ok+Sk {
					if x != 0 {
						t.Fatalf("DBias[%d, %d, %d] = %g where no score reads the bias", h, i, j, x)
					}
					continue
				}
				got[(h*Sq+i-oq)*Sk+j-ok] = x
			}
		}
	}
	if err := reference.Check("DBias", got, db32, db64); err != nil {
		t.Error(err)
	}
}
