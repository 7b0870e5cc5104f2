// Command _asm generates the amd64 assembly of package kernel with avo,
// kernel_amd64.s and, with -decode, decode_amd64.s (and their Go stubs):
//
//	cd internal/kernel && go generate .
//
// It is its own module, so that the main module does not depend on avo.
// One file per kernel family: gemm.go (matrix products), rows.go (exp and
// max of score rows), elementwise.go (scale, dsFromDp, softcap, ALiBi),
// peak.go, philox.go, convert.go, bf16.go, amx.go, pack.go, transpose.go,
// decode*.go, cpuid.go; isa.go and evex.go hold what they share. Package
// kernel's TestAsmTables compares every constant table (GLOBL) with the
// constants of the Go twins. The Go wrappers check every precondition;
// the assembly trusts its arguments.
package main

import (
	"flag"

	. "github.com/mmcloughlin/avo/build"
)

var decodeOnly = flag.Bool("decode", false, "generate the decode kernels (decode*.go) instead of the others")

var decodeBF16Only = flag.Bool("decodebf16", false, "generate the native bfloat16 decode kernels (decode_bf16.go) instead of the others")

func main() {
	flag.Parse()
	ConstraintExpr("amd64,!purego")
	switch {
	case *decodeBF16Only:
		genDecodeBF16()
	case *decodeOnly:
		genDecode()
	default:
		genKernels()
	}
	Generate()
}

// genKernels generates the kernels of kernel_amd64.s, in the file's order.
func genKernels() {
	genExpTable()
	for _, s := range []isa{isaAVX512, isaAVX2} {
		for _, k := range []gemmKind{kindABt, kindAB, kindAtB} {
			genGemm(s, k, false)
		}
		genGemm(s, kindAB, true)
		genExpSum(s, false)
		genMax(s)
		genScale(s)
		genDsFromDp(s)
		genFMAPeak(s)
	}
	genDot4T()
	genPhilox()
	genSoftcap()
	genALiBi()
	genConvert()
	genExpSum(isaAVX512, true) // expSumBF16AVX512BF16 (reads no table of genConvert's: its place only orders kernel_amd64.s)
	genBF16()
	genAMXAll()
	genPack()
}
