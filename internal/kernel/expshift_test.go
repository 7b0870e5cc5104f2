package kernel

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestNEONExpShift reads kernel_arm64.s (text: it runs on every
// architecture) and checks the shape of the NEON exponential: expSumNEON
// and softcapNEON round c·log2 e to n with the shift (the FADD of
// 0x1.8p23 + 127, whose bits shifted left by 23 are 2^n) instead of FRINTN
// and FCVTZS, which a Neoverse V2 issues on two of its four vector pipes,
// and expSumNEON's loop spends at most 28 vector instructions per vector of
// 4 results (30 with the conversions, the ADD of 2^n's bias and a clamp of
// the lanes below ExpMin, which the mask clears anyway). The values are
// checked elsewhere (TestExpULP, TestExpSumLargeArguments, the
// self-check).
func TestNEONExpShift(t *testing.T) {
	src, err := os.ReadFile("kernel_arm64.s")
	if err != nil {
		t.Fatal(err)
	}
	body := func(name string) string {
		s := string(src)
		i := strings.Index(s, "TEXT ·"+name+"(SB)")
		if i < 0 {
			t.Fatalf("no TEXT ·%s", name)
		}
		s = s[i+1:]
		if j := strings.Index(s, "\nTEXT "); j >= 0 {
			s = s[:j]
		}
		return s
	}
	conv := regexp.MustCompile(`// (frintn|fcvtzs) `)
	for _, name := range []string{"expSumNEON", "softcapNEON"} {
		if m := conv.FindAllString(body(name), -1); m != nil {
			t.Errorf("%s: %d conversions (%s…): the exponential should round by the shift", name, len(m), m[0])
		}
	}
	es := body("expSumNEON")
	i, j := strings.Index(es, "\nloop:"), strings.Index(es, "BNE loop")
	if i < 0 || j < i {
		t.Fatal("expSumNEON: no loop")
	}
	if n := strings.Count(es[i:j], "WORD $"); n > 4*28 {
		t.Errorf("expSumNEON: %d vector instructions per 16 results, want at most %d", n, 4*28)
	} else {
		t.Logf("expSumNEON: %d vector instructions per 16 results", n)
	}
}
