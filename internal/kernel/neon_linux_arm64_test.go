//go:build !purego

package kernel

import (
	"testing"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// TestNEONFeatureDetection cross-checks the auxiliary vector that
// detectBF16 reads with golang.org/x/sys/cpu, which reads HWCAP itself:
// Advanced SIMD and FEAT_FHM must agree.
func TestNEONFeatureDetection(t *testing.T) {
	auxv, err := unix.Auxv()
	if err != nil {
		t.Fatal(err)
	}
	var hwcap uint64
	found := false
	for _, kv := range auxv {
		if kv[0] == 16 { // AT_HWCAP
			hwcap, found = uint64(kv[1]), true
		}
	}
	if !found {
		t.Fatal("no AT_HWCAP in the auxiliary vector")
	}
	if hwcap&(1<<1) == 0 || !cpu.ARM64.HasASIMD {
		t.Errorf("Advanced SIMD: HWCAP %v, x/sys/cpu %v", hwcap&(1<<1) != 0, cpu.ARM64.HasASIMD)
	}
	if fhm := hwcap&(1<<23) != 0; fhm != hasFHM {
		t.Errorf("FEAT_FHM: HWCAP %v, detected %v", fhm, hasFHM)
	}
}
