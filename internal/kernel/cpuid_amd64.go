//go:build amd64 && !purego

package kernel

import "golang.org/x/sys/cpu"

// hasAVX2 reports AVX2 and FMA; hasAVX512 reports AVX512F and AVX512VL (the
// only AVX-512 subsets the kernels use). golang.org/x/sys/cpu also checks
// that the OS saves the registers.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL
)

// CPU features that golang.org/x/sys/cpu does not report, read with CPUID
// and XGETBV (cpuidex and xgetbv0 are in kernel_amd64.s).
var (
	// hasF16C: CPUID.1:ECX bit 29 (VCVTPH2PS, VCVTPS2PH), usable only when
	// the OS saves the ymm registers, which HasAVX includes.
	hasF16C = cpu.X86.HasAVX && cpuidBit(1, 0, 2, 29)

	// hasAVX512BW: the word instructions of the AVX-512 converters.
	hasAVX512BW = hasAVX512 && cpu.X86.HasAVX512BW

	// hasAVX512BF16: VDPBF16PS and VCVTNEPS2BF16.
	hasAVX512BF16 = hasAVX512 && cpu.X86.HasAVX512BF16

	// hasAMXFP16: CPUID.(EAX=7,ECX=1):EAX bit 21 (TDPFP16PS).
	hasAMXFP16 = cpuidBit(7, 1, 0, 21)

	// osAMX: XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS manages
	// the tile state. The process still has to ask for it (amxPermitted).
	osAMX = cpu.X86.HasOSXSAVE && xcr0()&(1<<17|1<<18) == 1<<17|1<<18
)

// cpuidBit reports bit b of register r (0 EAX, 1 EBX, 2 ECX, 3 EDX) of
// CPUID leaf/sub, or false if the leaf is beyond the maximum.
func cpuidBit(leaf, sub uint32, r, b int) bool {
	if maxLeaf, _, _, _ := cpuidex(0, 0); leaf > maxLeaf {
		return false
	}
	if leaf == 7 && sub > 0 {
		if maxSub, _, _, _ := cpuidex(7, 0); sub > maxSub {
			return false
		}
	}
	a, bx, c, d := cpuidex(leaf, sub)
	return [4]uint32{a, bx, c, d}[r]>>b&1 == 1
}

func xcr0() uint32 {
	eax, _ := xgetbv0()
	return eax
}

// cacheSizesCPUID reads the data and unified cache sizes of levels 1–3 from
// CPUID's deterministic cache parameters: leaf 0x8000001D (AMD, with
// TOPOEXT) or leaf 4 (Intel). ok is false when neither leaf describes a
// level-2 cache.
func cacheSizesCPUID() (l1, l2, l3 int, ok bool) {
	leaf := uint32(4)
	if maxExt, _, _, _ := cpuidex(0x80000000, 0); maxExt >= 0x8000001D {
		if _, _, ecx, _ := cpuidex(0x80000001, 0); ecx&(1<<22) != 0 { // TOPOEXT
			leaf = 0x8000001D
		}
	}
	if maxLeaf, _, _, _ := cpuidex(0, 0); leaf == 4 && maxLeaf < 4 {
		return 0, 0, 0, false
	}
	for sub := uint32(0); sub < 16; sub++ {
		eax, ebx, ecx, _ := cpuidex(leaf, sub)
		typ := eax & 0x1f // 0 none, 1 data, 2 instruction, 3 unified
		if typ == 0 {
			break
		}
		if typ == 2 {
			continue
		}
		size := int(ebx>>22+1) * int(ebx>>12&0x3ff+1) * int(ebx&0xfff+1) * int(ecx+1)
		switch eax >> 5 & 7 {
		case 1:
			l1 = size
		case 2:
			l2 = size
		case 3:
			l3 = size
		}
	}
	return l1, l2, l3, l2 > 0
}
