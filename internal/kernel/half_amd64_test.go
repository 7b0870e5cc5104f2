//go:build amd64 && !purego

package kernel

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// expectedHalfPaths lists the bf16 assembly paths this CPU must offer.
func expectedHalfPaths() []string {
	var names []string
	if amxUsable(BF16) {
		names = append(names, "amx")
	}
	if hasAVX512BF16 {
		names = append(names, "avx512bf16")
	}
	return names
}

func TestAMXConfig(t *testing.T) {
	cfg := amxConfig(7, 70)
	if cfg[0] != 1 {
		t.Fatal("palette")
	}
	colsb := func(tile int) int { return int(cfg[16+2*tile]) | int(cfg[17+2*tile])<<8 }
	want := []struct{ rows, colsb int }{{7, 64}, {7, 64}, {16, 64}, {7, 12}, {3, 64}, {0, 0}, {0, 0}, {0, 0}}
	for tile, w := range want {
		if int(cfg[48+tile]) != w.rows || colsb(tile) != w.colsb {
			t.Errorf("tile %d: rows %d colsb %d, want %d %d", tile, cfg[48+tile], colsb(tile), w.rows, w.colsb)
		}
	}
	// A and B of each product must agree: A.colsb/4 == B.rows, and the C
	// tile is rows × B.colsb.
	for _, pair := range [][2]int{{1, 2}, {3, 4}} {
		if colsb(pair[0])/4 != int(cfg[48+pair[1]]) {
			t.Errorf("tiles %d, %d: A has %d pairs per row, B %d rows", pair[0], pair[1], colsb(pair[0])/4, cfg[48+pair[1]])
		}
	}
	if c := amxConfig(16, 64); c[48+3] != 0 || c[16+6] != 0 || c[48+4] != 0 {
		t.Error("k%32 == 0 must leave the tail tiles unconfigured")
	}
	for i, v := range amxPeakConfig()[48:56] {
		if v != 16 {
			t.Errorf("peak tile %d rows %d", i, v)
		}
	}
}

// TestCPUID compares cpuidBit with the flags golang.org/x/sys/cpu derives
// from CPUID alone (no OS check), covering leaf 1 ECX, leaf 7 EBX/EDX and
// sub-leaf 7.1 EAX.
func TestCPUID(t *testing.T) {
	for _, c := range []struct {
		name          string
		leaf, sub     uint32
		reg, bit      int
		want, applies bool
	}{
		{"FMA", 1, 0, 2, 12, cpu.X86.HasFMA, true},
		{"BMI2", 7, 0, 1, 8, cpu.X86.HasBMI2, true},
		{"AMX-TILE", 7, 0, 3, 24, cpu.X86.HasAMXTile, true},
		{"AMX-BF16", 7, 0, 3, 22, cpu.X86.HasAMXBF16, true},
		{"AVX512_BF16", 7, 1, 0, 5, cpu.X86.HasAVX512BF16, cpu.X86.HasAVX512},
	} {
		if got := cpuidBit(c.leaf, c.sub, c.reg, c.bit); c.applies && got != c.want {
			t.Errorf("%s: cpuidBit %v, x/sys/cpu %v", c.name, got, c.want)
		}
	}
	if cpuidBit(0x7fffffff, 0, 0, 0) {
		t.Error("a leaf beyond the maximum must read as false")
	}
	t.Logf("F16C %v, AVX512BW %v, AVX512_BF16 %v, AMX-FP16 %v, OS AMX %v", hasF16C, hasAVX512BW, hasAVX512BF16, hasAMXFP16, osAMX)
}
