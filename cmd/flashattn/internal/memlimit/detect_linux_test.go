package memlimit

import "testing"

// On Linux the limit is known and plausible.
func TestDetectHere(t *testing.T) {
	l := Detect()
	if !l.Known() || l.Bytes < 1<<20 || l.Source == "" {
		t.Errorf("Detect() = %v (%q)", l.Bytes, l.Source)
	}
}
