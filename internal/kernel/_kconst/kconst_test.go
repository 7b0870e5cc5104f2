package kconst

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestRead reads literal, negated and parenthesised constants and rounds
// them as Go's conversions do.
func TestRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.go")
	src := "package p\n\nconst (\n\tA = 1.44269504088896341\n\tB = -87.33654\n\tC = (88)\n\tD = \"s\"\n\tE = A * 2\n)\n\nconst F float32 = 0.625\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f64  float64
		f32  float32
	}{
		{"A", 1.44269504088896341, 1.44269504088896341},
		{"B", -87.33654, -87.33654},
		{"C", 88, 88},
		{"F", 0.625, 0.625},
	} {
		if got := c.F64(tc.name); got != tc.f64 {
			t.Errorf("F64(%s) = %v, want %v", tc.name, got, tc.f64)
		}
		if got := c.F32(tc.name); math.Float32bits(got) != math.Float32bits(tc.f32) {
			t.Errorf("F32(%s) = %v, want %v", tc.name, got, tc.f32)
		}
	}
	for _, name := range []string{"D", "E", "missing"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("F64(%s) did not panic", name)
				}
			}()
			c.F64(name)
		}()
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none.go")); err == nil {
		t.Error("Read of a missing file: no error")
	}
}
