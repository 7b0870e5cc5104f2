package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// goldenFile is the committed table of every instruction the generator
// encodes: "<word in hex> <GNU as text>" per line, sorted by text, made
// from GNU as's encodings (never from enc.go) by
//
//	go test -run TestGeneratedGNU -update
//
// internal/kernel's TestARM64Encodings checks kernel_arm64.s against it on
// any machine; the tests here check the generator against it and, where
// GNU as is installed, it against GNU as.
const goldenFile = "../testdata/arm64_encodings.txt"

var update = flag.Bool("update", false, "rewrite "+goldenFile+" from GNU as")

func readGolden(t *testing.T) map[string]uint32 {
	t.Helper()
	fh, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	m := map[string]uint32{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		hex, text, ok := strings.Cut(line, " ")
		w, err := strconv.ParseUint(hex, 16, 32)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", goldenFile, line)
		}
		m[text] = uint32(w)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGeneratedGNU assembles every instruction the generator emits as a
// WORD with GNU as and compares the encodings (skipped without GNU as);
// with -update it rewrites the golden table from GNU as's words.
func TestGeneratedGNU(t *testing.T) {
	ins := generate().sortedWords()
	texts := make([]string, len(ins))
	for i, in := range ins {
		texts[i] = in.text
	}
	words := gnuWords(t, texts)
	bad := 0
	for i, in := range ins {
		if in.word != words[i] {
			bad++
			if bad <= 20 {
				t.Errorf("%s: encoded %#08x, GNU as %#08x", in.text, in.word, words[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d encodings differ from GNU as", bad, len(ins))
	}
	// The committed table must be what GNU as says, too.
	if !*update {
		golden := readGolden(t)
		var gt []string
		for text := range golden {
			gt = append(gt, text)
		}
		gw := gnuWords(t, gt)
		for i, text := range gt {
			if golden[text] != gw[i] {
				t.Errorf("%s: %s says %#08x, GNU as %#08x", goldenFile, text, golden[text], gw[i])
			}
		}
		return
	}
	var b strings.Builder
	b.WriteString("# The encodings, by GNU as, of every instruction that kernel_arm64.s spells as a WORD.\n")
	b.WriteString("# Regenerate: cd internal/kernel/_arm64 && go test -run TestGeneratedGNU -update\n")
	for i, in := range ins {
		fmt.Fprintf(&b, "%08x %s\n", words[i], in.text)
	}
	if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d encodings to %s", len(ins), goldenFile)
}

// TestGeneratedGolden compares every instruction the generator emits with
// the committed table (no GNU as needed), both ways: a new instruction
// needs its GNU as encoding in the table, and the table holds nothing the
// generator no longer emits.
func TestGeneratedGolden(t *testing.T) {
	golden := readGolden(t)
	ins := generate().sortedWords()
	seen := map[string]bool{}
	for _, in := range ins {
		seen[in.text] = true
		w, ok := golden[in.text]
		switch {
		case !ok:
			t.Errorf("%s: not in %s (run go test -run TestGeneratedGNU -update with GNU as installed)", in.text, goldenFile)
		case w != in.word:
			t.Errorf("%s: encoded %#08x, GNU as %#08x", in.text, in.word, w)
		}
	}
	for text := range golden {
		if !seen[text] {
			t.Errorf("%s: in %s but no longer generated", text, goldenFile)
		}
	}
}

// TestParseSig checks the frame layout against what go vet's asmdecl
// expects (the generated file passes go vet, which checks every offset).
func TestParseSig(t *testing.T) {
	ps, size := parseSig("func(x []float32, scale, sub float32) float32")
	want := []param{{"x", "[]float32", 0}, {"scale", "float32", 24}, {"sub", "float32", 28}, {"ret", "float32", 32}}
	if size != 36 || len(ps) != len(want) {
		t.Fatalf("size %d, params %v", size, ps)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("param %d: %v, want %v", i, ps[i], want[i])
		}
	}
	if _, size := parseSig("func(out *[32]uint32, c0, c1, c2, c3, k0, k1 uint32)"); size != 32 {
		t.Errorf("philox frame %d, want 32", size)
	}
}
