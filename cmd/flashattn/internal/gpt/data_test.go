package gpt

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestGoSources builds a small source tree and checks which files are
// read, the split by path hash, and that the order is lexical.
func TestGoSources(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("pkg%d/f%d.go", i%4, i)] = fmt.Sprintf("package p%d // file %d\n", i%4, i)
	}
	skipped := map[string]string{
		"pkg0/x_test.go":          "package p0 // test\n",
		"pkg0/testdata/t.go":      "package t // testdata\n",
		"pkg1/README.md":          "not Go\n",
		"pkg1/testdata/deep/d.go": "package d\n",
	}
	for _, m := range []map[string]string{files, skipped} {
		for name, body := range m {
			p := filepath.Join(root, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ds, err := GoSources(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var train, val []byte
	for _, n := range names {
		h := fnv.New32a()
		h.Write([]byte(n))
		if h.Sum32()%valEvery == 0 {
			val = append(val, files[n]...)
		} else {
			train = append(train, files[n]...)
		}
	}
	if !bytes.Equal(ds.Train, train) || !bytes.Equal(ds.Val, val) {
		t.Fatalf("split differs:\ntrain %q\nwant  %q\nval %q\nwant %q", ds.Train, train, ds.Val, val)
	}
	if len(val) == 0 || len(train) == 0 {
		t.Fatal("test tree puts no file on one side; change the names")
	}
	if _, err := GoSources(filepath.Join(root, "missing")); err == nil {
		t.Fatal("missing root: no error")
	}
}

func TestTextFile(t *testing.T) {
	text := make([]byte, 1000)
	for i := range text {
		text[i] = byte(i % 251)
	}
	p := filepath.Join(t.TempDir(), "t.txt")
	if err := os.WriteFile(p, text, 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := TextFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Train)+len(ds.Val) != len(text) || len(ds.Val) != 100 {
		t.Fatalf("train %d + val %d bytes of %d", len(ds.Train), len(ds.Val), len(text))
	}
	// Part 9 (bytes 90..99) is the first validation part.
	if !bytes.Equal(ds.Val[:10], text[90:100]) || !bytes.Equal(ds.Train[:90], text[:90]) {
		t.Fatal("parts are not where they belong")
	}
	if err := os.WriteFile(p, text[:10], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := TextFile(p); err == nil {
		t.Fatal("tiny text: no error")
	}
}

func TestUnigram(t *testing.T) {
	ds := &Dataset{Train: []byte("aab"), Val: []byte("ab")}
	// p(a) = 3/259, p(b) = 2/259 after add-one smoothing.
	want := -(math.Log(3.0/259) + math.Log(2.0/259)) / 2
	if got := ds.Unigram(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("unigram %v, want %v", got, want)
	}
}

// TestSampler checks that batches are windows of the text with targets
// shifted by one, that the same seed repeats them and another differs.
func TestSampler(t *testing.T) {
	text := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	s := NewSampler(text, 1)
	b, err := s.Next(5, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		in, tg := b.Inputs[i*7:(i+1)*7], b.Targets[i*7:(i+1)*7]
		off := bytes.IndexByte(text, byte(in[0]))
		for j := range in {
			if in[j] != int32(text[off+j]) || tg[j] != int32(text[off+j+1]) {
				t.Fatalf("row %d is not a window of the text", i)
			}
		}
	}
	b2, _ := NewSampler(text, 1).Next(5, 7)
	b3, _ := NewSampler(text, 2).Next(5, 7)
	if !slices.Equal(b.Inputs, b2.Inputs) || slices.Equal(b.Inputs, b3.Inputs) {
		t.Fatal("batches are not a function of the seed")
	}
	if _, err := NewSampler(text[:7], 1).Next(1, 7); err == nil {
		t.Fatal("text without a full window: no error")
	}
}
