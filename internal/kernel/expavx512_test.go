package kernel

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestAVX512ExpOps reads kernel_amd64.s (text: it runs on every
// architecture) and counts the instructions of the AVX-512 exponential's
// pipelined loop (expSumAVX512, and expSumBF16AVX512BF16 whose store
// converts) that issue on the floating-point pipes: every vector
// instruction but the register copies (VMOVAPS, eliminated at rename), the
// unmasked loads and the stores. On Zen 4 each costs about the same, so
// their number is the loop's speed. The exponential takes at most 15 per
// vector of 16 results: t (2), u = t·log2 e and its split r = u − round(u),
// n = u − r (3), 2^r by Horner's rule (6 FMAs, the last zero-masked), the
// two masks, VSCALEFPS merged into +Inf and the sum. The bfloat16 store
// adds its conversion and takes two FMAs fewer, at most 14: its
// polynomial is of degree 4 (Exp2B1 … Exp2B4, Impl.ExpSumBF16). The values
// are checked elsewhere (TestExpULP, TestExpSpecial, TestExpSumBF16,
// TestExpSumBF16Sweep).
func TestAVX512ExpOps(t *testing.T) {
	src, err := os.ReadFile("kernel_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	jmp := regexp.MustCompile(`JMP\s+pipe\n`)
	op := regexp.MustCompile(`^\s+(V[A-Z0-9.]+)\s+(.*)$`)
	for _, c := range []struct {
		name string
		max  int // per vector of 16 results
	}{{"expSumAVX512", 15}, {"expSumBF16AVX512BF16", 14}} {
		s := string(src)
		i := strings.Index(s, "TEXT ·"+c.name+"(SB)")
		if i < 0 {
			t.Fatalf("no TEXT ·%s", c.name)
		}
		s = s[i:]
		i, loc := strings.Index(s, "\npipe:"), jmp.FindStringIndex(s)
		if i < 0 || loc == nil || loc[0] < i {
			t.Fatalf("%s: no pipe loop", c.name)
		}
		j := loc[0]
		n := 0
		for _, line := range strings.Split(s[i:j], "\n") {
			if strings.Contains(line, "// raw: vcvtneps2bf16") {
				n++ // the conversion, as BYTEs
				continue
			}
			m := op.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			args := strings.Split(m[2], ", ")
			dst := args[len(args)-1]
			mov := m[1] == "VMOVUPS" || m[1] == "VMOVDQU"
			switch {
			case m[1] == "VMOVAPS":
			case mov && strings.Contains(dst, "("): // a store
			case mov && !strings.Contains(m[2], "K"): // an unmasked load
			default:
				n++
			}
		}
		const vectors = 2 // the pipeline's stage
		if n > c.max*vectors {
			t.Errorf("%s: %d floating-point instructions per 16 results, want at most %d", c.name, n/vectors, c.max)
		} else {
			t.Logf("%s: %d floating-point instructions per 16 results", c.name, n/vectors)
		}
	}
}
