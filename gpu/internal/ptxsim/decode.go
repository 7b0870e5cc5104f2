package ptxsim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// val reads an operand's bits.
type val func(c *cta, t *thread) uint64

func f32(x uint64) float32 { return math.Float32frombits(uint32(x)) }
func fb(x float32) uint64  { return uint64(math.Float32bits(x)) }

// ftz flushes a subnormal to a zero of the same sign.
func ftz(x float32) float32 {
	if x != 0 && math.Abs(float64(x)) < math.SmallestNonzeroFloat32*(1<<23) {
		return float32(math.Copysign(0, float64(x)))
	}
	return x
}

func (k *Kernel) val(s string) (val, error) {
	switch s {
	case "%tid.x":
		return func(c *cta, t *thread) uint64 { return uint64(t.tid) }, nil
	case "%ntid.x":
		return func(c *cta, t *thread) uint64 { return uint64(c.ntid) }, nil
	case "%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z":
		i := int(s[len(s)-1] - 'x')
		if strings.HasPrefix(s, "%n") {
			return func(c *cta, t *thread) uint64 { return uint64(c.nctaid[i]) }, nil
		}
		return func(c *cta, t *thread) uint64 { return uint64(c.ctaid[i]) }, nil
	case "smem":
		return func(c *cta, t *thread) uint64 { return 0 }, nil
	}
	if strings.HasPrefix(s, "0f") {
		b, err := strconv.ParseUint(s[2:], 16, 32)
		if err != nil {
			return nil, err
		}
		return func(c *cta, t *thread) uint64 { return b }, nil
	}
	if strings.HasPrefix(s, "%") {
		r, err := k.reg(s)
		if err != nil {
			return nil, err
		}
		return func(c *cta, t *thread) uint64 { return t.r[r] }, nil
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return nil, fmt.Errorf("bad operand %q", s)
	}
	u := uint64(n)
	return func(c *cta, t *thread) uint64 { return u }, nil
}

// pred reads a predicate operand that may be negated (!%p1).
func (k *Kernel) pred(s string) (val, error) {
	neg := strings.HasPrefix(s, "!")
	r, err := k.reg(strings.TrimPrefix(s, "!"))
	if err != nil {
		return nil, err
	}
	return func(c *cta, t *thread) uint64 {
		if (t.r[r] != 0) != neg {
			return 1
		}
		return 0
	}, nil
}

// vec parses {%r1, %r2, ...} into register slots.
func (k *Kernel) vec(s string, n int) ([]int, error) {
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return nil, fmt.Errorf("want a vector, got %q", s)
	}
	parts := splitOperands(s[1 : len(s)-1])
	if len(parts) != n {
		return nil, fmt.Errorf("vector %q has %d elements, want %d", s, len(parts), n)
	}
	out := make([]int, n)
	for i, p := range parts {
		r, err := k.reg(p)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// addr parses [base+off] with a register base.
func (k *Kernel) addr(s string) (val, error) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, fmt.Errorf("want an address, got %q", s)
	}
	s = s[1 : len(s)-1]
	var off int64
	if i := strings.IndexByte(s, '+'); i >= 0 {
		var err error
		if off, err = strconv.ParseInt(s[i+1:], 0, 64); err != nil {
			return nil, err
		}
		s = s[:i]
	}
	r, err := k.reg(s)
	if err != nil {
		return nil, err
	}
	return func(c *cta, t *thread) uint64 { return t.r[r] + uint64(off) }, nil
}

// decode compiles one instruction (text without its semicolon): its
// guard predicate, then the decoder of its opcode family.
func (k *Kernel) decode(text string) (*inst, error) {
	in, text, err := k.decodeGuard(text)
	if err != nil {
		return nil, err
	}
	op, rest := text, ""
	if sp := strings.IndexAny(text, " \t"); sp >= 0 {
		op, rest = text[:sp], strings.TrimSpace(text[sp+1:])
	}
	if op == "" {
		return nil, errors.New("no instruction")
	}
	in.op = op
	return k.decodeOp(in, op, strings.Split(op, "."), splitOperands(rest))
}

// decodeGuard strips a leading "@%p " or "@!%p " from text and records
// the predicate in a new instruction.
func (k *Kernel) decodeGuard(text string) (*inst, string, error) {
	in := &inst{guard: -1}
	if !strings.HasPrefix(text, "@") {
		return in, text, nil
	}
	sp := strings.IndexByte(text, ' ')
	if sp < 0 {
		return nil, "", errors.New("no instruction after the guard")
	}
	g := text[1:sp]
	if strings.HasPrefix(g, "!") {
		in.neg, g = true, g[1:]
	}
	r, err := k.reg(g)
	if err != nil {
		return nil, "", err
	}
	in.guard = r
	return in, strings.TrimSpace(text[sp+1:]), nil
}

// decodeOp dispatches on the opcode: op is the whole opcode ("add.u32"),
// parts its dot-separated pieces and ops the operands.
func (k *Kernel) decodeOp(in *inst, op string, parts, ops []string) (*inst, error) {
	switch parts[0] {
	case "bra", "ret", "bar":
		return k.decodeControl(in, op, parts[0], ops)
	case "mov":
		return k.decodeMov(in, op, parts, ops)
	case "ld":
		return k.decodeLoad(in, parts, ops)
	case "st", "red":
		return k.decodeStore(in, parts, ops)
	case "cp":
		return k.decodeCpAsync(in, op, ops)
	case "setp":
		return k.decodeSetp(in, parts, ops)
	case "selp":
		return k.decodeSelp(in, op, ops)
	case "cvt", "cvta":
		return k.decodeCvt(in, op, ops)
	case "mma":
		return k.decodeMma(in, parts, ops)
	case "ldmatrix":
		return k.decodeLdmatrix(in, parts, ops)
	case "shfl":
		return k.decodeShfl(in, op, ops)
	case "vote":
		return k.decodeVote(in, op, ops)
	}
	switch parts[len(parts)-1] {
	case "pred":
		return k.decodePredLogic(in, op, parts, ops)
	case "f32":
		return k.decodeFloat(in, parts, ops)
	}
	return k.decodeInt(in, op, ops)
}

// needOperands reports an instruction with another operand count than n.
func needOperands(op string, ops []string, n int) error {
	if len(ops) != n {
		return fmt.Errorf("%s takes %d operands, has %d", op, n, len(ops))
	}
	return nil
}

// decodeControl decodes the control-flow instructions of family bra, ret
// or bar (bar.sync 0 and bar.warp.sync -1 only).
func (k *Kernel) decodeControl(in *inst, op, family string, ops []string) (*inst, error) {
	switch {
	case family == "bra":
		if err := needOperands(op, ops, 1); err != nil {
			return nil, err
		}
		target, ok := k.labels[ops[0]]
		if !ok {
			return nil, fmt.Errorf("unknown label %q", ops[0])
		}
		in.kind, in.target, in.uni = kBranch, target, op == "bra.uni"
	case family == "ret":
		in.kind = kRet
	case op == "bar.warp.sync" && len(ops) == 1 && ops[0] == "-1":
		// Orders the warp's shared-memory accesses; the interpreter runs
		// a warp's lanes in lockstep, so it only checks that the whole
		// warp is there.
		in.warp = func(c *cta, lanes []*thread) error { return nil }
	case op == "bar.sync" && len(ops) == 1 && ops[0] == "0":
		in.kind = kBarrier
	default:
		return nil, errors.New("only bar.sync 0 and bar.warp.sync -1 are supported")
	}
	return in, nil
}

// decodeMov decodes mov: a register or immediate copy (32 bits, or 64 for
// .u64/.b64), or mov.b32 {%h0, %h1}, %r, which unpacks two 16-bit halves.
func (k *Kernel) decodeMov(in *inst, op string, parts, ops []string) (*inst, error) {
	if err := needOperands(op, ops, 2); err != nil {
		return nil, err
	}
	a, err := k.val(ops[1])
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(ops[0], "{") {
		ds, err := k.vec(ops[0], 2)
		if err != nil {
			return nil, err
		}
		in.exec = func(c *cta, t *thread) error {
			x := a(c, t)
			t.r[ds[0]], t.r[ds[1]] = x&0xffff, x>>16&0xffff
			return nil
		}
		return in, nil
	}
	d, err := k.reg(ops[0])
	if err != nil {
		return nil, err
	}
	mask := uint64(math.MaxUint32)
	if typ := parts[len(parts)-1]; typ == "u64" || typ == "b64" {
		mask = math.MaxUint64
	}
	in.exec = func(c *cta, t *thread) error { t.r[d] = a(c, t) & mask; return nil }
	return in, nil
}

// decodeSelp decodes selp d, a, b, p: d = p ? a : b.
func (k *Kernel) decodeSelp(in *inst, op string, ops []string) (*inst, error) {
	if err := needOperands(op, ops, 4); err != nil {
		return nil, err
	}
	d, vs, err := k.dstSrcs(op, ops[:3])
	if err != nil {
		return nil, err
	}
	p, err := k.pred(ops[3])
	if err != nil {
		return nil, err
	}
	a, b := vs[0], vs[1]
	in.exec = func(c *cta, t *thread) error {
		if p(c, t) != 0 {
			t.r[d] = a(c, t)
		} else {
			t.r[d] = b(c, t)
		}
		return nil
	}
	return in, nil
}

// decodePredLogic decodes and.pred and or.pred d, a, b (either source may
// be negated).
func (k *Kernel) decodePredLogic(in *inst, op string, parts, ops []string) (*inst, error) {
	if err := needOperands(op, ops, 3); err != nil {
		return nil, err
	}
	d, err := k.reg(ops[0])
	if err != nil {
		return nil, err
	}
	a, e1 := k.pred(ops[1])
	b, e2 := k.pred(ops[2])
	if err := errors.Join(e1, e2); err != nil {
		return nil, err
	}
	switch parts[0] {
	case "and":
		in.exec = func(c *cta, t *thread) error { t.r[d] = a(c, t) & b(c, t); return nil }
	case "or":
		in.exec = func(c *cta, t *thread) error { t.r[d] = a(c, t) | b(c, t); return nil }
	default:
		return nil, fmt.Errorf("unsupported instruction %s", op)
	}
	return in, nil
}

// dstSrcs decodes the operands "d, a, b, ..." of op: d's register slot and
// the sources.
func (k *Kernel) dstSrcs(op string, ops []string) (int, []val, error) {
	if len(ops) < 2 {
		return 0, nil, fmt.Errorf("%s: too few operands", op)
	}
	d, err := k.reg(ops[0])
	if err != nil {
		return 0, nil, err
	}
	vs := make([]val, len(ops)-1)
	for i, s := range ops[1:] {
		if vs[i], err = k.val(s); err != nil {
			return 0, nil, err
		}
	}
	return d, vs, nil
}

// int32Ops are the two-source integer instructions on 32-bit values: the
// result's upper 32 bits are zero.
var int32Ops = map[string]func(a, b uint32) (uint32, error){
	"add.u32":    func(a, b uint32) (uint32, error) { return a + b, nil },
	"add.s32":    func(a, b uint32) (uint32, error) { return a + b, nil },
	"sub.u32":    func(a, b uint32) (uint32, error) { return a - b, nil },
	"sub.s32":    func(a, b uint32) (uint32, error) { return a - b, nil },
	"mul.lo.u32": func(a, b uint32) (uint32, error) { return a * b, nil },
	"and.b32":    func(a, b uint32) (uint32, error) { return a & b, nil },
	"or.b32":     func(a, b uint32) (uint32, error) { return a | b, nil },
	"xor.b32":    func(a, b uint32) (uint32, error) { return a ^ b, nil },
	"shl.b32":    func(a, b uint32) (uint32, error) { return shift32(a, b, true), nil },
	"shr.u32":    func(a, b uint32) (uint32, error) { return shift32(a, b, false), nil },
	"min.s32":    func(a, b uint32) (uint32, error) { return uint32(min(int32(a), int32(b))), nil },
	"max.s32":    func(a, b uint32) (uint32, error) { return uint32(max(int32(a), int32(b))), nil },
	"min.u32":    func(a, b uint32) (uint32, error) { return min(a, b), nil },
	"div.u32":    func(a, b uint32) (uint32, error) { return divRem(a, b, false) },
	"rem.u32":    func(a, b uint32) (uint32, error) { return divRem(a, b, true) },
}

// shift32 shifts a left (or right, logically) by b bits; 32 or more give 0.
func shift32(a, b uint32, left bool) uint32 {
	switch {
	case b >= 32:
		return 0
	case left:
		return a << b
	}
	return a >> b
}

// divRem returns a / b, or a % b with rem; division by zero is an error.
func divRem(a, b uint32, rem bool) (uint32, error) {
	switch {
	case b == 0:
		return 0, errors.New("integer division by zero")
	case rem:
		return a % b, nil
	}
	return a / b, nil
}

// int64Ops are the two-source integer instructions with a 64-bit result.
var int64Ops = map[string]func(a, b uint64) uint64{
	"add.s64":      func(a, b uint64) uint64 { return a + b },
	"sub.s64":      func(a, b uint64) uint64 { return a - b },
	"mul.lo.u64":   func(a, b uint64) uint64 { return a * b },
	"mul.wide.u32": func(a, b uint64) uint64 { return uint64(uint32(a)) * uint64(uint32(b)) },
	"shl.b64": func(a, b uint64) uint64 {
		if s := b & 0xffffffff; s < 64 {
			return a << s
		}
		return 0
	},
}

// madOps are the three-source multiply-adds: d = a·b + c.
var madOps = map[string]func(a, b, c uint64) uint64{
	"mad.lo.u32":   func(a, b, c uint64) uint64 { return uint64(uint32(a)*uint32(b) + uint32(c)) },
	"mad.wide.u32": func(a, b, c uint64) uint64 { return uint64(uint32(a))*uint64(uint32(b)) + c },
}

// decodeInt decodes the integer arithmetic of int32Ops, int64Ops and
// madOps.
func (k *Kernel) decodeInt(in *inst, op string, ops []string) (*inst, error) {
	d, vs, err := k.dstSrcs(op, ops)
	if err != nil {
		return nil, err
	}
	f32, ok32 := int32Ops[op]
	f64, ok64 := int64Ops[op]
	fmad, okMad := madOps[op]
	switch {
	case (ok32 || ok64) && len(vs) != 2:
		return nil, fmt.Errorf("%s takes 3 operands", op)
	case okMad && len(vs) != 3:
		return nil, fmt.Errorf("%s takes 4 operands", op)
	case ok32:
		a, b := vs[0], vs[1]
		in.exec = func(c *cta, t *thread) error {
			r, err := f32(uint32(a(c, t)), uint32(b(c, t)))
			t.r[d] = uint64(r)
			return err
		}
	case ok64:
		a, b := vs[0], vs[1]
		in.exec = func(c *cta, t *thread) error { t.r[d] = f64(a(c, t), b(c, t)); return nil }
	case okMad:
		a, b, cc := vs[0], vs[1], vs[2]
		in.exec = func(c *cta, t *thread) error { t.r[d] = fmad(a(c, t), b(c, t), cc(c, t)); return nil }
	default:
		return nil, fmt.Errorf("unsupported instruction %s", op)
	}
	return in, nil
}

func (k *Kernel) decodeFloat(in *inst, parts, ops []string) (*inst, error) {
	op := strings.Join(parts, ".")
	d, vs, err := k.dstSrcs(op, ops)
	if err != nil {
		return nil, err
	}
	one := func(f func(a float32) float32) (*inst, error) {
		if len(vs) != 1 {
			return nil, fmt.Errorf("%s takes 2 operands", op)
		}
		a := vs[0]
		in.exec = func(c *cta, t *thread) error { t.r[d] = fb(f(f32(a(c, t)))); return nil }
		return in, nil
	}
	two := func(f func(a, b float32) float32) (*inst, error) {
		if len(vs) != 2 {
			return nil, fmt.Errorf("%s takes 3 operands", op)
		}
		a, b := vs[0], vs[1]
		in.exec = func(c *cta, t *thread) error { t.r[d] = fb(f(f32(a(c, t)), f32(b(c, t)))); return nil }
		return in, nil
	}
	switch op {
	case "add.f32":
		return two(func(a, b float32) float32 { return a + b })
	case "sub.f32":
		return two(func(a, b float32) float32 { return a - b })
	case "mul.f32":
		return two(func(a, b float32) float32 { return a * b })
	case "max.f32":
		return two(func(a, b float32) float32 {
			switch {
			case a != a:
				return b
			case b != b:
				return a
			}
			return max(a, b)
		})
	case "neg.f32":
		return one(func(a float32) float32 { return -a })
	case "ex2.approx.ftz.f32":
		return one(func(a float32) float32 { return ftz(float32(math.Exp2(float64(ftz(a))))) })
	case "lg2.approx.ftz.f32":
		return one(func(a float32) float32 { return float32(math.Log2(float64(ftz(a)))) })
	case "rcp.approx.ftz.f32":
		return one(func(a float32) float32 { return ftz(float32(1 / float64(ftz(a)))) })
	case "rcp.rn.f32":
		return one(func(a float32) float32 { return float32(1 / float64(a)) })
	case "fma.rn.f32":
		if len(vs) != 3 {
			return nil, errors.New("fma takes 4 operands")
		}
		a, b, cc := vs[0], vs[1], vs[2]
		in.exec = func(c *cta, t *thread) error {
			t.r[d] = fb(float32(math.FMA(float64(f32(a(c, t))), float64(f32(b(c, t))), float64(f32(cc(c, t))))))
			return nil
		}
		return in, nil
	}
	return nil, fmt.Errorf("unsupported instruction %s", op)
}

// decodeSetp decodes setp.cmp[.bool].type p, a, b[, c]: p = a cmp b,
// combined with predicate c by and/or when .bool is there.
func (k *Kernel) decodeSetp(in *inst, parts, ops []string) (*inst, error) {
	if len(parts) < 3 {
		return nil, errors.New("bad setp")
	}
	cmp, typ := parts[1], parts[len(parts)-1]
	boolOp := ""
	if len(parts) == 4 {
		boolOp = parts[2]
	}
	if (boolOp == "") != (len(ops) == 3) || len(ops) < 3 {
		return nil, errors.New("setp operands do not match its form")
	}
	if boolOp != "" && boolOp != "and" && boolOp != "or" {
		return nil, fmt.Errorf("unsupported setp combiner %s", boolOp)
	}
	d, vs, err := k.dstSrcs("setp", ops[:3])
	if err != nil {
		return nil, err
	}
	var cv val
	if boolOp != "" {
		if cv, err = k.pred(ops[3]); err != nil {
			return nil, err
		}
	}
	test := setpTest(cmp, typ)
	if test == nil {
		return nil, fmt.Errorf("unsupported setp %s.%s", cmp, typ)
	}
	a, b := vs[0], vs[1]
	in.exec = func(c *cta, t *thread) error {
		r := test(a(c, t), b(c, t))
		switch boolOp {
		case "and":
			r = r && cv(c, t) != 0
		case "or":
			r = r || cv(c, t) != 0
		}
		t.r[d] = 0
		if r {
			t.r[d] = 1
		}
		return nil
	}
	return in, nil
}

// setpTest returns the comparison cmp (eq, ne, lt, le, gt, ge) of two
// operands of type typ (u32, s32, u64 or f32), or nil if unsupported.
func setpTest(cmp, typ string) func(x, y uint64) bool {
	if typ == "f32" {
		f := floatCompares[cmp]
		if f == nil {
			return nil
		}
		return func(x, y uint64) bool { return f(f32(x), f32(y)) }
	}
	less := func(x, y uint64) bool { return uint32(x) < uint32(y) }
	eq := func(x, y uint64) bool { return uint32(x) == uint32(y) }
	switch typ {
	case "u32":
	case "s32":
		less = func(x, y uint64) bool { return int32(x) < int32(y) }
	case "u64":
		less = func(x, y uint64) bool { return x < y }
		eq = func(x, y uint64) bool { return x == y }
	default:
		return nil
	}
	switch cmp {
	case "eq":
		return eq
	case "ne":
		return func(x, y uint64) bool { return !eq(x, y) }
	case "lt":
		return less
	case "le":
		return func(x, y uint64) bool { return !less(y, x) }
	case "gt":
		return func(x, y uint64) bool { return less(y, x) }
	case "ge":
		return func(x, y uint64) bool { return !less(x, y) }
	}
	return nil
}

// floatCompares are setp's ordered .f32 comparisons (false with a NaN).
var floatCompares = map[string]func(x, y float32) bool{
	"eq": func(x, y float32) bool { return x == y },
	"ne": func(x, y float32) bool { return x != y && x == x && y == y },
	"lt": func(x, y float32) bool { return x < y },
	"le": func(x, y float32) bool { return x <= y },
	"gt": func(x, y float32) bool { return x > y },
	"ge": func(x, y float32) bool { return x >= y },
}

func (k *Kernel) decodeCvt(in *inst, op string, ops []string) (*inst, error) {
	d, vs, err := k.dstSrcs(op, ops)
	if err != nil {
		return nil, err
	}
	a := vs[0]
	switch op {
	case "cvt.u64.u32":
		in.exec = func(c *cta, t *thread) error { t.r[d] = uint64(uint32(a(c, t))); return nil }
	case "cvta.to.global.u64":
		in.exec = func(c *cta, t *thread) error { t.r[d] = a(c, t); return nil }
	case "cvt.f32.f16":
		in.exec = func(c *cta, t *thread) error { t.r[d] = fb(f16ToF32(uint16(a(c, t)))); return nil }
	case "cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32":
		if len(vs) != 2 {
			return nil, errors.New("cvt x2 takes 3 operands")
		}
		b := vs[1]
		conv := roundBF16
		if op == "cvt.rn.f16x2.f32" {
			conv = roundF16
		}
		in.exec = func(c *cta, t *thread) error {
			t.r[d] = uint64(conv(f32(a(c, t))))<<16 | uint64(conv(f32(b(c, t))))
			return nil
		}
	default:
		return nil, fmt.Errorf("unsupported %s", op)
	}
	return in, nil
}

func (k *Kernel) decodeLoad(in *inst, parts, ops []string) (*inst, error) {
	if len(ops) != 2 {
		return nil, errors.New("ld takes 2 operands")
	}
	space := parts[1]
	if space == "param" {
		name := strings.Trim(ops[1], "[]")
		d, err := k.reg(ops[0])
		if err != nil {
			return nil, err
		}
		for _, p := range k.params {
			if p.name == name {
				off, size := p.off, p.size
				in.exec = func(c *cta, t *thread) error {
					if size == 4 {
						t.r[d] = uint64(binary.LittleEndian.Uint32(c.params[off:]))
					} else {
						t.r[d] = binary.LittleEndian.Uint64(c.params[off:])
					}
					return nil
				}
				return in, nil
			}
		}
		return nil, fmt.Errorf("unknown parameter %q", name)
	}
	a, err := k.addr(ops[1])
	if err != nil {
		return nil, err
	}
	vector := parts[2] == "v2" || parts[2] == "v4"
	var ds []int
	if vector {
		if ds, err = k.vec(ops[0], int(parts[2][1]-'0')); err != nil {
			return nil, err
		}
	} else {
		d, err := k.reg(ops[0])
		if err != nil {
			return nil, err
		}
		ds = []int{d}
	}
	switch space {
	case "global":
		in.exec = func(c *cta, t *thread) error {
			p := a(c, t)
			if n := uint64(4 * len(ds)); p%n != 0 {
				return fmt.Errorf("misaligned %d-byte global load at %#x", n, p)
			}
			for i, d := range ds {
				v, err := c.m.load(p+uint64(4*i), 4)
				if err != nil {
					return err
				}
				t.r[d] = v
			}
			return nil
		}
	case "shared":
		in.exec = func(c *cta, t *thread) error {
			p := a(c, t)
			if err := c.sm.read(p, 4*len(ds), t.warp, c.epoch); err != nil {
				return err
			}
			for i, d := range ds {
				t.r[d] = uint64(binary.LittleEndian.Uint32(c.sm.data[p+uint64(4*i):]))
			}
			return nil
		}
	default:
		return nil, fmt.Errorf("unsupported load space %s", space)
	}
	return in, nil
}

func (k *Kernel) decodeStore(in *inst, parts, ops []string) (*inst, error) {
	if len(ops) != 2 {
		return nil, errors.New("st takes 2 operands")
	}
	a, err := k.addr(ops[0])
	if err != nil {
		return nil, err
	}
	var vs []val
	if strings.HasPrefix(ops[1], "{") {
		for _, s := range splitOperands(ops[1][1 : len(ops[1])-1]) {
			v, err := k.val(s)
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
	} else {
		v, err := k.val(ops[1])
		if err != nil {
			return nil, err
		}
		vs = []val{v}
	}
	op := strings.Join(parts, ".")
	switch op {
	case "st.global.b32", "st.global.f32", "st.global.v2.f32", "st.global.v2.b32", "st.global.v4.b32":
		n := 4 * len(vs)
		in.exec = func(c *cta, t *thread) error {
			p := a(c, t)
			if p%uint64(n) != 0 {
				return fmt.Errorf("misaligned %d-byte global store at %#x", n, p)
			}
			for i, v := range vs {
				if err := c.m.store(p+uint64(4*i), 4, v(c, t)); err != nil {
					return err
				}
			}
			return nil
		}
	case "red.global.add.f32":
		in.exec = func(c *cta, t *thread) error {
			p := a(c, t)
			old, err := c.m.load(p, 4)
			if err != nil {
				return err
			}
			return c.m.store(p, 4, fb(f32(old)+f32(vs[0](c, t))))
		}
	case "st.shared.b32":
		in.exec = func(c *cta, t *thread) error {
			p := a(c, t)
			if err := c.sm.write(p, 4, t.warp, c.epoch); err != nil {
				return err
			}
			binary.LittleEndian.PutUint32(c.sm.data[p:], uint32(vs[0](c, t)))
			return nil
		}
	default:
		return nil, fmt.Errorf("unsupported %s", op)
	}
	return in, nil
}

func (k *Kernel) decodeCpAsync(in *inst, op string, ops []string) (*inst, error) {
	switch op {
	case "cp.async.commit_group":
		in.exec = func(c *cta, t *thread) error {
			t.groups = append(t.groups, t.pending)
			t.pending = nil
			return nil
		}
		return in, nil
	case "cp.async.wait_group":
		n, err := strconv.Atoi(ops[0])
		if err != nil {
			return nil, err
		}
		in.exec = func(c *cta, t *thread) error {
			for len(t.groups) > n {
				for _, cp := range t.groups[0] {
					c.sm.asyncDone(cp.dst, cp.data, t.warp, c.epoch)
				}
				t.groups = t.groups[1:]
			}
			return nil
		}
		return in, nil
	case "cp.async.cg.shared.global", "cp.async.ca.shared.global":
	default:
		return nil, fmt.Errorf("unsupported %s", op)
	}
	if len(ops) != 3 && len(ops) != 4 {
		return nil, errors.New("cp.async takes 3 or 4 operands here")
	}
	dst, err1 := k.addr(ops[0])
	srcA, err2 := k.addr(ops[1])
	size, err3 := strconv.Atoi(ops[2])
	var sz val
	var err4 error
	if len(ops) == 4 {
		sz, err4 = k.val(ops[3])
	} else { // no src-size: the whole cp-size is copied
		n := uint64(size)
		sz = func(c *cta, t *thread) uint64 { return n }
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	if op == "cp.async.cg.shared.global" && size != 16 || op == "cp.async.ca.shared.global" && size != 4 && size != 8 && size != 16 {
		return nil, fmt.Errorf("%s with size %d", op, size)
	}
	in.exec = func(c *cta, t *thread) error {
		d, s, n := dst(c, t), srcA(c, t), int(uint32(sz(c, t)))
		if n > size {
			return fmt.Errorf("cp.async src-size %d > %d", n, size)
		}
		if d%uint64(size) != 0 || s%uint64(size) != 0 {
			return fmt.Errorf("misaligned cp.async of %d bytes (%#x <- %#x)", size, d, s)
		}
		data := make([]byte, size)
		if n > 0 {
			b, err := c.m.span(s, n)
			if err != nil {
				return err
			}
			copy(data, b)
		}
		if err := c.sm.asyncIssue(d, size, t.warp, c.epoch); err != nil {
			return err
		}
		t.pending = append(t.pending, cpCopy{dst: d, data: data})
		return nil
	}
	return in, nil
}
