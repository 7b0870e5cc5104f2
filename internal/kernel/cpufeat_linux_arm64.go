//go:build !purego

package kernel

import (
	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// Linux reports the arm64 features in the auxiliary vector: FEAT_FHM as
// HWCAP_ASIMDFHM (which golang.org/x/sys/cpu reads), FEAT_BF16 as
// HWCAP2_BF16 (which it does not), read here with unix.Auxv.
const (
	atHWCAP2   = 26      // AT_HWCAP2
	hwcap2BF16 = 1 << 14 // HWCAP2_BF16
)

func detectBF16() bool {
	auxv, err := unix.Auxv()
	if err != nil {
		return false
	}
	for _, kv := range auxv {
		if kv[0] == atHWCAP2 {
			return kv[1]&hwcap2BF16 != 0
		}
	}
	return false
}

func detectFHM() bool { return cpu.ARM64.HasASIMDFHM }
