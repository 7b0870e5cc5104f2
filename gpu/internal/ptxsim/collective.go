package ptxsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

func (k *Kernel) decodeMma(in *inst, parts, ops []string) (*inst, error) {
	if len(parts) != 10 || parts[3] != "m16n8k16" || parts[4] != "row" || parts[5] != "col" || parts[6] != "f32" || parts[9] != "f32" || parts[7] != parts[8] {
		return nil, errors.New("only mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{same}.f32 is supported")
	}
	dec := bf16ToF32
	if parts[7] == "f16" {
		dec = f16ToF32
	} else if parts[7] != "bf16" {
		return nil, fmt.Errorf("unsupported mma type %s", parts[7])
	}
	if len(ops) != 4 {
		return nil, errors.New("mma takes 4 operands")
	}
	ds, e1 := k.vec(ops[0], 4)
	as, e2 := k.vec(ops[1], 4)
	bs, e3 := k.vec(ops[2], 2)
	cs, e4 := k.vec(ops[3], 4)
	if err := errors.Join(e1, e2, e3, e4); err != nil {
		return nil, err
	}
	in.warp = func(c *cta, lanes []*thread) error {
		var A [16][16]float64
		var B [16][8]float64
		var C [16][8]float64
		for l, t := range lanes {
			for r := 0; r < 4; r++ {
				x := t.r[as[r]]
				for h := 0; h < 2; h++ {
					i, j := tile.MmaA(l, r, h)
					A[i][j] = float64(dec(uint16(x >> (16 * h))))
				}
			}
			for r := 0; r < 2; r++ {
				x := t.r[bs[r]]
				for h := 0; h < 2; h++ {
					kk, n := tile.MmaB(l, r, h)
					B[kk][n] = float64(dec(uint16(x >> (16 * h))))
				}
			}
			for i := 0; i < 4; i++ {
				row, col := tile.MmaC(l, i)
				C[row][col] = float64(f32(t.r[cs[i]]))
			}
		}
		for l, t := range lanes {
			for i := 0; i < 4; i++ {
				row, col := tile.MmaC(l, i)
				s := C[row][col]
				for kk := 0; kk < 16; kk++ {
					s += A[row][kk] * B[kk][col]
				}
				t.r[ds[i]] = fb(float32(s))
			}
		}
		return nil
	}
	return in, nil
}

func (k *Kernel) decodeLdmatrix(in *inst, parts, ops []string) (*inst, error) {
	trans := false
	switch len(parts) {
	case 7: // ldmatrix.sync.aligned.m8n8.x4.shared.b16
	case 8:
		trans = parts[5] == "trans"
	}
	if parts[3] != "m8n8" || parts[4] != "x4" || parts[len(parts)-1] != "b16" || parts[len(parts)-2] != "shared" || (len(parts) == 8 && !trans) {
		return nil, errors.New("only ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 is supported")
	}
	if len(ops) != 2 {
		return nil, errors.New("ldmatrix takes 2 operands")
	}
	ds, err := k.vec(ops[0], 4)
	if err != nil {
		return nil, err
	}
	a, err := k.addr(ops[1])
	if err != nil {
		return nil, err
	}
	in.warp = func(c *cta, lanes []*thread) error {
		var rows [32]uint64
		for l, t := range lanes {
			rows[l] = a(c, t)
			if err := c.sm.read(rows[l], 16, t.warp, c.epoch); err != nil {
				return fmt.Errorf("ldmatrix row address of lane %d: %w", l, err)
			}
		}
		for l, t := range lanes {
			for m := 0; m < 4; m++ {
				var v uint64
				for h := 0; h < 2; h++ {
					r, col := tile.LdmatrixElem(l, h, trans)
					p := rows[8*m+r] + uint64(2*col)
					v |= uint64(binary.LittleEndian.Uint16(c.sm.data[p:])) << (16 * h)
				}
				t.r[ds[m]] = v
			}
		}
		return nil
	}
	return in, nil
}

// decodeVote decodes vote.sync.all.pred d, {!}a, -1: d is true in every
// lane iff a is true in every lane of the (whole) warp.
func (k *Kernel) decodeVote(in *inst, op string, ops []string) (*inst, error) {
	if op != "vote.sync.all.pred" || len(ops) != 3 || ops[2] != "-1" {
		return nil, errors.New("only vote.sync.all.pred d, a, -1 is supported")
	}
	d, err := k.reg(ops[0])
	if err != nil {
		return nil, err
	}
	a, err := k.pred(ops[1])
	if err != nil {
		return nil, err
	}
	in.warp = func(c *cta, lanes []*thread) error {
		all := uint64(1)
		for _, t := range lanes {
			all &= a(c, t)
		}
		for _, t := range lanes {
			t.r[d] = all
		}
		return nil
	}
	return in, nil
}

func (k *Kernel) decodeShfl(in *inst, op string, ops []string) (*inst, error) {
	if op != "shfl.sync.bfly.b32" || len(ops) != 5 || ops[3] != "31" || ops[4] != "-1" {
		return nil, errors.New("only shfl.sync.bfly.b32 d, a, lanemask, 31, -1 is supported")
	}
	d, vs, err := k.dstSrcs(op, ops)
	if err != nil {
		return nil, err
	}
	a, b := vs[0], vs[1]
	in.warp = func(c *cta, lanes []*thread) error {
		var v [32]uint64
		for l, t := range lanes {
			v[l] = a(c, t)
		}
		for l, t := range lanes {
			t.r[d] = v[(l^int(b(c, t)))&31]
		}
		return nil
	}
	return in, nil
}

// Conversions, written independently of package half's (float64 rounding
// rather than bit manipulation) so that each checks the other in tests.

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func f16ToF32(h uint16) float32 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return float32(s * math.Ldexp(m, -24))
	case 31:
		if m != 0 {
			return float32(math.NaN())
		}
		return float32(s * math.Inf(1))
	}
	return float32(s * math.Ldexp(1+m/1024, e-15))
}

// roundTo rounds |x| to a binary format with mant fraction bits, minimum
// normal exponent emin (round to nearest even)
// and returns (exponent field, fraction field), or ok=false on overflow.
func roundTo(ax float64, mant, bias, emin int) (e, f uint16, ok bool) {
	if ax == 0 {
		return 0, 0, true
	}
	_, exp := math.Frexp(ax) // ax = fr·2^exp, fr in [0.5, 1)
	ex := exp - 1            // ax in [2^ex, 2^(ex+1))
	if ex < emin {
		q := math.RoundToEven(ax * math.Pow(2, float64(mant-emin)))
		return uint16(int(q) >> mant), uint16(int(q) & (1<<mant - 1)), true // q may reach the smallest normal
	}
	q := math.RoundToEven((ax/math.Pow(2, float64(ex)) - 1) * math.Pow(2, float64(mant)))
	if q == math.Pow(2, float64(mant)) {
		q, ex = 0, ex+1
	}
	if ex+bias >= 1<<(15-mant)-1 { // the all-ones exponent is Inf/NaN
		return 0, 0, false
	}
	return uint16(ex + bias), uint16(q), true
}

func roundF16(x float32) uint16  { return round16(x, 10, 15) }
func roundBF16(x float32) uint16 { return round16(x, 7, 127) }

// round16 rounds x to the 16-bit binary format with mant fraction bits and
// exponent bias bias: to nearest even, ±Inf beyond the largest finite
// value, a NaN to the canonical quiet NaN.
func round16(x float32, mant, bias int) uint16 {
	inf := uint16(1<<(15-mant)-1) << mant // all-ones exponent
	if x != x {
		return inf | 1<<(mant-1)
	}
	var s uint16
	if math.Signbit(float64(x)) {
		s = 0x8000
	}
	if math.IsInf(float64(x), 0) {
		return s | inf
	}
	e, f, ok := roundTo(math.Abs(float64(x)), mant, bias, 1-bias)
	if !ok {
		return s | inf
	}
	return s | e<<mant | f
}
