package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Peak FMA throughput: a register-only loop, the yardstick of the
// benchmarks.

func genFMAPeak(s isa) {
	name := "FMAPeak" + s.Suffix
	TEXT(name, NOSPLIT, "func(iters int)")
	flops := 12 * s.Lanes * 2
	Doc(fmt.Sprintf("%s runs iters iterations of a loop of 12 independent", name),
		fmt.Sprintf("register-only VFMADD231PS chains on %d-lane vectors: one iteration", s.Lanes),
		fmt.Sprintf("is 12*%d*2 = %d float32 FLOPs. It measures the machine's peak.", s.Lanes, flops))
	n := Load(Param("iters"), GP64())
	x := s.Vec()
	zero(s, x)
	var acc [12]VecVirtual
	for i := range acc {
		acc[i] = s.Vec()
		zero(s, acc[i])
	}
	TESTQ(n, n)
	JLE(LabelRef("done"))
	Label("loop")
	for i := range acc {
		VFMADD231PS(x, x, acc[i])
	}
	DECQ(n)
	JNE(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}
