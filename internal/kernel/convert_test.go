package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

const canary16 = uint16(0xdead)

// convSample is a dense sample of float32 bit patterns: for every exponent
// and sign, mantissas at the rounding boundaries of both 16-bit formats
// (ties, one below and one above), the extremes and random ones; NaNs with
// assorted payloads; ±0, ±Inf, subnormals.
func convSample(r *rand.Rand) []float32 {
	var bits []uint32
	mants := []uint32{0, 1, 2, 0x7fffff, 0x7ffffe, 0x400000, 0x3fffff,
		0x8000, 0x7fff, 0x8001, 0x18000, 0x17fff, 0x18001, // bf16 ties, below, above
		0x1000, 0xfff, 0x1001, 0x3000, 0x2fff, 0x3001, // fp16 ties (normal range)
		0x7fff000, 0x7ff000}
	for e := uint32(0); e < 256; e++ {
		for s := uint32(0); s < 2; s++ {
			for _, m := range mants {
				bits = append(bits, s<<31|e<<23|m&0x7fffff)
			}
			for i := 0; i < 24; i++ {
				bits = append(bits, s<<31|e<<23|r.Uint32()&0x7fffff)
			}
			// Around every fp16 subnormal rounding boundary of this
			// exponent: ties at bit (126-e-1) of the significand.
			if e >= 102 && e <= 112 {
				sh := 126 - e
				for q := uint32(0); q < 4; q++ {
					m := (q<<sh | 1<<(sh-1)) & 0x7fffff
					bits = append(bits, s<<31|e<<23|m, s<<31|e<<23|(m-1)&0x7fffff, s<<31|e<<23|(m+1)&0x7fffff)
				}
			}
		}
	}
	out := make([]float32, len(bits))
	for i, b := range bits {
		out[i] = math.Float32frombits(b)
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestConvertDecodeExhaustive widens all 65536 bit patterns with every
// implementation and compares the bits with the scalar conversions, at
// lengths with and without a tail, ending at a guard page, with canaries
// before the output.
func TestConvertDecodeExhaustive(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	for _, im := range Available() {
		for _, f := range []struct {
			name   string
			conv   func(dst []float32, src []uint16)
			scalar func(uint16) float32
		}{{"BF16ToF32", im.BF16ToF32, BF16ToF32}, {"F16ToF32", im.F16ToF32, F16ToF32}} {
			for _, n := range []int{1 << 16, 1<<16 - 1, 1<<16 - 15} {
				in := guardedU16(t, n)
				copy(in, src[len(src)-n:])
				out := guardedF32(t, n+4)
				for i := range out {
					out[i] = canary
				}
				f.conv(out[4:], in)
				for i := 0; i < 4; i++ {
					if out[i] != canary {
						t.Fatalf("%s %s: wrote before the output", im.Name, f.name)
					}
				}
				for i, h := range in {
					if g, w := math.Float32bits(out[4+i]), math.Float32bits(f.scalar(h)); g != w {
						t.Fatalf("%s %s(%#04x) = %#08x, want %#08x", im.Name, f.name, h, g, w)
					}
				}
			}
		}
	}
}

// TestConvertEncode rounds the dense float32 sample with every
// implementation (all lengths 0..70, then the whole sample) and compares
// the bits with the scalar conversions.
func TestConvertEncode(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	sample := convSample(r)
	for _, im := range Available() {
		for _, f := range []struct {
			name   string
			conv   func(dst []uint16, src []float32)
			scalar func(float32) uint16
		}{{"F32ToBF16", im.F32ToBF16, F32ToBF16}, {"F32ToF16", im.F32ToF16, F32ToF16}} {
			lengths := []int{len(sample)}
			for n := 0; n <= 70; n++ {
				lengths = append(lengths, n)
			}
			for _, n := range lengths {
				in := guardedF32(t, n)
				off := r.IntN(len(sample) - n + 1)
				copy(in, sample[off:off+n])
				out := guardedU16(t, n+3)
				for i := range out {
					out[i] = canary16
				}
				f.conv(out[3:], in)
				for i := 0; i < 3; i++ {
					if out[i] != canary16 {
						t.Fatalf("%s %s n=%d: wrote before the output", im.Name, f.name, n)
					}
				}
				for i, x := range in {
					if g, w := out[3+i], f.scalar(x); g != w {
						t.Fatalf("%s %s(%#08x) = %#04x, want %#04x (n=%d, i=%d)",
							im.Name, f.name, math.Float32bits(x), g, w, n, i)
					}
				}
			}
		}
	}
}

// TestConvertSubnormalBlocks: the VCVTNEPS2BF16 path flushes float32
// subnormals, so a block of 16 holding one must take the exact integer
// path; every position of a lone subnormal in an otherwise normal block
// is tried.
func TestConvertSubnormalBlocks(t *testing.T) {
	for _, im := range Available() {
		for pos := 0; pos < 48; pos++ {
			in := make([]float32, 48)
			for i := range in {
				in[i] = float32(i) + 0.3
			}
			in[pos] = math.Float32frombits(0x00012345 | uint32(pos%2)<<31)
			out := make([]uint16, 48)
			im.F32ToBF16(out, in)
			for i, x := range in {
				if out[i] != F32ToBF16(x) {
					t.Fatalf("%s: subnormal at %d: element %d = %#04x, want %#04x", im.Name, pos, i, out[i], F32ToBF16(x))
				}
			}
		}
	}
}

func TestConvertShortDst(t *testing.T) {
	for _, im := range Available() {
		if im.Name == "generic" {
			continue
		}
		for name, f := range map[string]func(){
			"BF16ToF32": func() { im.BF16ToF32(make([]float32, 3), make([]uint16, 4)) },
			"F32ToF16":  func() { im.F32ToF16(make([]uint16, 15), make([]float32, 16)) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s %s: no panic for a short dst", im.Name, name)
					}
				}()
				f()
			}()
		}
	}
}

func BenchmarkConvert(b *testing.B) {
	requireSets(b)
	const n = 4096
	f := make([]float32, n)
	h := make([]uint16, n)
	for i := range f {
		f[i] = float32(i) * 0.37
	}
	for _, im := range Available() {
		for _, c := range []struct {
			name string
			run  func()
		}{
			{"BF16ToF32", func() { im.BF16ToF32(f, h) }},
			{"F16ToF32", func() { im.F16ToF32(f, h) }},
			{"F32ToBF16", func() { im.F32ToBF16(h, f) }},
			{"F32ToF16", func() { im.F32ToF16(h, f) }},
		} {
			b.Run(fmt.Sprintf("%s/%s", im.Name, c.name), func(b *testing.B) {
				b.SetBytes(6 * n)
				for b.Loop() {
					c.run()
				}
			})
		}
	}
}
