package kernel

import (
	"bufio"
	"encoding/binary"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// The generated assembly reads its constants from tables (GLOBL and DATA
// in the .s files) that the generator fills from its own copies of the
// constants. TestAsmTables reads every table back from the .s files and
// compares it, byte for byte, with the table built here from the Go
// twins' constants (the exponential's of generic.go, the tanh polynomial,
// the conversions' bit patterns of halfconv.go, Philox's multipliers and
// Weyl increments), or, for index and mask tables, from their
// definitions. A constant changed on one side only fails here. It reads
// text, so it runs on every architecture and with -tags purego.

// asmTables returns the tables of the .s file path: name → contents.
func asmTables(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	globl := regexp.MustCompile(`^GLOBL (\w+)<>\(SB\), RODATA\|NOPTR, \$(\d+)$`)
	data := regexp.MustCompile(`^DATA (\w+)<>\+(\d+)\(SB\)/([1248]), \$(0x[0-9a-f]+|\d+)$`)
	tabs := map[string][]byte{}
	type datum struct {
		off, size int
		v         uint64
	}
	pending := map[string][]datum{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := data.FindStringSubmatch(line); m != nil {
			off, _ := strconv.Atoi(m[2])
			size, _ := strconv.Atoi(m[3])
			v, err := strconv.ParseUint(m[4], 0, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			pending[m[1]] = append(pending[m[1]], datum{off, size, v})
			continue
		}
		if m := globl.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[2])
			b := make([]byte, n)
			for _, d := range pending[m[1]] {
				if d.off+d.size > n {
					t.Fatalf("%s: %s: DATA at %d beyond the %d bytes of the table", path, m[1], d.off, n)
				}
				var w [8]byte
				binary.LittleEndian.PutUint64(w[:], d.v)
				copy(b[d.off:d.off+d.size], w[:d.size])
			}
			tabs[m[1]] = b
			delete(pending, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range pending {
		t.Errorf("%s: DATA for %s without GLOBL", path, name)
	}
	return tabs
}

// tableBuilder builds the expected contents of a table.
type tableBuilder struct{ b []byte }

// u32 appends each v, repeated lanes times.
func (tb *tableBuilder) u32(lanes int, vs ...uint32) *tableBuilder {
	for _, v := range vs {
		for range lanes {
			tb.b = binary.LittleEndian.AppendUint32(tb.b, v)
		}
	}
	return tb
}

// f32 appends each v, repeated lanes times.
func (tb *tableBuilder) f32(lanes int, vs ...float32) *tableBuilder {
	for _, v := range vs {
		tb.u32(lanes, math.Float32bits(v))
	}
	return tb
}

func (tb *tableBuilder) u16(vs ...uint16) *tableBuilder {
	for _, v := range vs {
		tb.b = binary.LittleEndian.AppendUint16(tb.b, v)
	}
	return tb
}

// at pads with zero bytes up to offset off.
func (tb *tableBuilder) at(off int) *tableBuilder {
	for len(tb.b) < off {
		tb.b = append(tb.b, 0)
	}
	return tb
}

func TestAsmTables(t *testing.T) {
	abs, sign := math.Float32frombits(f32AbsMask), math.Float32frombits(0x80000000)
	lanes := make([]float32, 8) // 0 … 7 as float32
	lanes32 := make([]uint32, 8)
	for l := range lanes {
		lanes[l], lanes32[l] = float32(l), uint32(l)
	}
	q4Codes := make([]float32, 16) // the values of the q4_0 codes, by widenQ4
	for c := range q4Codes {
		var out [Q4Block]float32
		widenQ4(out[:], []byte{0x00, 0x3c, byte(c), Q4BlockBytes - 1: 0}) // scale 1.0
		q4Codes[c] = out[0]
	}
	halfBits := []uint32{bf16RoundBias, 1, bf16QuietBit, f32AbsMask, f32ExpMask, f32MantMask, 0xffff0000, bf16QuietBit << 16}

	// packtab: the masks 2^i − 1 of the first i dwords, then three
	// VPERMT2W index vectors of 32 words (index w < 32 selects word w of
	// the first source, 32 + w word w of the second): lo interleaves the
	// words 0-15 of both (the pairs (B[p, j], B[p+1, j]) of the VNNI
	// layout, from rows p and p+1), hi the words 16-31, compact takes the
	// even words of both; then 64 zero bytes.
	pack := new(tableBuilder)
	for i := 0; i <= 32; i++ {
		pack.u32(1, uint32(uint64(1)<<i-1))
	}
	pack.at(192)
	for _, base := range []uint16{0, 16} {
		for w := range uint16(32) {
			pack.u16(base + w/2 + 32*(w%2))
		}
	}
	for w := range uint16(32) {
		pack.u16(2*(w%16) + 32*(w/16))
	}
	pack.at(384 + 64)

	// decodemask16[t]: the opmask of the first t of 16 lanes.
	mask16 := new(tableBuilder)
	for l := range uint16(17) {
		mask16.u16(1<<l - 1)
	}

	fp8 := new(tableBuilder)
	for _, w := range []uint16{0xbfff, 0x7f00, 0xffff} {
		for range 16 {
			fp8.u16(w)
		}
	}
	fp8.f32(16, fp8E4M3Table[0x48]/fp8E4M3Table[0x08]) // codes E = 9 over E = 1: 2⁸, fp16's bias 15 minus e4m3's 7

	// decbf16perm: VPERMI2PS indices of the native bf16 accum: column c
	// of a chunk of 32 sits, after VPUNPCKLWD/VPUNPCKHWD, in the low
	// (c%8 < 4) or high vector (index +16), lane (c/8)·4 + c%4.
	perm := new(tableBuilder)
	for c := range uint32(32) {
		perm.u32(1, c%8/4*16+c/8*4+c%4)
	}

	for _, c := range []struct {
		file, name string
		want       []byte
	}{
		{"kernel_amd64.s", "expconsts", new(tableBuilder).f32(16,
			ExpLog2e, ExpLn2Hi, ExpLn2Lo, ExpP0, ExpP1, ExpP2, ExpP3, ExpP4, ExpP5, 1, ExpMin, ExpMax, float32(math.Inf(1)),
			Exp2C1, Exp2C2, Exp2C3, Exp2C4, Exp2C5, Exp2C6, Exp2B1, Exp2B2, Exp2B3, Exp2B4).b},
		{"kernel_amd64.s", "softcapconsts", new(tableBuilder).f32(8,
			abs, tanhExpClamp, 2, sign, tanhT0, tanhT1, tanhT2, tanhT3, tanhT4, tanhSmall).b},
		{"kernel_amd64.s", "alibiconsts", new(tableBuilder).f32(8, abs, 8).f32(1, lanes...).b},
		{"kernel_amd64.s", "philoxconsts", new(tableBuilder).u32(1, lanes32...).u32(8, philoxM0, philoxM1, philoxW0, philoxW1).b},
		{"kernel_amd64.s", "halfconsts", new(tableBuilder).u32(1, halfBits...).b},
		{"kernel_amd64.s", "halfvecs", new(tableBuilder).u32(8, halfBits...).b},
		{"kernel_amd64.s", "packtab", pack.b},
		{"decode_amd64.s", "decodemask16", mask16.b},
		{"decode_amd64.s", "decodemask8", new(tableBuilder).u32(8, 0xffffffff, 0, 0xffffffff).b},
		// decodeq4tab: the 16 values code − 8 of q4_0 (q4.go), then eight
		// −8 and eight dwords 15 (the nibble mask).
		{"decode_amd64.s", "decodeq4tab", new(tableBuilder).f32(1, q4Codes...).f32(8, -8).u32(8, 15).b},
		// decodefp8tab: the e4m3fn widening's masks (fp8.go: bit 14 of the
		// shifted word cleared, the NaN codes' shifted word, an fp16 NaN)
		// as 16 words each, then 16 float32 2⁸ (the bias difference).
		{"decode_amd64.s", "decodefp8tab", fp8.b},
		{"decode_bf16_amd64.s", "decbf16perm", perm.b},
	} {
		got, ok := asmTables(t, c.file)[c.name]
		switch {
		case !ok:
			t.Errorf("%s: no table %s", c.file, c.name)
		case !slices.Equal(got, c.want):
			t.Errorf("%s: table %s differs from the Go constants:\n got % x\nwant % x", c.file, c.name, got, c.want)
		}
	}
	// Every table is checked.
	for _, file := range []string{"kernel_amd64.s", "decode_amd64.s", "decode_bf16_amd64.s"} {
		if n := len(asmTables(t, file)); file == "kernel_amd64.s" && n != 7 || file == "decode_amd64.s" && n != 4 || file == "decode_bf16_amd64.s" && n != 1 {
			t.Errorf("%s: %d tables; a new one needs a check here", file, n)
		}
	}
}
