package kernel

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// quantizeRowQ4Ref transcribes llama.cpp's quantize_row_q4_0_ref (ggml
// quants.c) for finite input: per block of 32, max is the value whose |x|
// first exceeds the running amax (strict <, so the first of equal
// magnitudes), d = max / -8 in float, id = 1/d or 0, the stored scale is
// GGML_FP32_TO_FP16(d) (round to nearest even, here by fp16Nearest), and
// byte j of the codes is MIN(15, (int8_t)(x[j]*id + 8.5f)) | MIN(15,
// (int8_t)(x[j+16]*id + 8.5f)) << 4, each product and sum in float. It is
// written independently of QuantizeQ4 (float64 where that is exact).
func quantizeRowQ4Ref(x []float32) []byte {
	out := make([]byte, 0, len(x)/32*18)
	for b := 0; b < len(x)/32; b++ {
		blk := x[b*32 : b*32+32]
		var amax, mx float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); amax < a {
				amax, mx = a, v
			}
		}
		d := mx / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		sign := uint16(0)
		if math.Signbit(float64(d)) {
			sign = 0x8000
		}
		out = binary.LittleEndian.AppendUint16(out, sign|fp16Nearest(math.Abs(float64(d))))
		code := func(v float32) byte {
			p := float32(v * id)
			s := float64(p + 8.5) // the float sum, rounded to float32
			if math.IsNaN(s) || math.IsInf(s, 0) {
				return 0 // x86: cvttss2si gives 0x80000000, whose low byte is 0
			}
			c := int8(math.Trunc(s))
			return byte(min(15, c))
		}
		for j := 0; j < 16; j++ {
			out = append(out, code(blk[j])|code(blk[j+16])<<4)
		}
	}
	return out
}

func TestQuantizeQ4MatchesLlamaReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 3))
	for _, n := range []int{0, 32, 64, 128, 256, 32 * 37} {
		for rep := 0; rep < 20; rep++ {
			x := randQ8Row(r, n)
			got := make([]byte, Q4RowBytes(n))
			if err := QuantizeQ4(got, x); err != nil {
				t.Fatalf("n=%d: %v", n, err)
			}
			if want := quantizeRowQ4Ref(x); !bytes.Equal(got, want) {
				t.Fatalf("n=%d: QuantizeQ4 differs from llama.cpp's reference:\n got %x\nwant %x", n, got, want)
			}
		}
	}
}

// TestQuantizeQ4Layout: the codes and their nibbles, on a block whose
// values are exactly representable: max = -8 gives d = 1, id = 1, and
// value x gets code trunc(x + 8.5), capped at 15.
func TestQuantizeQ4Layout(t *testing.T) {
	x := make([]float32, 32)
	x[0] = -8 // the maximum: code 0, value -8
	for j := 1; j < 32; j++ {
		x[j] = float32(j%16) - 8 // -7 … 7, then -8 … 7
	}
	x[16] = 7.5  // 16 → 15 (capped)
	x[17] = -0.5 // 8.0 → 8
	x[18] = 0.49 // 8.99 → 8
	x[19] = -7.6 // 0.9 → 0
	got := make([]byte, 18)
	if err := QuantizeQ4(got, x); err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(got); d != 0x3c00 {
		t.Errorf("scale %#04x, want 0x3c00 (1.0)", d)
	}
	want := make([]byte, 32)
	for j := range want {
		want[j] = byte(min(15, int(math.Trunc(float64(x[j])+8.5))))
	}
	for j := 0; j < 16; j++ {
		if lo, hi := got[2+j]&15, got[2+j]>>4; lo != want[j] || hi != want[j+16] {
			t.Errorf("byte %d = %#02x: codes %d (value %v) and %d (value %v), want %d and %d",
				j, got[2+j], lo, x[j], hi, x[j+16], want[j], want[j+16])
		}
	}
	y := make([]float32, 32)
	if err := DequantizeQ4(y, got); err != nil {
		t.Fatal(err)
	}
	for j, v := range y {
		if w := float32(int(want[j]) - 8); v != w {
			t.Errorf("value %d dequantizes to %v, want %v", j, v, w)
		}
	}
	// The sign of max decides the sign of d: a positive maximum gets a
	// negative scale, and -max (code 16, capped) loses one step.
	x2 := make([]float32, 32)
	x2[3], x2[9] = 4, -4
	if err := QuantizeQ4(got, x2); err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(got); d != 0xb800 { // -0.5
		t.Errorf("scale %#04x, want 0xb800 (-0.5)", d)
	}
	if err := DequantizeQ4(y, got); err != nil {
		t.Fatal(err)
	}
	if y[3] != 4 || y[9] != -3.5 {
		t.Errorf("max 4 and -4 dequantize to %v and %v, want 4 and -3.5", y[3], y[9])
	}
}

func TestQuantizeQ4ZeroAndTinyBlocks(t *testing.T) {
	got := make([]byte, 36)
	for i := range got {
		got[i] = 0xee
	}
	x := make([]float32, 64)
	x[32] = -0
	x[40] = 1e-41 // d subnormal in float32, 1/d overflows: codes 0 (x86)
	x[41] = -3e-42
	if err := QuantizeQ4(got, x); err != nil {
		t.Fatal(err)
	}
	// max stays 0 and d = 0/−8 = −0: fp16 0x8000, as llama.cpp stores it.
	if want := append([]byte{0x00, 0x80}, bytes.Repeat([]byte{0x88}, 16)...); !bytes.Equal(got[:18], want) {
		t.Errorf("zero block: %x, want %x", got[:18], want)
	}
	if want := quantizeRowQ4Ref(x); !bytes.Equal(got, want) {
		t.Errorf("tiny block: %x, want %x", got, want)
	}
	deq := make([]float32, 64)
	if err := DequantizeQ4(deq, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range deq {
		if v != 0 {
			t.Errorf("value %d dequantizes to %v, want 0", i, v)
		}
	}
}

func TestQuantizeQ4Errors(t *testing.T) {
	ok := make([]float32, 64)
	for _, c := range []struct {
		dst  []byte
		src  []float32
		want string
	}{
		{make([]byte, 18), make([]float32, 31), "multiple of 32"},
		{make([]byte, 17), make([]float32, 32), "need 18 bytes"},
		{make([]byte, 40), ok, "need 36 bytes"},
		{make([]byte, 18), append(make([]float32, 31), float32(math.NaN())), "NaN"},
		{make([]byte, 18), append(make([]float32, 31), float32(math.Inf(1))), "+Inf"},
		{make([]byte, 18), append(make([]float32, 31), -524160), "too large"},
	} {
		err := QuantizeQ4(c.dst, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("QuantizeQ4(%d bytes, %d values): %v, want an error with %q", len(c.dst), len(c.src), err, c.want)
		}
	}
	// Just below the limit the scale is the largest fp16 (±65504).
	x := append(make([]float32, 31), 524159.9375)
	dst := make([]byte, 18)
	if err := QuantizeQ4(dst, x); err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(dst); d != 0xfbff {
		t.Errorf("scale %#04x, want 0xfbff (-65504)", d)
	}
	for _, c := range []struct {
		dst []float32
		src []byte
	}{{make([]float32, 32), make([]byte, 17)}, {make([]float32, 31), make([]byte, 18)}, {make([]float32, 64), make([]byte, 18)}} {
		if err := DequantizeQ4(c.dst, c.src); err == nil {
			t.Errorf("DequantizeQ4(%d values, %d bytes): no error", len(c.dst), len(c.src))
		}
	}
}

func TestDequantizeQ4(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	x := randQ8Row(r, 32*50)
	q := make([]byte, Q4RowBytes(len(x)))
	if err := QuantizeQ4(q, x); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := DequantizeQ4(y, q); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < len(x)/32; b++ {
		blk := q[b*18:]
		d := float64(F16ToF32(binary.LittleEndian.Uint16(blk)))
		var amax float64
		for _, v := range x[b*32 : b*32+32] {
			amax = max(amax, math.Abs(float64(v)))
		}
		dt := amax / 8                   // |the unrounded scale|
		ds := math.Abs(math.Abs(d) - dt) // its fp16 rounding error
		if ds > max(0x1p-11*dt, 0x1p-25)*1.0001 {
			t.Fatalf("block %d: scale %v for max %v", b, d, amax)
		}
		for i := 0; i < 32; i++ {
			c := blk[2+i%16]
			if i >= 16 {
				c >>= 4
			}
			// The definition: (code − 8)·d, exact.
			if want := float64(int(c&15)-8) * d; float64(y[b*32+i]) != want {
				t.Fatalf("value %d: %v, want %v", b*32+i, y[b*32+i], want)
			}
			// Within one step of the input (truncation of x·id + 8.5 is
			// rounding to nearest with ties up, except -max, capped at
			// 15, a full step off), plus 8 times the scale's rounding
			// error (and float32 slack).
			if e := math.Abs(float64(y[b*32+i]) - float64(x[b*32+i])); e > dt*(1+1e-6)+8*ds {
				t.Fatalf("value %d: %v dequantizes to %v (d = %v)", b*32+i, x[b*32+i], y[b*32+i], d)
			}
		}
	}
}

func FuzzQuantizeQ4(f *testing.F) {
	f.Add(make([]byte, 128))
	f.Add(bytes.Repeat([]byte{0x00, 0x00, 0x80, 0xbf}, 32))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := len(data) / 4 / 32 * 32
		x := make([]float32, n)
		finite := true
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if math.IsNaN(float64(x[i])) || math.IsInf(float64(x[i]), 0) || math.Abs(float64(x[i])) >= 524160 {
				finite = false
			}
		}
		got := make([]byte, Q4RowBytes(n))
		err := QuantizeQ4(got, x)
		if !finite {
			if err == nil {
				t.Fatalf("no error for %v", x)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := quantizeRowQ4Ref(x); !bytes.Equal(got, want) {
			t.Fatalf("QuantizeQ4(%v):\n got %x\nwant %x", x, got, want)
		}
	})
}
