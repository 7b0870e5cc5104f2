package kernel

import "testing"

// Every available implementation has a peak loop of its own width; the
// vector loops do more FLOPs per iteration than the scalar one, and an
// unknown name has none.
func TestFMAPeakLoop(t *testing.T) {
	want := map[string]int{"generic": 24, "avx2": 192, "avx512": 384, "neon": 192}
	for _, im := range Available() {
		loop, ok := FMAPeakLoop(im.Name)
		if !ok {
			t.Errorf("%s: no peak loop", im.Name)
			continue
		}
		if f := loop(1000); f != want[im.Name] && !(im.Name == "generic" && f == 25) {
			t.Errorf("%s: %d FLOPs per iteration, want %d", im.Name, f, want[im.Name])
		}
	}
	if _, ok := FMAPeakLoop("avx9000"); ok {
		t.Error("peak loop for an unknown implementation")
	}
}
