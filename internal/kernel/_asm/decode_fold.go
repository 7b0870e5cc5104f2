package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The decode kernels (see decode.go): the transposing reduction of the
// scores kernels, L accumulators to one vector of their sums.

// A fold level combines vectors 2i and 2i+1 into one: x and y are two
// shuffles of the pair, and x+y holds, in the same lane positions, the
// partial sums of fewer accumulators with half as many lanes each.
type foldLevel int

const (
	fold256 foldLevel = iota // AVX-512 only: 256-bit halves
	fold128                  // 128-bit lanes
	fold64                   // pairs of dwords within 128-bit lanes
	fold32                   // dwords within 128-bit lanes
)

func foldLevels(s isa) []foldLevel {
	if s.EVEX {
		return []foldLevel{fold256, fold128, fold64, fold32}
	}
	return []foldLevel{fold128, fold64, fold32}
}

// foldLanes returns, for the x and y shuffles of level l on L lanes, the
// source of each output lane: (0 = a, 1 = b, lane).
func foldLanes(l foldLevel, L int) (x, y [][2]int) {
	x, y = make([][2]int, L), make([][2]int, L)
	for i := 0; i < L; i++ {
		g, w := i/4, i%4 // 128-bit group, dword within it
		switch l {
		case fold256: // x = [a.q0 a.q1 b.q0 b.q1], y = [a.q2 a.q3 b.q2 b.q3]
			src := 0
			if g >= 2 {
				src = 1
			}
			x[i] = [2]int{src, (g%2)*4 + w}
			y[i] = [2]int{src, (g%2+2)*4 + w}
		case fold128: // 16 lanes: x = [a.q0 a.q2 b.q0 b.q2], y = [a.q1 a.q3 b.q1 b.q3]; 8 lanes: x = [a.h0 b.h0], y = [a.h1 b.h1]
			if L == 16 {
				src := g / 2
				x[i] = [2]int{src, (g%2)*8 + w}
				y[i] = [2]int{src, (g%2)*8 + 4 + w}
			} else {
				x[i] = [2]int{g, w}
				y[i] = [2]int{g, 4 + w}
			}
		case fold64: // per 128-bit group: x = [a0 a1 b0 b1], y = [a2 a3 b2 b3]
			x[i] = [2]int{w / 2, g*4 + w%2}
			y[i] = [2]int{w / 2, g*4 + 2 + w%2}
		case fold32: // per 128-bit group: x = [a0 a2 b0 b2], y = [a1 a3 b1 b3]
			x[i] = [2]int{w / 2, g*4 + 2*(w%2)}
			y[i] = [2]int{w / 2, g*4 + 2*(w%2) + 1}
		}
	}
	return x, y
}

// foldPerm simulates the folding tree on labels: it returns, for each lane
// of the result, the input vector whose sum ends up there. It panics if a
// level would add partial sums of different inputs (a generator bug).
func foldPerm(s isa) []int {
	L := s.Lanes
	vs := make([][]int, L)
	for i := range vs {
		vs[i] = make([]int, L)
		for j := range vs[i] {
			vs[i][j] = i
		}
	}
	for _, l := range foldLevels(s) {
		xs, ys := foldLanes(l, L)
		var next [][]int
		for p := 0; p < len(vs); p += 2 {
			out := make([]int, L)
			for i := 0; i < L; i++ {
				pair := [2][]int{vs[p], vs[p+1]}
				a, b := pair[xs[i][0]][xs[i][1]], pair[ys[i][0]][ys[i][1]]
				if a != b {
					panic(fmt.Sprintf("fold level %d adds lanes of inputs %d and %d", l, a, b))
				}
				out[i] = a
			}
			next = append(next, out)
		}
		vs = next
	}
	return vs[0]
}

// fold emits the tree on in (s.Lanes vectors; nil ones are zero) and
// returns the vector whose lane i holds the sum of in[foldPerm(s)[i]].
func fold(s isa, in []VecVirtual) VecVirtual {
	var zero VecVirtual
	zeroReg := func() VecVirtual {
		if zero == nil {
			zero = s.Vec()
			VXORPS(zero, zero, zero)
		}
		return zero
	}
	vs := in
	for _, l := range foldLevels(s) {
		var next []VecVirtual
		for p := 0; p < len(vs); p += 2 {
			a, b := vs[p], vs[p+1]
			if a == nil && b == nil {
				next = append(next, nil)
				continue
			}
			if a == nil {
				a = zeroReg()
			}
			if b == nil {
				b = zeroReg()
			}
			x, y := s.Vec(), s.Vec()
			switch l {
			case fold256:
				VSHUFF32X4(Imm(0x44), b, a, x)
				VSHUFF32X4(Imm(0xee), b, a, y)
			case fold128:
				if s.EVEX {
					VSHUFF32X4(Imm(0x88), b, a, x)
					VSHUFF32X4(Imm(0xdd), b, a, y)
				} else {
					VPERM2F128(Imm(0x20), b, a, x)
					VPERM2F128(Imm(0x31), b, a, y)
				}
			case fold64:
				VSHUFPS(Imm(0x44), b, a, x)
				VSHUFPS(Imm(0xee), b, a, y)
			case fold32:
				VSHUFPS(Imm(0x88), b, a, x)
				VSHUFPS(Imm(0xdd), b, a, y)
			}
			VADDPS(y, x, x)
			next = append(next, x)
		}
		vs = next
	}
	return vs[0]
}

// foldTile folds the accumulators acc[r][jj] (rows × w, rows·w <= L) into
// one vector whose lane r·w+jj holds their sum.
func foldTile(s isa, acc [][]VecVirtual, w int) VecVirtual {
	perm := foldPerm(s)
	in := make([]VecVirtual, s.Lanes)
	for lane, src := range perm {
		if r, jj := lane/w, lane%w; r < len(acc) {
			in[src] = acc[r][jj]
		}
	}
	return fold(s, in)
}

// storeTile stores the lanes r·w .. r·w+w-1 of v at row(r), for r < rows
// (w is a power of two).
func storeTile(s isa, v VecVirtual, rows, w int, row func(r int) Mem) {
	L := s.Lanes
	switch {
	case w == L:
		VMOVUPS(v, row(0))
		return
	case w == L/2:
		VMOVUPS(half(s, v), row(0))
		if rows > 1 {
			if s.EVEX {
				VEXTRACTF64X4(Imm(1), v, row(1))
			} else {
				VEXTRACTF128(Imm(1), v, row(1))
			}
		}
		return
	}
	// w <= 4 (AVX-512) or w <= 2 (AVX2): by 128-bit group.
	for g := 0; g*4 < rows*w; g++ {
		x := lane128(s, v, g)
		switch w {
		case 4:
			VMOVUPS(x, row(g))
		case 2:
			VMOVLPS(x, row(2*g))
			if 2*g+1 < rows {
				VMOVHPS(x, row(2*g+1))
			}
		case 1:
			for t := 0; t < 4 && 4*g+t < rows; t++ {
				if t == 0 {
					VMOVSS(x, row(4*g))
				} else {
					VEXTRACTPS(Imm(uint64(t)), x, row(4*g+t))
				}
			}
		}
	}
}

// lane128 returns 128-bit group g of v in an xmm register.
func lane128(s isa, v VecVirtual, g int) Register {
	if g == 0 {
		return v.AsX()
	}
	x := XMM()
	if s.EVEX {
		VEXTRACTF32X4(Imm(uint64(g)), v, x)
	} else {
		VEXTRACTF128(Imm(uint64(g)), v, x)
	}
	return x
}
