//go:build !purego

package kernel

import "golang.org/x/sys/unix"

// macOS reports the arm64 features by sysctl (hw.optional.arm.FEAT_*:
// BF16 from Apple M2 on, FHM on every Apple silicon CPU);
// golang.org/x/sys/cpu does not read them there.
func sysctlFeature(name string) bool {
	v, err := unix.SysctlUint32("hw.optional.arm." + name)
	return err == nil && v == 1
}

func detectBF16() bool { return sysctlFeature("FEAT_BF16") }

func detectFHM() bool { return sysctlFeature("FEAT_FHM") }
