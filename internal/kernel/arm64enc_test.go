package kernel

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestARM64Encodings checks every instruction that kernel_arm64.s spells
// as a WORD (the Go assembler lacks most vector arithmetic) against the
// committed table testdata/arm64_encodings.txt, which holds GNU as's
// encodings of the comment texts (made and re-checked against GNU as by
// the generator's tests in ./_arm64). It runs on any machine, so the
// words, the comments and the table cannot drift apart.
func TestARM64Encodings(t *testing.T) {
	golden := map[string]uint32{}
	tab, err := os.ReadFile("testdata/arm64_encodings.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(tab), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hex, text, _ := strings.Cut(line, " ")
		w, err := strconv.ParseUint(hex, 16, 32)
		if err != nil {
			t.Fatalf("bad table line %q", line)
		}
		golden[text] = uint32(w)
	}
	f, err := os.Open("kernel_arm64.s")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	word := regexp.MustCompile(`^\s*WORD\s+\$0x([0-9a-f]{8})\s*//\s*(.+)$`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "WORD") {
			continue
		}
		m := word.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("WORD without a GNU as comment: %q", line)
			continue
		}
		w, _ := strconv.ParseUint(m[1], 16, 32)
		text := strings.TrimSpace(m[2])
		n++
		seen[text] = true
		switch want, ok := golden[text]; {
		case !ok:
			t.Errorf("%s: no GNU as encoding in the table", text)
		case uint32(w) != want:
			t.Errorf("%s: WORD $%#08x, GNU as %#08x", text, w, want)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(golden) {
		t.Errorf("kernel_arm64.s uses %d distinct encoded instructions, the table has %d", len(seen), len(golden))
	}
	t.Logf("%d WORD instructions, %d distinct, all as GNU as encodes them", n, len(seen))
}
