package gpu

import (
	"github.com/flashattn/flashattn/gpu/internal/cuda"
	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// Forward computes attention on device tensors: out (shaped like q) and
// lse, float32 [batch, heads, seq_q] (or [heads, total_q] with VarLen), in
// natural-log units. q is [batch, seq_q, heads, dim], k and v
// [batch, seq_k, kv_heads, dim] with heads a multiple of kv_heads; all of
// one type. Rows with no visible key get O = 0 and LSE = -Inf. When the
// grid would leave the device idle (few query rows, long keys) the keys
// are split over several thread blocks and merged (Options.NumSplits). It
// runs on the default stream and returns when that stream's work has
// finished.
//
// A bad argument is reported as a *flashattn.ArgError before anything
// runs: the rules of package flashattn through flashattn.ValidateShape
// (see ValidateShape), then the GPU's own (types, buffers, devices).
func (d *Device) Forward(q, k, v, out Tensor, lse *Buffer, opts *Options) error {
	return d.stream().forward(q, k, v, out, lse, opts, true)
}

// Forward is Device.Forward queued on the stream: it returns once the
// kernels are queued (argument errors are reported at once; a fault while
// they run, by a later call). The tensors must stay allocated, and out and
// lse unread, until Synchronize.
func (s *Stream) Forward(q, k, v, out Tensor, lse *Buffer, opts *Options) error {
	return s.forward(q, k, v, out, lse, opts, false)
}

func (s *Stream) forward(q, k, v, out Tensor, lse *Buffer, opts *Options, wait bool) error {
	p, err := validate(q, k, v, opts)
	if err != nil {
		return err
	}
	if err := p.like(out, "out", false); err != nil {
		return err
	}
	if err := p.checkF32(lse, "lse", p.lseLen()); err != nil {
		return err
	}
	outs := []arg{{"out", out.Buf}, {"lse", lse}}
	ins := []arg{{"q", q.Buf}, {"k", k.Buf}, {"v", v.Buf}}
	return s.queue(p, outs, ins, wait, func(cu uint64) error {
		qp, kp, vp, op, lp := uint64(q.Buf.ptr), uint64(k.Buf.ptr), uint64(v.Buf.ptr), uint64(out.Buf.ptr), uint64(lse.ptr)
		if n := p.splits(s.d.info.SMs); n > 1 {
			return s.splitForward(p, qp, kp, vp, op, lp, cu, n)
		}
		c := tile.FwdConfig(p.d)
		rows, heads := p.packedRows()
		x, y, z := tile.Grid(rows, c.Br(), heads, p.batch)
		return s.d.launch(s, p.dt, p.d, c.Name(ptxName(p.dt)), tile.FwdParams, p.fwdArgs(qp, kp, vp, op, lp, cu), [3]int{x, y, z}, c.Threads())
	})
}

// queue checks a call's buffers (each output distinct from every other
// buffer, all on the stream's device) and then, holding the device's
// lock, starts the stream, uploads p's cu_seqlens and queues body's
// kernels (cu is their device address, 0 if dense); with wait it then
// waits for the stream without the lock, so that other calls (on this
// stream or others) queue their work meanwhile.
func (s *Stream) queue(p *problem, outs, ins []arg, wait bool, body func(cu uint64) error) error {
	if err := distinct(outs, ins); err != nil {
		return err
	}
	if err := s.opened(); err != nil {
		return err
	}
	d := s.d
	if err := sameDevice(d, ins, outs); err != nil {
		return err
	}
	err := func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := s.begin(); err != nil {
			return err
		}
		cu, err := s.uploadCu(p)
		if err != nil {
			return err
		}
		return body(cu)
	}()
	if err != nil || !wait {
		return err
	}
	return d.ctx.SyncStream(s.s)
}

// Backward computes dq, dk, dv (shaped like q, k, v) from q, k, v, the
// forward output out and its lse, and the upstream gradient dout (shaped
// like q). With GQA, dk and dv sum over the query heads sharing a KV head.
// Head dims 64 and 128 are supported; opts.Deterministic chooses how dQ is
// computed. It runs on the default stream and returns when that stream's
// work has finished. Bad arguments are *flashattn.ArgErrors, as in Forward.
func (d *Device) Backward(q, k, v, out, dout Tensor, lse *Buffer, dq, dk, dv Tensor, opts *Options) error {
	return d.stream().backward(q, k, v, out, dout, lse, dq, dk, dv, opts, true)
}

// Backward is Device.Backward queued on the stream (see Stream.Forward).
func (s *Stream) Backward(q, k, v, out, dout Tensor, lse *Buffer, dq, dk, dv Tensor, opts *Options) error {
	return s.backward(q, k, v, out, dout, lse, dq, dk, dv, opts, false)
}

func (s *Stream) backward(q, k, v, out, dout Tensor, lse *Buffer, dq, dk, dv Tensor, opts *Options, wait bool) error {
	p, err := validate(q, k, v, opts)
	if err != nil {
		return err
	}
	if err := p.checkBackward(); err != nil {
		return err
	}
	for _, c := range []struct {
		t    Tensor
		name string
		ofK  bool
	}{{out, "out", false}, {dout, "dout", false}, {dq, "dq", false}, {dk, "dk", true}, {dv, "dv", true}} {
		if err := p.like(c.t, c.name, c.ofK); err != nil {
			return err
		}
	}
	if err := p.checkF32(lse, "lse", p.lseLen()); err != nil {
		return err
	}
	outs := []arg{{"dq", dq.Buf}, {"dk", dk.Buf}, {"dv", dv.Buf}}
	ins := []arg{{"q", q.Buf}, {"k", k.Buf}, {"v", v.Buf}, {"out", out.Buf}, {"dout", dout.Buf}, {"lse", lse}}
	return s.queue(p, outs, ins, wait, func(cu uint64) error {
		b := bwdCall{s: s, p: p, cu: cu, q: q.Buf.ptr, k: k.Buf.ptr, v: v.Buf.ptr, out: out.Buf.ptr, dout: dout.Buf.ptr, lse: lse.ptr}
		return b.run(dq.Buf.ptr, dk.Buf.ptr, dv.Buf.ptr)
	})
}

// bwdCall is one backward call's kernels on a stream.
type bwdCall struct {
	s                       *Stream
	p                       *problem
	cu                      uint64
	q, k, v, out, dout, lse cuda.Ptr
	dsum, dk32, dv32        *Buffer
}

// run queues the backward kernels: dsum = rowsum(dO∘O); the dK/dV kernel
// (with atomic dQ, or followed by the deterministic dQ kernel); the
// conversions of the float32 dQ, dK and dV to the input type.
func (b *bwdCall) run(dq, dk, dv cuda.Ptr) error {
	s, p := b.s, b.p
	d, dt, hd, name := s.d, p.dt, p.d, ptxName(p.dt)
	f32KV := p.rowsK * p.heads * p.d * 4 // float32 [rows_k, heads, d]
	var err error
	if b.dsum, err = s.scratchBuf("dsum", p.lseLen()*4); err != nil {
		return err
	}
	if b.dk32, err = s.scratchBuf("dk", f32KV); err != nil {
		return err
	}
	if b.dv32, err = s.scratchBuf("dv", f32KV); err != nil {
		return err
	}
	pre := p.preArgs(uint64(b.out), uint64(b.dout), uint64(b.dsum.ptr), b.cu)
	grid := [3]int{(p.maxSq + tile.PreRows - 1) / tile.PreRows, p.heads, p.batch}
	if err := d.launch(s, dt, hd, tile.PreName(name), tile.PreParams, pre, grid, tile.ElemThreads); err != nil {
		return err
	}
	if p.varlen { // keys past SeqUsedK or in empty sequences have no block
		if err := s.zero(b.dk32, f32KV); err != nil {
			return err
		}
		if err := s.zero(b.dv32, f32KV); err != nil {
			return err
		}
	}
	if p.deterministic {
		err = b.deterministic(dq)
	} else {
		err = b.atomic(dq)
	}
	if err != nil {
		return err
	}
	group := p.heads / p.kvHeads
	if err := d.convert(s, dt, hd, uint64(b.dk32.ptr), uint64(dk), p.rowsK, p.kvHeads, group); err != nil {
		return err
	}
	return d.convert(s, dt, hd, uint64(b.dv32.ptr), uint64(dv), p.rowsK, p.kvHeads, group)
}

// kvArgs returns the dK/dV kernel's arguments (dqAcc 0: no dQ).
func (b *bwdCall) kvArgs(dqAcc uint64) args {
	return b.p.bwdArgs(uint64(b.q), uint64(b.k), uint64(b.v), uint64(b.dout), uint64(b.lse), uint64(b.dsum.ptr), dqAcc, uint64(b.dk32.ptr), uint64(b.dv32.ptr), b.cu)
}

// deterministic queues the dK/dV kernel without dQ, then the dQ kernel.
func (b *bwdCall) deterministic(dq cuda.Ptr) error {
	s, p := b.s, b.p
	d, name := s.d, ptxName(p.dt)
	bc, qc := tile.BwdConfig(p.d), tile.DQConfig(p.d)
	gx, gy, gz := tile.Grid(p.maxSk, bc.Bc(), p.heads, p.batch)
	if err := d.launch(s, p.dt, p.d, bc.Name(name, false), tile.BwdParams, b.kvArgs(0), [3]int{gx, gy, gz}, bc.Threads()); err != nil {
		return err
	}
	a := p.dqArgs(uint64(b.q), uint64(b.k), uint64(b.v), uint64(b.dout), uint64(b.lse), uint64(b.dsum.ptr), uint64(dq), b.cu)
	x, y, z := tile.Grid(p.maxSq, qc.Br(), p.heads, p.batch)
	return d.launch(s, p.dt, p.d, qc.Name(name), tile.DQParams, a, [3]int{x, y, z}, qc.Threads())
}

// atomic queues the dK/dV kernel that adds dQ to the zeroed, padded float32
// accumulator, then its conversion.
func (b *bwdCall) atomic(dq cuda.Ptr) error {
	s, p := b.s, b.p
	d, name := s.d, ptxName(p.dt)
	bc := tile.BwdConfig(p.d)
	_, accRows := p.dqAcc(bc)
	f32Q := accRows * p.heads * p.d * 4
	acc, err := s.scratchBuf("dqacc", f32Q)
	if err != nil {
		return err
	}
	if err := s.zero(acc, f32Q); err != nil {
		return err
	}
	gx, gy, gz := tile.Grid(p.maxSk, bc.Bc(), p.heads, p.batch)
	if err := d.launch(s, p.dt, p.d, bc.Name(name, true), tile.BwdParams, b.kvArgs(uint64(acc.ptr)), [3]int{gx, gy, gz}, bc.Threads()); err != nil {
		return err
	}
	grid := [3]int{(p.heads*p.d/2 + tile.ElemThreads - 1) / tile.ElemThreads, min(p.maxSq, 65535), p.batch}
	ca := p.convertDQArgs(bc, uint64(acc.ptr), uint64(dq), b.cu)
	return d.launch(s, p.dt, p.d, tile.ConvertDQName(name), tile.ConvertDQParams, ca, grid, tile.ElemThreads)
}

// convert queues the conversion kernel: out[r, j] = Σ_g in[r, j·group+g].
func (d *Device) convert(s *Stream, dt DType, hd int, in, out uint64, rows, heads, group int) error {
	grid := [3]int{(heads*hd/2 + tile.ElemThreads - 1) / tile.ElemThreads, min(rows, 65535), 1}
	return d.launch(s, dt, hd, tile.ConvertName(ptxName(dt)), tile.ConvertParams, convertArgs(in, out, rows, heads, group, hd), grid, tile.ElemThreads)
}

// checkF32 checks a float32 buffer of n elements, argument name.
func (p *problem) checkF32(b *Buffer, name string, n int) error {
	if b == nil || b.ptr == 0 {
		return argErr(name, "%s has no buffer (nil or freed)", name)
	}
	if b.n < 4*n {
		return argErr(name, "%s needs %d bytes (%d float32), its buffer has %d", name, 4*n, n, b.n)
	}
	return nil
}

// arg is a buffer argument of a call, by name.
type arg struct {
	name string
	buf  *Buffer
}

// distinct reports an output sharing its buffer with another output or an
// input (inputs may share buffers with each other).
func distinct(outs, ins []arg) error {
	all := append(append([]arg(nil), outs...), ins...)
	for i, o := range outs {
		for j, x := range all {
			if j != i && x.buf == o.buf {
				return argErr(o.name, "%s shares its buffer with %s; outputs need their own", o.name, x.name)
			}
		}
	}
	return nil
}

// sameDevice checks that every buffer lives on d.
func sameDevice(d *Device, lists ...[]arg) error {
	for _, l := range lists {
		for _, x := range l {
			if x.buf != nil && x.buf.d != d {
				return argErr(x.name, "%s is on another device than the call's", x.name)
			}
		}
	}
	return nil
}
