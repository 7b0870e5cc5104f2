package kernel

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// fp16Values are the finite non-negative binary16 values, indexed by their
// bits (0x0000..0x7bff), computed from the definition of the format.
var fp16Values = func() []float64 {
	v := make([]float64, 0x7c00)
	for b := range v {
		e, m := b>>10, b&0x3ff
		if e == 0 {
			v[b] = math.Ldexp(float64(m), -24)
		} else {
			v[b] = math.Ldexp(float64(1024+m), e-25)
		}
	}
	return v
}()

// fp16Nearest rounds a non-negative finite x to binary16 by searching the
// table of values: the nearest, the even one on a tie, Inf from 65520 up.
// It is independent of F32ToF16, which the implementation uses.
func fp16Nearest(x float64) uint16 {
	if x >= 65520 {
		return 0x7c00
	}
	i := sort.SearchFloat64s(fp16Values, x) // first value >= x
	if i == 0 || fp16Values[i] == x {
		return uint16(i)
	}
	lo, hi := fp16Values[i-1], fp16Values[i]
	switch {
	case x-lo < hi-x:
		return uint16(i - 1)
	case x-lo > hi-x:
		return uint16(i)
	case (i-1)%2 == 0:
		return uint16(i - 1)
	}
	return uint16(i)
}

// quantizeRowQ8Ref transcribes llama.cpp's quantize_row_q8_0_ref (ggml
// quants.c) for finite input: per block of 32, amax is the running MAX of
// |x| (C's macro: a > b ? a : b), d = amax / 127 in float, id = 1/d or 0,
// the stored scale is GGML_FP32_TO_FP16(d) (round to nearest even) and each
// q is roundf(x*id) (ties away from zero) converted to int8_t.
func quantizeRowQ8Ref(x []float32) []byte {
	out := make([]byte, 0, len(x)/32*34)
	for b := 0; b < len(x)/32; b++ {
		blk := x[b*32 : b*32+32]
		var amax float32
		for _, v := range blk {
			a := float32(math.Abs(float64(v)))
			if !(amax > a) {
				amax = a
			}
		}
		d := amax / float32(127)
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		out = binary.LittleEndian.AppendUint16(out, fp16Nearest(float64(d)))
		for _, v := range blk {
			y := float64(v * id)
			q := int8(0) // x86: a non-finite product converts to 0x80000000, whose low byte is 0
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				q = int8(math.Copysign(math.Floor(math.Abs(y)+0.5), y))
			}
			out = append(out, byte(q))
		}
	}
	return out
}

// randQ8Row returns n values: blocks of different scales, some with exact
// zeros, one all zero.
func randQ8Row(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for b := 0; b < n/32; b++ {
		scale := float32(math.Pow(10, r.Float64()*8-5))
		for i := 0; i < 32; i++ {
			switch {
			case b%7 == 3:
				x[b*32+i] = 0
			case r.IntN(10) == 0:
				x[b*32+i] = 0
			default:
				x[b*32+i] = float32(r.NormFloat64()) * scale
			}
		}
	}
	return x
}

func TestQuantizeQ8MatchesLlamaReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 32, 64, 128, 256, 32 * 37} {
		for rep := 0; rep < 20; rep++ {
			x := randQ8Row(r, n)
			got := make([]byte, Q8RowBytes(n))
			if err := QuantizeQ8(got, x); err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			if want := quantizeRowQ8Ref(x); !bytes.Equal(got, want) {
				t.Fatalf("n=%d: QuantizeQ8 differs from llama.cpp's reference:\n got %x\nwant %x", n, got, want)
			}
		}
	}
}

func TestQuantizeQ8Ties(t *testing.T) {
	// amax = 127 gives d = 1 and id = 1: q is roundf(x) itself, so the
	// halves round away from zero.
	x := make([]float32, 32)
	x[0] = 127
	ties := []float32{0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 0.49999997, -0.49999997}
	copy(x[1:], ties)
	want := []int8{127, 1, -1, 2, -2, 3, -3, 127, -127, 0, 0}
	got := make([]byte, 34)
	if err := QuantizeQ8(got, x); err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(got); d != 0x3c00 {
		t.Errorf("scale %#04x, want 0x3c00 (1.0)", d)
	}
	for i, w := range want {
		if q := int8(got[2+i]); q != w {
			t.Errorf("x = %v: q = %d, want %d", x[i], q, w)
		}
	}

	// Scales halfway between two fp16 values round to the even one:
	// 1+2⁻¹¹ → 1 (0x3c00), 1+3·2⁻¹¹ → 1+2⁻⁹ (0x3c02).
	for _, c := range []struct {
		d    float64
		want uint16
	}{{1 + 0x1p-11, 0x3c00}, {1 + 3*0x1p-11, 0x3c02}, {0x1p-25, 0}, {3 * 0x1p-26, 1}} {
		x := make([]float32, 32)
		x[5] = float32(127 * c.d)
		if float64(x[5]/127) != c.d {
			t.Fatalf("test setup: %v/127 is not %v", x[5], c.d)
		}
		got := make([]byte, 34)
		if err := QuantizeQ8(got, x); err != nil {
			t.Fatal(err)
		}
		if d := binary.LittleEndian.Uint16(got); d != c.want {
			t.Errorf("d = %v: stored scale %#04x, want %#04x", c.d, d, c.want)
		}
		if q := int8(got[2+5]); q != 127 {
			t.Errorf("d = %v: q of the maximum = %d, want 127", c.d, q)
		}
	}
}

func TestQuantizeQ8ZeroAndTinyBlocks(t *testing.T) {
	got := make([]byte, 68)
	for i := range got {
		got[i] = 0xee
	}
	x := make([]float32, 64)
	x[32] = -0 // a negative zero is still a zero block
	x[40] = 1e-41
	x[41] = -3e-42
	if err := QuantizeQ8(got, x); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:34], make([]byte, 34)) {
		t.Errorf("zero block: %x, want all zero bytes", got[:34])
	}
	// A subnormal block: d underflows fp16 to 0 (and 1/d overflows
	// float32), so every value dequantizes to 0, as in llama.cpp.
	if want := quantizeRowQ8Ref(x); !bytes.Equal(got, want) {
		t.Errorf("tiny block: %x, want %x", got, want)
	}
	deq := make([]float32, 64)
	if err := DequantizeQ8(deq, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range deq {
		if v != 0 {
			t.Errorf("value %d dequantizes to %v, want 0", i, v)
		}
	}
}

func TestQuantizeQ8Errors(t *testing.T) {
	ok := make([]float32, 64)
	for _, c := range []struct {
		dst  []byte
		src  []float32
		want string
	}{
		{make([]byte, 34), make([]float32, 31), "multiple of 32"},
		{make([]byte, 33), make([]float32, 32), "need 34 bytes"},
		{make([]byte, 70), ok, "need 68 bytes"},
		{make([]byte, 34), append(make([]float32, 31), float32(math.NaN())), "NaN"},
		{make([]byte, 34), append(make([]float32, 31), float32(math.Inf(-1))), "-Inf"},
		{make([]byte, 34), append(make([]float32, 31), 8321040), "too large"},
	} {
		err := QuantizeQ8(c.dst, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("QuantizeQ8(%d bytes, %d values): %v, want an error with %q", len(c.dst), len(c.src), err, c.want)
		}
	}
	// Just below the limit the scale is the largest fp16 (65504).
	x := append(make([]float32, 31), -8321039.5)
	dst := make([]byte, 34)
	if err := QuantizeQ8(dst, x); err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(dst); d != 0x7bff {
		t.Errorf("scale %#04x, want 0x7bff", d)
	}
	for _, c := range []struct {
		dst []float32
		src []byte
	}{{make([]float32, 32), make([]byte, 33)}, {make([]float32, 31), make([]byte, 34)}, {make([]float32, 64), make([]byte, 34)}} {
		if err := DequantizeQ8(c.dst, c.src); err == nil {
			t.Errorf("DequantizeQ8(%d values, %d bytes): no error", len(c.dst), len(c.src))
		}
	}
}

func TestDequantizeQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := randQ8Row(r, 32*50)
	q := make([]byte, Q8RowBytes(len(x)))
	if err := QuantizeQ8(q, x); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := DequantizeQ8(y, q); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < len(x)/32; b++ {
		blk := q[b*34:]
		d := float64(F16ToF32(binary.LittleEndian.Uint16(blk)))
		var amax float64
		for _, v := range x[b*32 : b*32+32] {
			amax = max(amax, math.Abs(float64(v)))
		}
		dt := amax / 127       // the unrounded scale
		ds := math.Abs(d - dt) // its fp16 rounding error
		if ds > max(0x1p-11*dt, 0x1p-25)*1.0001 {
			t.Fatalf("block %d: scale %v for max %v", b, d, amax)
		}
		for i := 0; i < 32; i++ {
			// The definition: q·d, exact.
			if want := float64(int8(blk[2+i])) * d; float64(y[b*32+i]) != want {
				t.Fatalf("value %d: %v, want %v", b*32+i, y[b*32+i], want)
			}
			// Within half a step of the input, plus 127 times the scale's
			// rounding error (and float32 slack).
			if e := math.Abs(float64(y[b*32+i]) - float64(x[b*32+i])); e > dt*(0.5+1e-6)+127*ds {
				t.Fatalf("value %d: %v dequantizes to %v (d = %v)", b*32+i, x[b*32+i], y[b*32+i], d)
			}
		}
	}
}

func FuzzQuantizeQ8(f *testing.F) {
	f.Add(make([]byte, 128))
	f.Add(bytes.Repeat([]byte{0x00, 0x00, 0x80, 0x3f}, 32))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := len(data) / 4 / 32 * 32
		x := make([]float32, n)
		finite := true
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if math.IsNaN(float64(x[i])) || math.IsInf(float64(x[i]), 0) || math.Abs(float64(x[i])) >= 8321040 {
				finite = false
			}
		}
		got := make([]byte, Q8RowBytes(n))
		err := QuantizeQ8(got, x)
		if !finite {
			if err == nil {
				t.Fatalf("no error for %v", x)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := quantizeRowQ8Ref(x); !bytes.Equal(got, want) {
			t.Fatalf("QuantizeQ8(%v):\n got %x\nwant %x", x, got, want)
		}
	})
}
