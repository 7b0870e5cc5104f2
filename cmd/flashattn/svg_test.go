package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDrawFigure draws the figure from synthetic results as SVG and PNG.
func TestDrawFigure(t *testing.T) {
	var rs []benchResult
	for _, mode := range []string{"fwd", "bwd"} {
		for _, d := range []int{64, 128} {
			for _, causal := range []bool{false, true} {
				for n := 512; n <= 4096; n *= 2 {
					g := float64(n) / 40
					rs = append(rs, benchResult{Mode: mode, Headdim: d, Causal: causal, SeqlenK: n, SeqlenQ: n,
						GFlopsMedian: g, GFlopsMin: g * 0.9, GFlopsMax: g * 1.2,
						PlainGFlopsMedian: g / 2, PlainGFlopsMin: g / 3, PlainGFlopsMax: g / 2})
				}
			}
		}
	}
	dir := t.TempDir()
	for _, name := range []string{"fig.svg", "fig.png"} {
		path := filepath.Join(dir, name)
		if err := drawSVG(path, rs); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if name == "fig.svg" && !bytes.Contains(b, []byte("<svg")) || name == "fig.png" && !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("%s is not an image (%d bytes)", name, len(b))
		}
	}
	if err := drawSVG(filepath.Join(dir, "none.svg"), nil); err == nil {
		t.Error("no error for an empty sweep")
	}
	if err := drawSVG(filepath.Join(dir, "missing", "x.svg"), rs); err == nil {
		t.Error("no error for an unwritable path")
	}
}
