package kernel

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// On Linux, the cache sizes the CPU reports (CPUID on amd64) are those the
// kernel's sysfs lists for CPU 0: the fallback used where there is no sysfs
// agrees with it where there is.
func TestCacheSizesMatchSysfs(t *testing.T) {
	l1, l2, l3, ok := CacheSizes()
	if !ok {
		t.Skip("this CPU does not report its caches (no CPUID cache leaves: arm64, purego)")
	}
	sys := map[string]int{}
	for idx := 0; idx < 8; idx++ {
		dir := "/sys/devices/system/cpu/cpu0/cache/index" + strconv.Itoa(idx) + "/"
		lvl, err1 := os.ReadFile(dir + "level")
		typ, err2 := os.ReadFile(dir + "type")
		sz, err3 := os.ReadFile(dir + "size")
		if err1 != nil || err2 != nil || err3 != nil || strings.TrimSpace(string(typ)) == "Instruction" {
			continue
		}
		s := strings.TrimSpace(string(sz))
		mult := 1
		if strings.HasSuffix(s, "K") {
			mult, s = 1024, strings.TrimSuffix(s, "K")
		}
		if strings.HasSuffix(s, "M") {
			mult, s = 1<<20, strings.TrimSuffix(s, "M")
		}
		n, _ := strconv.Atoi(s)
		sys[strings.TrimSpace(string(lvl))] = n * mult
	}
	if len(sys) == 0 {
		t.Skip("no sysfs cache information")
	}
	for lvl, got := range map[string]int{"1": l1, "2": l2, "3": l3} {
		if want, ok := sys[lvl]; ok && want != got {
			t.Errorf("L%s: CPUID says %d bytes, sysfs %d", lvl, got, want)
		}
	}
}
