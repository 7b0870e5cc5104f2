package gpu

import (
	"fmt"
	"math"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/gpu/internal/cuda"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// problem is a validated attention call: shapes, sequence geometry and the
// kernel parameter values that do not depend on buffers.
type problem struct {
	dt                     DType
	batch, heads, kvHeads  int
	d                      int
	maxSq, maxSk           int // longest sequences (dense: Sq, Sk)
	rowsQ, rowsK           int // rows of the q and k tensors (dense: batch·Sq)
	varlen                 bool
	cuQ, cuK, usedK        []int32
	scale                  float32
	capScale, capLog2      float32
	left, right            int32
	deterministic, softcap bool
	wantSplits             int  // Options.NumSplits
	noPack                 bool // Options.NoPackGQA
}

// maxSeq bounds sequence lengths so that the kernels' 32-bit position
// arithmetic (positions, window sides up to Sq+Sk, and their ±2^30
// "unbounded" sentinels) cannot overflow.
const maxSeq = 1 << 28

// maxGrid is the largest grid y (heads) and z (batch) dimension.
const maxGrid = 65535

// ValidateShape reports whether Forward accepts a call of shape s with
// opts, without tensors or a device, and returns the *flashattn.ArgError
// the call would return, or nil. It refuses the options the GPU kernels do
// not implement (see Options) and a NumSplits outside [0, 128], then applies
// flashattn.ValidateShape — every rule of package flashattn: option
// values, H % Hk, cu_seqlens and SeqUsedK, ... — and then the limits of
// the GPU kernels: head dim 64, 128
// or 256, the same for V as for Q and K; at most 65535 heads and 65535
// sequences; fewer than 2^28 rows per sequence and 2^31-1 in all.
// Backward also needs head dim 64 or 128. What depends on the tensors
// themselves (types, buffers, devices, and v shaped like k) is checked by
// the call.
func ValidateShape(s flashattn.Shape, opts *Options) error {
	_, err := newProblem(s, opts)
	return err
}

// shape4 is a tensor's [batch, seq, heads, dim].
type shape4 [4]int

// checkQKV checks the shapes of q, k and v against each other as the call
// does (k's head dim and v's batch, seq and heads against k's) and returns
// the problem of type dt they make.
func checkQKV(dt DType, q, k, v shape4, opts *Options) (*problem, error) {
	if k[3] != q[3] {
		return nil, argErr("k", "k has head dim %d, want %d (q's); k has shape %v", k[3], q[3], k)
	}
	if v[0] != k[0] || v[1] != k[1] || v[2] != k[2] {
		return nil, argErr("v", "v has shape %v, want k's batch, seq and heads %v", v, k[:3])
	}
	s := flashattn.Shape{Batch: q[0], SeqQ: q[1], Heads: q[2], Dim: q[3], KVBatch: k[0], SeqK: k[1], KVHeads: k[2], DimV: v[3]}
	p, err := newProblem(s, opts)
	if err != nil {
		return nil, err
	}
	p.dt = dt
	return p, nil
}

// newProblem validates a call of shape s (through flashattn.ValidateShape,
// then the GPU's own limits) and returns its problem, p.dt unset.
func newProblem(s flashattn.Shape, opts *Options) (*problem, error) {
	if opts == nil {
		opts = &Options{}
	}
	if err := opts.unsupported(); err != nil {
		return nil, err
	}
	if err := opts.checkSplits(); err != nil {
		return nil, err
	}
	o := &opts.Options
	if err := flashattn.ValidateShape(s, o); err != nil {
		return nil, err
	}
	s = s.Resolved()
	if err := checkKernelShape(s); err != nil {
		return nil, err
	}
	p := &problem{d: s.Dim, heads: s.Heads, kvHeads: s.KVHeads, deterministic: opts.Deterministic, wantSplits: opts.NumSplits, noPack: opts.NoPackGQA}
	if err := p.setGeometry(s, o.VarLen); err != nil {
		return nil, err
	}
	if err := p.setScores(o, s.Dim); err != nil {
		return nil, err
	}
	p.setWindow(o)
	return p, nil
}

// checkKernelShape refuses head dims and head counts the kernels lack.
func checkKernelShape(s flashattn.Shape) error {
	switch {
	case !supportedDim(s.Dim):
		return argErr("q", "head dim %d is not supported by package gpu (64, 128 or 256)", s.Dim)
	case s.DimV != s.Dim:
		return argErr("v", "v has head dim %d, q and k %d: package gpu needs them equal", s.DimV, s.Dim)
	case s.Heads > maxGrid:
		return argErr("q", "q has %d heads; package gpu takes at most %d", s.Heads, maxGrid)
	}
	return nil
}

// setGeometry sets the batch, the longest sequences and the row counts,
// dense or from vl's cu_seqlens (checked by ValidateShape), and refuses
// what exceeds the kernels' grid and 32-bit position arithmetic.
func (p *problem) setGeometry(s flashattn.Shape, vl *flashattn.VarLen) error {
	if vl != nil {
		p.varlen = true
		p.batch = len(vl.CuSeqlensQ) - 1
		p.rowsQ, p.rowsK = s.SeqQ, s.SeqK
		p.maxSq, p.maxSk = longest(vl.CuSeqlensQ), longest(vl.CuSeqlensK)
		p.cuQ, p.cuK, p.usedK = vl.CuSeqlensQ, vl.CuSeqlensK, vl.SeqUsedK
		if p.batch > maxGrid {
			return argErr("Options.VarLen.CuSeqlensQ", "VarLen has %d sequences; package gpu takes at most %d", p.batch, maxGrid)
		}
	} else {
		p.batch, p.maxSq, p.maxSk = s.Batch, s.SeqQ, s.SeqK
		p.rowsQ, p.rowsK = s.Batch*s.SeqQ, s.Batch*s.SeqK
		if p.batch > maxGrid {
			return argErr("q", "q has batch %d; package gpu takes at most %d", p.batch, maxGrid)
		}
	}
	for _, x := range []struct {
		arg, what  string
		seq, total int
	}{{"q", "queries", p.maxSq, p.rowsQ}, {"k", "keys", p.maxSk, p.rowsK}} {
		if x.seq >= maxSeq || x.total >= math.MaxInt32 {
			return argErr(x.arg, "%s has sequences of up to %d %s, %d rows in all; package gpu takes fewer than 2^28 per sequence and 2^31-1 in all", x.arg, x.seq, x.what, x.total)
		}
	}
	return nil
}

// setScores sets the scale (default 1/sqrt(dim)) and the softcap's
// float32 constants, refusing a softcap whose constants overflow.
func (p *problem) setScores(o *flashattn.Options, dim int) error {
	p.scale = o.Scale
	if p.scale == 0 {
		p.scale = float32(1 / math.Sqrt(float64(dim)))
	}
	if o.Softcap > 0 {
		p.softcap = true
		p.capScale = p.scale / o.Softcap
		p.capLog2 = o.Softcap * tile.Log2E
		if !finite(p.capScale) || !finite(p.capLog2) {
			return argErr("Options.Softcap", "Softcap %v with scale %v overflows the GPU kernels' float32 constants", o.Softcap, p.scale)
		}
	}
	return nil
}

// setWindow sets the window sides (-1 unbounded; causal is right = 0),
// once the sequence lengths are known.
func (p *problem) setWindow(o *flashattn.Options) {
	p.left, p.right = -1, -1
	if w := o.Window; w != nil {
		p.left, p.right = int32(min(w.Left, 2*maxSeq)), int32(min(w.Right, 2*maxSeq))
	}
	if o.Causal {
		p.right = 0
	}
	// A window side at least Sq+Sk never hides a key: make it unbounded, so
	// that it stays small in the kernels' arithmetic.
	if int(p.left) >= p.maxSq+p.maxSk {
		p.left = -1
	}
	if int(p.right) >= p.maxSq+p.maxSk {
		p.right = -1
	}
}

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// validate checks device tensors q, k and v and the options and returns
// the problem. That they are on the call's device is checked by the call.
func validate(q, k, v Tensor, opts *Options) (*problem, error) {
	for _, x := range []struct {
		t    Tensor
		name string
	}{{q, "q"}, {k, "k"}, {v, "v"}} {
		if err := x.t.check(x.name); err != nil {
			return nil, err
		}
		if x.t.DType != q.DType {
			return nil, argErr(x.name, "%s is %v, q %v: package gpu needs q, k and v of one type", x.name, x.t.DType, q.DType)
		}
	}
	return checkQKV(q.DType, q.shape(), k.shape(), v.shape(), opts)
}

func supportedDim(d int) bool {
	for _, x := range tile.HeadDims {
		if d == x {
			return true
		}
	}
	return false
}

// longest returns the longest sequence of valid cu_seqlens.
func longest(cu []int32) int {
	n := 0
	for i := 1; i < len(cu); i++ {
		n = max(n, int(cu[i]-cu[i-1]))
	}
	return n
}

// checkBackward refuses head dims the backward kernels do not have.
func (p *problem) checkBackward() error {
	if tile.BwdConfig(p.d).Check() != nil {
		return argErr("q", "head dim %d: the backward pass of package gpu supports head dims 64 and 128", p.d)
	}
	return nil
}

// lseLen is the number of LSE (and dsum) elements: [batch, heads, Sq] or,
// varlen, [heads, total_q].
func (p *problem) lseLen() int {
	if p.varlen {
		return p.heads * p.rowsQ
	}
	return p.batch * p.heads * p.maxSq
}

// want returns the shape of a tensor like q (or, ofK, like k).
func (p *problem) want(ofK bool) shape4 {
	rows, seq, h := p.rowsQ, p.maxSq, p.heads
	if ofK {
		rows, seq, h = p.rowsK, p.maxSk, p.kvHeads
	}
	if p.varlen {
		return shape4{1, rows, h, p.d}
	}
	return shape4{p.batch, seq, h, p.d}
}

// likeShape checks that a tensor of shape got has q's shape (or k's).
func (p *problem) likeShape(got shape4, name string, ofK bool) error {
	if want := p.want(ofK); got != want {
		of := "q"
		if ofK {
			of = "k"
		}
		return argErr(name, "%s has shape %v, want %v (%s's)", name, got, want, of)
	}
	return nil
}

// like checks that device tensor t has q's type and shape (or k's).
func (p *problem) like(t Tensor, name string, ofK bool) error {
	if err := t.check(name); err != nil {
		return err
	}
	if t.DType != p.dt {
		return argErr(name, "%s is %v, want %v (q's)", name, t.DType, p.dt)
	}
	return p.likeShape(t.shape(), name, ofK)
}

// args is a set of named kernel arguments.
type args map[string]uint64

// list orders a against a kernel's parameters and checks that every
// parameter is set and none is unknown.
func (a args) list(ps []tile.Param) ([]cuda.Arg, error) {
	if len(a) != len(ps) {
		return nil, fmt.Errorf("gpu: internal: %d arguments for %d parameters", len(a), len(ps))
	}
	out := make([]cuda.Arg, len(ps))
	for i, p := range ps {
		v, ok := a[p.Name]
		if !ok {
			return nil, fmt.Errorf("gpu: internal: parameter %s not set", p.Name)
		}
		out[i] = cuda.Arg{Bits: v, Size: p.Size()}
	}
	return out, nil
}

func f32(x float32) uint64 { return uint64(math.Float32bits(x)) }
func s32(x int32) uint64   { return uint64(uint32(x)) }

// seqArgs sets the sequence-geometry and score parameters shared by the
// attention kernels; cu is the device address of [cuQ, cuK, usedK] (0 if
// dense).
func (p *problem) seqArgs(a args, cu uint64) {
	a["cu_q"], a["cu_k"], a["used_k"] = 0, 0, 0
	if p.varlen {
		n := uint64(4 * (p.batch + 1))
		a["cu_q"], a["cu_k"] = cu, cu+n
		if p.usedK != nil {
			a["used_k"] = cu + 2*n
		}
	}
	a["sq"], a["sk"] = uint64(p.maxSq), uint64(p.maxSk)
	a["scale_log2"] = f32(p.scale * tile.Log2E)
	a["cap_scale"], a["cap_log2"] = f32(p.capScale), f32(p.capLog2)
	a["left"], a["right"] = s32(p.left), s32(p.right)
	a["group"] = uint64(p.heads / p.kvHeads)
}

// rowStrides returns the batch and row strides (elements) of a tensor with
// h heads and seq rows per batch element (p.maxSq for q-like tensors,
// p.maxSk for k-like ones); a packed varlen tensor has batch stride 0.
func (p *problem) rowStrides(h, seq int) (bs, rs uint64) {
	rs = uint64(h * p.d)
	if !p.varlen {
		bs = uint64(seq) * rs
	}
	return bs, rs
}

// lseStrides returns the batch and head strides (elements) of LSE and dsum.
func (p *problem) lseStrides() (bs, hs uint64) {
	if p.varlen {
		return 0, uint64(p.rowsQ)
	}
	return uint64(p.heads * p.maxSq), uint64(p.maxSq)
}

// fwdArgs returns the forward kernel's arguments.
func (p *problem) fwdArgs(q, k, v, o, lse, cu uint64) args {
	a := args{"q": q, "k": k, "v": v, "o": o, "lse": lse}
	a["q_bs"], a["q_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["o_bs"], a["o_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["k_bs"], a["k_rs"] = p.rowStrides(p.kvHeads, p.maxSk)
	a["lse_bs"], a["lse_hs"] = p.lseStrides()
	p.packArgs(a)
	p.seqArgs(a, cu)
	return a
}

// bwdArgs returns the dK/dV kernel's arguments (dqAcc 0 for the variant
// without dQ); dk and dv are float32 per query head.
func (p *problem) bwdArgs(q, k, v, do, lse, dsum, dqAcc, dk, dv, cu uint64) args {
	a := args{"q": q, "k": k, "v": v, "do": do, "lse": lse, "dsum": dsum, "dq_acc": dqAcc, "dk": dk, "dv": dv}
	a["q_bs"], a["q_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["k_bs"], a["k_rs"] = p.rowStrides(p.kvHeads, p.maxSk)
	a["dq_bs"], _ = p.dqAcc(tile.BwdConfig(p.d))
	a["dq_rs"] = uint64(p.heads * p.d)
	a["dkv_bs"], a["dkv_rs"] = p.rowStrides(p.heads, p.maxSk)
	a["lse_bs"], a["lse_hs"] = p.lseStrides()
	a["scale"] = f32(p.scale)
	p.seqArgs(a, cu)
	return a
}

// dqAcc returns the batch stride (elements) and the number of rows of the
// padded float32 dQ accumulator (tile.Bwd.PadRows): a dense batch gives
// each sequence its rows rounded up to whole query blocks, a varlen batch
// puts sequence b's rows at cu_seqlens_q[b] + b·Br.
func (p *problem) dqAcc(c tile.Bwd) (bs uint64, rows int) {
	rs := p.heads * p.d
	if p.varlen {
		return uint64(c.Br * rs), p.rowsQ + p.batch*c.Br
	}
	pad := c.PadRows(p.maxSq)
	return uint64(pad * rs), p.batch * pad
}

// convertDQArgs returns the arguments of the kernel that converts the
// padded dQ accumulator at acc into dq.
func (p *problem) convertDQArgs(c tile.Bwd, acc, dq, cu uint64) args {
	a := args{"in": acc, "out": dq, "cu_q": 0, "sq": uint64(p.maxSq), "width": uint64(p.heads * p.d)}
	if p.varlen {
		a["cu_q"], a["in_bs"], a["out_bs"] = cu, uint64(c.Br), 0
	} else {
		a["in_bs"], a["out_bs"] = uint64(c.PadRows(p.maxSq)), uint64(p.maxSq)
	}
	return a
}

// dqArgs returns the deterministic dQ kernel's arguments.
func (p *problem) dqArgs(q, k, v, do, lse, dsum, dq, cu uint64) args {
	a := args{"q": q, "k": k, "v": v, "do": do, "lse": lse, "dsum": dsum, "dq": dq}
	a["q_bs"], a["q_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["k_bs"], a["k_rs"] = p.rowStrides(p.kvHeads, p.maxSk)
	a["lse_bs"], a["lse_hs"] = p.lseStrides()
	a["scale"] = f32(p.scale)
	p.seqArgs(a, cu)
	return a
}

// preArgs returns the preprocessing kernel's arguments.
func (p *problem) preArgs(o, do, dsum, cu uint64) args {
	a := args{"o": o, "do": do, "dsum": dsum, "d": uint64(p.d), "sq": uint64(p.maxSq), "cu_q": 0}
	if p.varlen {
		a["cu_q"] = cu
	}
	a["q_bs"], a["q_rs"] = p.rowStrides(p.heads, p.maxSq)
	a["lse_bs"], a["lse_hs"] = p.lseStrides()
	return a
}

// convertArgs returns the conversion kernel's arguments: rows of heads·d
// outputs summed over group input heads each.
func convertArgs(in, out uint64, rows, heads, group, d int) args {
	return args{"in": in, "out": out, "rows": uint64(rows), "heads": uint64(heads), "group": uint64(group), "d": uint64(d)}
}

// cuInts returns cuQ, cuK and usedK as one slice (the layout seqArgs expects).
func (p *problem) cuInts() []int32 {
	out := append(append([]int32(nil), p.cuQ...), p.cuK...)
	return append(out, p.usedK...)
}
