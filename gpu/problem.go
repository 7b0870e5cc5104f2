package gpu

import (
	"errors"
	"fmt"
	"math"

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
}

// maxSeq bounds sequence lengths so that the kernels' 32-bit position
// arithmetic (positions, window sides up to Sq+Sk, and their ±2^30
// "unbounded" sentinels) cannot overflow.
const maxSeq = 1 << 28

// validate checks q, k, v and the options and returns the problem.
func validate(q, k, v Tensor, opts *Options) (*problem, error) {
	if opts == nil {
		opts = &Options{}
	}
	p := &problem{dt: q.DType, d: q.Dim, heads: q.Heads, kvHeads: k.Heads, deterministic: opts.Deterministic}
	if err := q.check("q"); err != nil {
		return nil, err
	}
	if err := k.check("k"); err != nil {
		return nil, err
	}
	if err := v.check("v"); err != nil {
		return nil, err
	}
	if k.DType != q.DType || v.DType != q.DType {
		return nil, fmt.Errorf("gpu: q, k, v have types %v, %v, %v; they must match", q.DType, k.DType, v.DType)
	}
	if q.Buf.d != k.Buf.d || q.Buf.d != v.Buf.d {
		return nil, errors.New("gpu: q, k and v are on different devices")
	}
	if v.Batch != k.Batch || v.Seq != k.Seq || v.Heads != k.Heads || v.Dim != k.Dim {
		return nil, fmt.Errorf("gpu: v has shape %v, want k's %v", v.shape(), k.shape())
	}
	if k.Dim != q.Dim || k.Batch != q.Batch {
		return nil, fmt.Errorf("gpu: k has shape %v, incompatible with q %v (batch and headdim must match)", k.shape(), q.shape())
	}
	if q.Heads%k.Heads != 0 {
		return nil, fmt.Errorf("gpu: q has %d heads, not a multiple of k's %d", q.Heads, k.Heads)
	}
	if !supportedDim(q.Dim) {
		return nil, fmt.Errorf("gpu: headdim %d is not supported (64, 128 or 256)", q.Dim)
	}
	if q.Heads > 65535 || q.Batch > 65535 {
		return nil, fmt.Errorf("gpu: %d heads, batch %d: at most 65535 each", q.Heads, q.Batch)
	}
	if q.Heads*q.Dim > math.MaxInt32 {
		return nil, fmt.Errorf("gpu: heads·headdim %d too large", q.Heads*q.Dim)
	}
	// Options.
	bad := func(f float32) bool { return math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) }
	switch {
	case bad(opts.Scale) || opts.Scale < 0:
		return nil, fmt.Errorf("gpu: Scale %v must be a finite number > 0 (or 0 for 1/sqrt(headdim))", opts.Scale)
	case bad(opts.Softcap) || opts.Softcap < 0:
		return nil, fmt.Errorf("gpu: Softcap %v must be a finite number ≥ 0", opts.Softcap)
	}
	p.scale = opts.Scale
	if p.scale == 0 {
		p.scale = float32(1 / math.Sqrt(float64(q.Dim)))
	}
	if opts.Softcap > 0 {
		p.softcap = true
		p.capScale = p.scale / opts.Softcap
		p.capLog2 = opts.Softcap * tile.Log2E
		if bad(p.capScale) || bad(p.capLog2) {
			return nil, fmt.Errorf("gpu: Softcap %v with scale %v overflows", opts.Softcap, p.scale)
		}
	}
	p.left, p.right = -1, -1
	if w := opts.Window; w != nil {
		if w.Left < -1 || w.Right < -1 {
			return nil, fmt.Errorf("gpu: Window {%d, %d}: each side must be ≥ 0 or -1 (unbounded)", w.Left, w.Right)
		}
		p.left, p.right = int32(min(w.Left, 2*maxSeq)), int32(min(w.Right, 2*maxSeq))
	}
	if opts.Causal {
		p.right = 0
	}
	// Geometry.
	if vl := opts.VarLen; vl != nil {
		if q.Batch != 1 {
			return nil, fmt.Errorf("gpu: with VarLen, q must be packed [total, heads, dim] (Batch 1), has batch %d", q.Batch)
		}
		p.varlen = true
		p.rowsQ, p.rowsK = q.Seq, k.Seq
		var err error
		if p.maxSq, err = checkCu("CuSeqlensQ", vl.CuSeqlensQ, q.Seq); err != nil {
			return nil, err
		}
		if p.maxSk, err = checkCu("CuSeqlensK", vl.CuSeqlensK, k.Seq); err != nil {
			return nil, err
		}
		if len(vl.CuSeqlensK) != len(vl.CuSeqlensQ) {
			return nil, fmt.Errorf("gpu: CuSeqlensQ has %d entries, CuSeqlensK %d; they must match", len(vl.CuSeqlensQ), len(vl.CuSeqlensK))
		}
		p.batch = len(vl.CuSeqlensQ) - 1
		if p.batch > 65535 {
			return nil, fmt.Errorf("gpu: VarLen batch %d exceeds 65535", p.batch)
		}
		p.cuQ, p.cuK = vl.CuSeqlensQ, vl.CuSeqlensK
		if vl.SeqUsedK != nil {
			if len(vl.SeqUsedK) != p.batch {
				return nil, fmt.Errorf("gpu: SeqUsedK has %d entries, want %d", len(vl.SeqUsedK), p.batch)
			}
			for b, u := range vl.SeqUsedK {
				if n := vl.CuSeqlensK[b+1] - vl.CuSeqlensK[b]; u < 0 || u > n {
					return nil, fmt.Errorf("gpu: SeqUsedK[%d] = %d outside [0, %d]", b, u, n)
				}
			}
			p.usedK = vl.SeqUsedK
		}
	} else {
		p.batch, p.maxSq, p.maxSk = q.Batch, q.Seq, k.Seq
		p.rowsQ, p.rowsK = q.Batch*q.Seq, k.Batch*k.Seq
	}
	if p.maxSq >= maxSeq || p.maxSk >= maxSeq || p.rowsQ >= math.MaxInt32 || p.rowsK >= math.MaxInt32 {
		return nil, fmt.Errorf("gpu: sequences of %d queries, %d keys (%d, %d rows in all) are too long", p.maxSq, p.maxSk, p.rowsQ, p.rowsK)
	}
	// A window side at least Sq+Sk never hides a key: make it unbounded, so
	// that it stays small in the kernels' arithmetic.
	if int(p.left) >= p.maxSq+p.maxSk {
		p.left = -1
	}
	if int(p.right) >= p.maxSq+p.maxSk {
		p.right = -1
	}
	return p, nil
}

func supportedDim(d int) bool {
	for _, x := range tile.HeadDims {
		if d == x {
			return true
		}
	}
	return false
}

// checkCu validates cu_seqlens against total rows and returns the longest
// sequence.
func checkCu(name string, cu []int32, total int) (int, error) {
	if len(cu) < 2 {
		return 0, fmt.Errorf("gpu: %s has %d entries; want batch+1 ≥ 2", name, len(cu))
	}
	if cu[0] != 0 {
		return 0, fmt.Errorf("gpu: %s[0] = %d, want 0", name, cu[0])
	}
	longest := 0
	for i := 1; i < len(cu); i++ {
		if cu[i] < cu[i-1] {
			return 0, fmt.Errorf("gpu: %s decreases at %d (%d < %d)", name, i, cu[i], cu[i-1])
		}
		longest = max(longest, int(cu[i]-cu[i-1]))
	}
	if int(cu[len(cu)-1]) != total {
		return 0, fmt.Errorf("gpu: %s ends at %d, but the packed tensor has %d rows", name, cu[len(cu)-1], total)
	}
	return longest, nil
}

// lseLen is the number of LSE (and dsum) elements: [batch, heads, Sq] or,
// varlen, [heads, total_q].
func (p *problem) lseLen() int {
	if p.varlen {
		return p.heads * p.rowsQ
	}
	return p.batch * p.heads * p.maxSq
}

// like checks that t has q's (rows, heads, dim) or k's.
func (p *problem) like(t Tensor, name string, ofK bool) error {
	if err := t.check(name); err != nil {
		return err
	}
	want := Tensor{DType: p.dt, Batch: 1, Seq: p.rowsQ, Heads: p.heads, Dim: p.d}
	if !p.varlen {
		want.Batch, want.Seq = p.batch, p.maxSq
	}
	if ofK {
		want.Heads = p.kvHeads
		want.Seq = p.rowsK
		if !p.varlen {
			want.Seq = p.maxSk
		}
	}
	if t.DType != p.dt || t.Batch != want.Batch || t.Seq != want.Seq || t.Heads != want.Heads || t.Dim != want.Dim {
		return fmt.Errorf("gpu: %s is %v %v, want %v %v", name, t.DType, t.shape(), want.DType, want.shape())
	}
	return nil
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
