package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/reg"
)

// genCPUID generates cpuidex and xgetbv0, for the features
// golang.org/x/sys/cpu does not report (F16C, AMX-FP16, AMX OS support).
func genCPUID() {
	TEXT("cpuidex", NOSPLIT, "func(leaf, sub uint32) (eax, ebx, ecx, edx uint32)")
	Doc("cpuidex executes CPUID with EAX = leaf and ECX = sub.")
	Load(Param("leaf"), EAX)
	Load(Param("sub"), ECX)
	CPUID()
	Store(EAX, Return("eax"))
	Store(EBX, Return("ebx"))
	Store(ECX, Return("ecx"))
	Store(EDX, Return("edx"))
	RET()

	TEXT("xgetbv0", NOSPLIT, "func() (eax, edx uint32)")
	Doc("xgetbv0 executes XGETBV with ECX = 0 (XCR0). The caller checks OSXSAVE.")
	XORL(ECX, ECX)
	XGETBV()
	Store(EAX, Return("eax"))
	Store(EDX, Return("edx"))
	RET()
}
