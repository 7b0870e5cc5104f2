package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The native bfloat16 decode kernels (decode_bf16_amd64.s, generated with
// -decodebf16): S = Q·Kᵀ and O += P·V for 8 query rows (scores also 16,
// in zmm; 4 rows: decode_bf16m4.go and genAccumNat(4)) and a bfloat16 KV
// cache with VDPBF16PS (AVX512_BF16), which multiplies pairs of bfloat16
// and adds both products to a float32 lane: twice the float32 FMA's
// products per instruction, and no widening of the cache. Q and P are
// rounded to bfloat16 (VCVTNEPS2BF16, to nearest even) before the
// products, as the native forward does; VDPBF16PS and VCVTNEPS2BF16 treat
// denormal inputs and results as zero.
//
//	scoresBF16M8AVX512BF16  S[r][j] = Σ_p Q[r][p]·K[j][p]    r < 8, j < n
//	accumBF16M8AVX512BF16   O[r][c] += Σ_j P[r][j]·V[j][c]   r < 8, c < d
//
// d is a multiple of 32 (and at most natMaxD for scores); the Go wrappers
// (decode_bf16_amd64.go) check it and send other shapes to the float32
// kernels.
//
// scores: the query rows lie in the lanes. Q is first rounded and packed in
// the frame as d/2 ymm vectors whose lane r is the pair Q[r][2p:2p+2] (8
// rows of 16 converted values, transposed as 8×8 dwords). Keys go 8 at a
// time, one ymm accumulator each (two, see below): for every pair p the pair K[j][2p:2p+2]
// of each key, one dword, is broadcast and VDPBF16PS adds it times the
// pair vector p to key j's accumulator. The 8 accumulators (lane r =
// S[r][j]) are transposed into the 8 rows of S. Keys beyond a multiple of 8
// go one at a time. Each key has two accumulators (even and odd pairs,
// added before the transpose): 16 independent VDPBF16PS chains, enough to
// hide the instruction's latency at two per cycle.
//
// accum: O's columns lie in the lanes. For each block of natAccumKeys keys,
// P's block is rounded to bfloat16 into the frame (row r: the pairs
// P[r][j:j+2]); then O is swept in chunks of 32 columns, 16 zmm
// accumulators (two per row). For each pair of keys the 32 values of the
// chunk in both V rows are interleaved into pairs by VPUNPCKLWD/VPUNPCKHWD
// (columns 0-3, 8-11, 16-19, 24-27 in the low vector, the others in the
// high one), and each row's P pair is broadcast into both; at the end of
// the chunk VPERMI2PS puts the columns back in order and the sums are
// added to O. An odd last key pairs with a zero row.
const (
	natRows      = 8
	natMaxD      = 256
	natAccumKeys = 64
)

// ymm returns the physical ymm register n.
func ymm(n int) VecPhysical { return Vector.Lookup(Index(n), S256).(VecPhysical) }

// vdpbf16psY emits VDPBF16PS Y(dst) += pairs of Y(src1)·Y(src2).
func vdpbf16psY(dst, src1, src2 int) {
	code, text := encVDPBF16PSLen(1, dst, src1, src2)
	raw(code, text, []Op{ymm(dst), ymm(src1), ymm(src2)}, []Op{ymm(dst)})
}

// natPerm is the table of VPERMI2PS indices that put the unpacked columns
// back in order: dword i of output half h (columns 16h+i) is column i' of
// the low (i' < 16) or high (i' >= 16) unpacked vector.
var natPerm Mem

func genDecodeBF16() {
	natPerm = GLOBL("decbf16perm", RODATA|NOPTR)
	for h := 0; h < 2; h++ {
		for i := 0; i < 16; i++ {
			q, w := i/4, i%4 // 128-bit lane of the output, dword in it
			DATA(64*h+4*i, U32(uint32(q%2*16+(q/2+2*h)*4+w)))
		}
	}
	for _, ns := range []natScores{natPairs(natRows), natPairs(2 * natRows), natQuads()} {
		genScoresNat(ns)
	}
	genAccumNat(natRows)
	genAccumNat(natRows / 2)
}

// transpose8 transposes the 8×8 dwords of Y(in[0..7]) (in[j] lane i) into
// Y(out[0..7]) (out[i] lane j), using Y16-Y31 as temporaries.
func transpose8(in, out [8]int) {
	t := func(i int) VecPhysical { return ymm(16 + i) }
	u := func(i int) VecPhysical { return ymm(24 + i) }
	for g := 0; g < 2; g++ { // keys 4g..4g+3
		a := in[4*g:]
		VUNPCKLPS(ymm(a[1]), ymm(a[0]), t(4*g))
		VUNPCKHPS(ymm(a[1]), ymm(a[0]), t(4*g+1))
		VUNPCKLPS(ymm(a[3]), ymm(a[2]), t(4*g+2))
		VUNPCKHPS(ymm(a[3]), ymm(a[2]), t(4*g+3))
		// u(4g+i): lanes i and 4+i of the four inputs.
		VSHUFPS(Imm(0x44), t(4*g+2), t(4*g), u(4*g))
		VSHUFPS(Imm(0xee), t(4*g+2), t(4*g), u(4*g+1))
		VSHUFPS(Imm(0x44), t(4*g+3), t(4*g+1), u(4*g+2))
		VSHUFPS(Imm(0xee), t(4*g+3), t(4*g+1), u(4*g+3))
	}
	for i := 0; i < 4; i++ {
		VSHUFF32X4(Imm(0), u(4+i), u(i), ymm(out[i]))
		VSHUFF32X4(Imm(3), u(4+i), u(i), ymm(out[4+i]))
	}
}

func seq8(base int) (r [8]int) {
	for i := range r {
		r[i] = base + i
	}
	return r
}

// natScores is what differs between the native bf16 scores kernels: the
// rows, the vector width, the layout of the packed Q (pairs or quadwords
// per lane, so how many bytes of a key one broadcast takes) and the way a
// group's sums reach S. genScoresNat emits the rest, the same for all.
type natScores struct {
	rows int
	see  string // the file that describes the layout
	vb   int    // bytes of a vector: 32 (ymm) or 64 (zmm)
	bw   int    // bytes of a key per broadcast and VDPBF16PS: 4 or 8
	// packStep is the frame bytes of 16 packed values of every row, as
	// the generated code spells the constant.
	packStep Constant
	bcast    func(ops ...Op) // a key's bw bytes into every lane
	// pack rounds the 16 values at rs.mem(r, 0) of each row and stores
	// them packed at dst.
	pack func(rs rowSet, dst Register)
	// store moves the group's sums (key j in vector j, j < 8) to the
	// rows of S.
	store func(row func(r int) Mem)
	// fold, if set, adds up the partial sums of the tail's key in vector
	// 0; then dword lane(r) of it is S[r][j].
	fold func()
	lane func(r int) int
}

// natPairs is the layout of 8 rows (ymm) or 16 rows (zmm): lane r of
// packed Q vector p is the pair Q[r][2p:2p+2]; decode_bf16.go.
func natPairs(rows int) natScores {
	ns := natScores{
		rows: rows, see: "decode_bf16.go", vb: 4 * rows, bw: 4, packStep: U32(32 * rows),
		bcast: VPBROADCASTD, lane: func(r int) int { return r },
	}
	// Chunks of 16 values of the rows, rounded and transposed 8 rows at a
	// time (rows 8-15 in the high halves of the vectors).
	ns.pack = func(rs rowSet, dst Register) {
		for h := 0; h < rows/8; h++ {
			for r := 0; r < 8; r++ {
				VMOVUPS(rs.mem(8*h+r, 0), zmm(r))
				vcvtneps2bf16(r, r)
			}
			transpose8(seq8(0), seq8(8))
			for i := 0; i < 8; i++ {
				VMOVUPS(ymm(8+i), Mem{Base: dst, Disp: ns.vb*i + 32*h})
			}
		}
	}
	// Rows 0-7 from the low halves; with 16 rows, rows 8-15 from the high
	// halves, moved to Y8-Y15 after the first rows are stored.
	ns.store = func(row func(r int) Mem) {
		transpose8(seq8(0), seq8(8))
		for r := 0; r < 8; r++ {
			VMOVUPS(ymm(8+r), row(r))
		}
		if rows == 16 {
			for j := 0; j < 8; j++ {
				VEXTRACTF64X4(Imm(1), zmm(j), ymm(8+j))
			}
			transpose8(seq8(8), seq8(8))
			for r := 0; r < 8; r++ {
				VMOVUPS(ymm(8+r), row(8+r))
			}
		}
	}
	return ns
}

// genScoresNat emits the scores kernel of ns.rows query rows. With 16 rows
// every vector is twice as wide as with 8, so that one broadcast and one
// VDPBF16PS serve 16 rows: half the instructions and the reads of K of two
// 8-row calls.
func genScoresNat(ns natScores) {
	const keys = 8 // keys per group
	rows, vb, bw := ns.rows, ns.vb, ns.bw
	vr, dp, zero := ymm, vdpbf16psY, func(v VecPhysical) { VPXOR(v, v, v) }
	if vb == 64 {
		vr, dp, zero = zmm, vdpbf16ps, func(v VecPhysical) { VPXORD(v, v, v) }
	}
	steps := 64 / bw // broadcasts per 64 bytes of a key
	name := fmt.Sprintf("scoresBF16M%dAVX512BF16", rows)
	// The frame holds the packed Q (up to 8 KiB).
	natText(name, "func(s []float32, lds int, q []float32, k []uint16, ldk, n, d int)",
		fmt.Sprintf("%s sets s[r*lds+j] = Σ_p bf16(q[r*d+p])·k[j*ldk+p] for r < %d, j < n, with", name, rows),
		"VDPBF16PS (q rounded to bfloat16; see "+ns.see+"). ldk is the key",
		"row stride in elements; d is a multiple of 32 up to 256, n >= 1, and",
		"all accesses are in bounds.")
	qLoc := AllocLocal(natMaxD * 2 * rows) // Q in bfloat16
	sLoc := AllocLocal(vb)

	// Pack Q, 16 values of every row at a time.
	{
		ldq := Load(Param("d"), GP64()).(GPVirtual)
		SHLQ(Imm(2), ldq)
		ldq3 := GP64()
		LEAQ(Mem{Base: ldq, Index: ldq, Scale: 2}, ldq3)
		rs := newRowSet(slot(Param("q").Base()), ldq, ldq3, rows)
		dst := GP64()
		LEAQ(qLoc, dst)
		c := Load(Param("d"), GP64())
		SHRQ(Imm(4), c)
		Label("packq")
		ns.pack(rs, dst)
		rs.add(Imm(64))
		ADDQ(ns.packStep, dst)
		DECQ(c)
		JNZ(LabelRef("packq"))
	}

	ld, ld3 := strides(slot(Param("ldk")), 2, keys)
	lds := loadStride("lds", 4)
	kp := Load(Param("k").Base(), GP64()).(GPVirtual)
	sp := Load(Param("s").Base(), GP64()).(GPVirtual)
	n := Load(Param("n"), GP64()).(GPVirtual)
	pf := GP64() // prefetch distance: 64 rows
	MOVQ(ld, pf)
	SHLQ(Imm(6), pf)

	Label("group")
	CMPQ(n, Imm(keys))
	JL(LabelRef("tail"))
	for j := 0; j < 2*keys; j++ {
		zero(vr(j))
	}
	{
		rs := newRowSet(kp, ld, ld3, keys)
		pfp := GP64()
		LEAQ(Mem{Base: kp, Index: pf, Scale: 1}, pfp)
		pfs := newRowSet(pfp, ld, ld3, keys)
		qq := GP64()
		LEAQ(qLoc, qq)
		c := Load(Param("d"), GP64())
		SHRQ(Imm(5), c)
		Label("step")
		for i := 0; i < steps; i++ { // 64 bytes of each key
			qv := 16 + i%2
			VMOVUPS(Mem{Base: qq, Disp: vb * i}, vr(qv))
			for j := 0; j < keys; j++ {
				b := 18 + (i*keys+j)%6
				ns.bcast(rs.mem(j, bw*i), vr(b))
				dp(j+keys*(i%2), qv, b)
			}
		}
		for j := 0; j < keys; j++ {
			PREFETCHT1(pfs.mem(j, 0))
		}
		rs.add(Imm(64))
		pfs.add(Imm(64))
		ADDQ(U32(steps*vb), qq)
		DECQ(c)
		JNZ(LabelRef("step"))
	}
	for j := 0; j < keys; j++ {
		VADDPS(vr(keys+j), vr(j), vr(j))
	}
	ns.store(rowMems(sp, lds))
	LEAQ(Mem{Base: kp, Index: ld, Scale: 8}, kp)
	ADDQ(Imm(4*keys), sp)
	SUBQ(Imm(keys), n)
	JMP(LabelRef("group"))

	// The last n%8 keys, one at a time: two accumulators, then the lanes
	// stored one by one.
	Label("tail")
	TESTQ(n, n)
	JZ(LabelRef("done"))
	zero(vr(0))
	zero(vr(1))
	{
		kq, qq := GP64(), GP64()
		MOVQ(kp, kq)
		LEAQ(qLoc, qq)
		c := Load(Param("d"), GP64())
		SHRQ(Imm(5), c)
		Label("tailstep")
		for i := 0; i < steps; i++ {
			VMOVUPS(Mem{Base: qq, Disp: vb * i}, vr(8+i%2))
			ns.bcast(Mem{Base: kq, Disp: bw * i}, vr(10+i%2))
			dp(i%2, 8+i%2, 10+i%2)
		}
		ADDQ(Imm(64), kq)
		ADDQ(U32(steps*vb), qq)
		DECQ(c)
		JNZ(LabelRef("tailstep"))
	}
	VADDPS(vr(1), vr(0), vr(0))
	if ns.fold != nil {
		ns.fold()
	}
	VMOVUPS(vr(0), sLoc)
	{
		row := rowMems(sp, lds)
		for r := 0; r < rows; r++ {
			t := GP32()
			MOVL(sLoc.Offset(4*ns.lane(r)), t)
			MOVL(t, row(r))
		}
	}
	ADDQ(ld, kp)
	ADDQ(Imm(4), sp)
	DECQ(n)
	JMP(LabelRef("tail"))

	Label("done")
	VZEROUPPER()
	RET()
}

// natText starts a native bf16 kernel: TEXT (not NOSPLIT: the frames hold
// packed bfloat16 operands), no escaping arguments, and the doc lines.
func natText(name, sig string, doc ...string) {
	TEXT(name, 0, sig)
	Pragma("noescape")
	Doc(doc...)
}

// genAccumNat emits the accum kernel of rows (8 or 4) query rows.
func genAccumNat(rows int) {
	name := fmt.Sprintf("accumBF16M%dAVX512BF16", rows)
	// The frame holds a block of P in bfloat16 (up to 1 KiB).
	natText(name, "func(o []float32, ldo int, p []float32, ldp int, v []uint16, ldv, n, d int)",
		fmt.Sprintf("%s adds Σ_j bf16(p[r*ldp+j])·v[j*ldv+c] to o[r*ldo+c] for r < %d, c < d,", name, rows),
		"j < n, with VDPBF16PS (p rounded to bfloat16; see decode_bf16.go). ldv is",
		"the value row stride in elements; d is a positive multiple of 32, n >= 1,",
		"and all accesses are in bounds.")
	pLoc := AllocLocal(rows * natAccumKeys * 2)
	pBlk, vBlk, nLeft, jn := AllocLocal(8), AllocLocal(8), AllocLocal(8), AllocLocal(8)
	MOVQ(Load(Param("p").Base(), GP64()), pBlk)
	MOVQ(Load(Param("v").Base(), GP64()), vBlk)
	MOVQ(Load(Param("n"), GP64()), nLeft)

	Label("block")
	{
		n := keyBlock(nLeft, jn, natAccumKeys)

		// P's block in bfloat16, zero beyond jn keys: row r at pLoc+128r.
		var masks []Register
		for v := 0; v < natAccumKeys/16; v++ {
			t, z, l := GP64(), GP64(), GP64()
			MOVQ(n, t)
			SUBQ(U32(16*v), t)
			XORQ(z, z)
			CMPQ(t, z)
			CMOVQLT(z, t)
			MOVQ(U32(16), l)
			CMPQ(t, l)
			CMOVQGT(l, t)
			ones := GP32()
			MOVL(U32(0xffffffff), ones)
			BZHIL(t.As32(), ones, ones)
			k := K()
			KMOVW(ones, k)
			masks = append(masks, k)
		}
		pb := ldMem(pBlk)
		ldp := loadStride("ldp", 4)
		row := rowMems(pb, ldp)
		for r := 0; r < rows; r++ {
			m := row(r)
			for v, k := range masks {
				VMOVUPS_Z(m.Offset(64*v), k, zmm(28))
				vcvtneps2bf16(28, 28)
				VMOVDQU64(ymm(28), pLoc.Offset(r*2*natAccumKeys+32*v))
			}
		}
	}

	ldv := loadStride("ldv", 2)
	pf := GP64() // prefetch distance: the next block
	MOVQ(ldv, pf)
	SHLQ(Imm(6), pf)
	oc := Load(Param("o").Base(), GP64()).(GPVirtual)
	vc := ldMem(vBlk)
	cc := Load(Param("d"), GP64()).(GPVirtual)
	SHRQ(Imm(5), cc)
	Label("chunk")
	for i := 0; i < 2*rows; i++ {
		VPXORD(zmm(i), zmm(i), zmm(i))
	}
	{
		va, vb, pp := GP64(), GP64(), GP64()
		MOVQ(vc, va)
		LEAQ(Mem{Base: vc, Index: ldv, Scale: 1}, vb)
		LEAQ(pLoc, pp)
		pairs := GP64()
		MOVQ(jn, pairs)
		SHRQ(Imm(1), pairs)
		JZ(LabelRef("odd"))
		Label("pair")
		VMOVDQU64(Mem{Base: va}, zmm(16))
		VMOVDQU64(Mem{Base: vb}, zmm(17))
		PREFETCHT1(Mem{Base: va, Index: pf, Scale: 1})
		PREFETCHT1(Mem{Base: vb, Index: pf, Scale: 1})
		natPairStep(pp, rows)
		ADDQ(ldv, va)
		ADDQ(ldv, va)
		ADDQ(ldv, vb)
		ADDQ(ldv, vb)
		ADDQ(Imm(4), pp)
		DECQ(pairs)
		JNZ(LabelRef("pair"))

		Label("odd")
		TESTQ(U32(1), jn)
		JZ(LabelRef("store"))
		VMOVDQU64(Mem{Base: va}, zmm(16))
		VPXORD(zmm(17), zmm(17), zmm(17))
		natPairStep(pp, rows)
	}

	Label("store")
	{
		ldo := loadStride("ldo", 4)
		row := rowMems(oc, ldo)
		tab := GP64()
		LEAQ(natPerm, tab)
		for r := 0; r < rows; r++ {
			m := row(r)
			for h := 0; h < 2; h++ {
				x := zmm(28 + h)
				VMOVUPS(Mem{Base: tab, Disp: 64 * h}, x)
				VPERMI2PS(zmm(2*r+1), zmm(2*r), x)
				VADDPS(m.Offset(64*h), x, x)
				VMOVUPS(x, m.Offset(64*h))
			}
		}
	}
	ADDQ(U32(128), oc)
	ADDQ(Imm(64), vc)
	DECQ(cc)
	JNZ(LabelRef("chunk"))

	{
		t := ldMem(pBlk)
		ADDQ(U32(4*natAccumKeys), t)
		MOVQ(t, pBlk)
		v := ldMem(vBlk)
		ldv := loadStride("ldv", 2)
		SHLQ(Imm(6), ldv)
		ADDQ(ldv, v)
		MOVQ(v, vBlk)
		n := ldMem(nLeft)
		SUBQ(jn, n)
		MOVQ(n, nLeft)
		JMP(LabelRef("block"))
	}

	Label("done")
	VZEROUPPER()
	RET()
}

// natPairStep emits one pair of keys of an accum chunk: V's rows in Z16
// and Z17 interleaved into Z18 (low) and Z19 (high), each row's P pair
// (at pp+128r) broadcast and multiplied into its two accumulators.
func natPairStep(pp Register, rows int) {
	VPUNPCKLWD(zmm(17), zmm(16), zmm(18))
	VPUNPCKHWD(zmm(17), zmm(16), zmm(19))
	for r := 0; r < rows; r++ {
		b := 20 + r
		VPBROADCASTD(Mem{Base: pp, Disp: r * 2 * natAccumKeys}, zmm(b))
		vdpbf16ps(2*r, 18, b)
		vdpbf16ps(2*r+1, 19, b)
	}
}
