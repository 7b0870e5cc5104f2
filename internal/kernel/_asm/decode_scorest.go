package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The decode kernels (see decode.go): scoresF32T16AVX512, S = Q·Kᵀ for 16
// query rows with the rows in the zmm lanes. The row kernels
// (decode_scores.go) take a key row as a dot product over d in 16-lane
// accumulators and fold them at the end of each block; with 16 rows the
// folds and the Q reloads cost as much as the FMAs. Here a register holds
// column p of Q (Qᵀ, packed by the wrapper), and each FMA multiplies it by
// K[j][p] broadcast from memory (embedded {1to16}) into the accumulator of
// key j: one FMA per element of K, no fold in the loop. After d, the
// accumulators of 16 keys (lanes: rows) are transposed in registers into
// 16 columns of S's rows.
//
// Measured on Zen 4 (best of 15 alternations, keys in L1, under load):
// 1.6× the row kernel of 16 rows. For 8 rows the same scheme on ymm
// (embedded {1to8}, 8 keys side by side) ran at 0.84× the row kernel, and
// 8 or 4 rows in a zmm register with 2 or 4 elements p each (a 64- or
// 128-bit broadcast of K, which is not embedded in the FMA) at 0.82× and
// 0.76×: those tiles keep the row kernels.
//
// Also measured for 8 and 4 rows and found no faster (Zen 4, 256 keys of
// d = 128 in L2, medians of 15 alternations in one process, under load;
// the row kernels run there at 101 (8 rows) and 108 (4 rows) GFLOP/s, the
// accum tiles at 110-113, so scores has at most ~1.1× to gain):
//   - one row at a time over 16 keys, one accumulator per key with its K
//     vector read from L1 by the FMA, the 16 folded into 16 scores (the
//     row kernels' fold, bit for bit their sums): 0.89× (8 rows), 0.80×
//     (4 rows) — a zmm load per FMA, and Zen 4 loads one zmm per cycle;
//   - the row kernel of 2 rows (8 keys) run on row pairs: 0.78×;
//   - 8 rows × 16 keys in the lanes, a 16×16 chunk of K transposed in
//     registers (64 shuffles) then 8 FMAs with Q {1to16} per element:
//     0.94-0.98×; the same with the 128-bit lane moves done by
//     VBROADCASTF32X4/VINSERTF32X4 loads (32 in-lane shuffles): 0.94-1.07×,
//     best of 15 0.98-1.00×, parity — not worth a second sum order.
//
// What did gain for 8 rows: the row kernel of 4 rows run on both halves
// of the rows over 64 KiB blocks of keys, 1.03-1.08×, bit for bit the
// same sums (kernel.withScoresSplit8, decode_split_amd64.go).
//
// Sum order of S[r][j]: two chains, even and odd elements p (the tail of d
// beyond a multiple of 16 to the even chain), then added.

// scoresTKeys is the number of keys of a block (the kernel takes n a
// multiple of it).
const scoresTKeys = 16

// scoresTGroup is the number of keys whose rows are read side by side:
// rows of a cache whose heads lie side by side are a multiple of 2 KiB
// apart and share two L1 sets, which 16 rows (with the lines the L1
// prefetcher brings) thrash; 4 keys × 2 chains keep 8 FMAs in flight.
const scoresTGroup = 4

// scoresTStep is the number of elements of d one unrolled step covers: one
// cache line of each key row, which the step prefetches ahead.
const scoresTStep = 16

// scoresTPrefetchRows is the number of key rows ahead the transposed
// scores kernel prefetches (into L2).
const scoresTPrefetchRows = 32

// genScoresT generates scoresF32T16AVX512.
func genScoresT() {
	const mr = 16
	s := isaAVX512
	name := fmt.Sprintf("scoresF32T%dAVX512", mr)
	TEXT(name, NOSPLIT, "func(s []float32, lds int, qt []float32, k []float32, ldk, n, d int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s sets s[r*lds+j] = Σ_p qt[p*%d+r]·k[j*ldk+p] for r < %d, j < n, p < d.", name, mr, mr),
		"ldk is the key row stride in elements; d >= 1, n a positive multiple of 16, and all accesses are in bounds.")

	sp, kb, nLeft := AllocLocal(8), AllocLocal(8), AllocLocal(8)
	MOVQ(Load(Param("s").Base(), GP64()), sp)
	MOVQ(Load(Param("k").Base(), GP64()), kb)
	MOVQ(Load(Param("n"), GP64()), nLeft)
	Label("block")
	var sums []VecVirtual
	for j0 := 0; j0 < scoresTKeys; j0 += scoresTGroup {
		sums = append(sums, scoresTGroupSums(s, mr, j0, fmt.Sprintf("g%d", j0), kb)...)
	}
	// out[r] lane jj = S[r][j0+jj].
	out := transposeDwords(s, sums)
	p := ldMem(sp)
	lds := Load(Param("lds"), GP64())
	SHLQ(Imm(2), lds)
	row := rowMems(p, lds)
	for r := 0; r < mr; r++ {
		VMOVUPS(out[r], row(r))
	}
	ADDQ(U32(4*scoresTKeys), sp)
	kst := GP64()
	MOVQ(slot(Param("ldk")), kst)
	SHLQ(Imm(uint64(2+log2(scoresTKeys))), kst)
	ADDQ(kst, kb)
	SUBQ(U32(scoresTKeys), nLeft)
	JNZ(LabelRef("block"))
	VZEROUPPER()
	RET()
}

// sumTree adds the vectors pairwise, ((v0+v1)+(v2+v3)), in place, and
// returns the one holding the sum.
func sumTree(a []VecVirtual) VecVirtual {
	for len(a) > 1 {
		var next []VecVirtual
		for i := 0; i < len(a); i += 2 {
			VADDPS(a[i+1], a[i], a[i])
			next = append(next, a[i])
		}
		a = next
	}
	return a[0]
}

// scoresTGroupSums emits the products of Qᵀ (mr rows) with the
// scoresTGroup keys j0 … of the block at kb, two chains each, and returns
// their sums.
func scoresTGroupSums(s isa, mr, j0 int, lbl string, kb Mem) []VecVirtual {
	gr := scoresTGroup
	acc := make([][2]VecVirtual, gr)
	for j := range acc {
		for ch := range acc[j] {
			acc[j][ch] = s.Vec()
			zero(s, acc[j][ch])
		}
	}
	kld, kld3 := strides(slot(Param("ldk")), 4, gr)
	k0 := GP64()
	MOVQ(kb, k0)
	if j0 > 0 {
		off := GP64()
		IMUL3Q(Imm(uint64(j0)), kld, off)
		ADDQ(off, k0)
	}
	ks := newRowSet(k0, kld, kld3, gr)
	qp := Load(Param("qt").Base(), GP64())
	d := Load(Param("d"), GP64())
	// Element p (at p from the pointers) into chain ch.
	one := func(p, ch int) {
		qv := s.Vec()
		VMOVUPS(Mem{Base: qp, Disp: 4 * mr * p}, qv)
		for j := range acc {
			VFMADD231PS_BCST(ks.mem(j, 4*p), qv, acc[j][ch])
		}
	}
	steps := GP64()
	MOVQ(d, steps)
	SHRQ(Imm(uint64(log2(scoresTStep))), steps)
	JZ(LabelRef(lbl + "Tail"))
	pfd := GP64() // bytes from a key row to the one it prefetches
	MOVQ(slot(Param("ldk")), pfd)
	SHLQ(Imm(uint64(2+log2(scoresTPrefetchRows))), pfd)
	Label(lbl + "Step")
	for j := 0; j < gr; j++ {
		m := ks.mem(j, 0)
		if m.Index == nil {
			m.Index, m.Scale = pfd, 1
		} else {
			t := GP64()
			LEAQ(m, t)
			m = Mem{Base: t, Index: pfd, Scale: 1}
		}
		PREFETCHT1(m)
	}
	for p := 0; p < scoresTStep; p++ {
		one(p, p%2)
	}
	ADDQ(U32(4*mr*scoresTStep), qp)
	ks.add(U32(4 * scoresTStep))
	DECQ(steps)
	JNZ(LabelRef(lbl + "Step"))

	Label(lbl + "Tail")
	ANDQ(Imm(scoresTStep-1), d)
	JZ(LabelRef(lbl + "Sum"))
	Label(lbl + "TailP")
	one(0, 0)
	ADDQ(U32(4*mr), qp)
	ks.add(U32(4))
	DECQ(d)
	JNZ(LabelRef(lbl + "TailP"))

	Label(lbl + "Sum")
	sums := make([]VecVirtual, gr)
	for j := range acc {
		sums[j] = sumTree(acc[j][:])
	}
	return sums
}
