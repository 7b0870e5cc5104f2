package gpu

import (
	"errors"
	"fmt"

	"github.com/flashattn/flashattn/gpu/internal/tile"
)

// Forward computes attention on device tensors: out (shaped like q) and
// lse, float32 [batch, heads, seq_q] (or [heads, total_q] with VarLen), in
// natural-log units. q is [batch, seq_q, heads, dim], k and v
// [batch, seq_k, kv_heads, dim] with heads a multiple of kv_heads; all of
// one type. Rows with no visible key get O = 0 and LSE = -Inf. It returns
// when the kernel has finished.
func (d *Device) Forward(q, k, v, out Tensor, lse *Buffer, opts *Options) error {
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
	if err := distinct([]Tensor{out, {Buf: lse}}, q, k, v); err != nil {
		return err
	}
	if err := sameDevice(d, q, out, Tensor{Buf: lse}); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cu, err := d.uploadCu(p)
	if err != nil {
		return err
	}
	c := tile.FwdConfig(p.d)
	a := p.fwdArgs(uint64(q.Buf.ptr), uint64(k.Buf.ptr), uint64(v.Buf.ptr), uint64(out.Buf.ptr), uint64(lse.ptr), cu)
	x, y, z := tile.Grid(p.maxSq, c.Br(), p.heads, p.batch)
	if err := d.launch(p.dt, p.d, c.Name(p.dt.String()), tile.FwdParams, a, [3]int{x, y, z}, c.Threads()); err != nil {
		return err
	}
	return d.ctx.Synchronize()
}

// Backward computes dq, dk, dv (shaped like q, k, v) from q, k, v, the
// forward output out and its lse, and the upstream gradient dout (shaped
// like q). With GQA, dk and dv sum over the query heads sharing a KV head.
// Head dims 64 and 128 are supported. It returns when the kernels have
// finished.
func (d *Device) Backward(q, k, v, out, dout Tensor, lse *Buffer, dq, dk, dv Tensor, opts *Options) error {
	p, err := validate(q, k, v, opts)
	if err != nil {
		return err
	}
	if tile.BwdConfig(p.d).Check() != nil {
		return fmt.Errorf("gpu: the backward pass supports headdim 64 and 128, not %d", p.d)
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
	if err := distinct([]Tensor{dq, dk, dv}, q, k, v, out, dout, Tensor{Buf: lse}); err != nil {
		return err
	}
	if err := sameDevice(d, q, out, dout, dq, dk, dv, Tensor{Buf: lse}); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cu, err := d.uploadCu(p)
	if err != nil {
		return err
	}
	dt, hd, name := p.dt, p.d, p.dt.String()
	bc := tile.BwdConfig(hd)
	f32KV := p.rowsK * p.heads * p.d * 4 // float32 [rows_k, heads, d]
	dsum, err := d.scratchBuf("dsum", p.lseLen()*4)
	if err != nil {
		return err
	}
	dkx, err := d.scratchBuf("dk", f32KV)
	if err != nil {
		return err
	}
	dvx, err := d.scratchBuf("dv", f32KV)
	if err != nil {
		return err
	}
	ptr := func(b *Buffer) uint64 { return uint64(b.ptr) }

	// dsum = rowsum(dO∘O).
	pre := p.preArgs(ptr(out.Buf), ptr(dout.Buf), ptr(dsum), cu)
	grid := [3]int{(p.maxSq + tile.PreRows - 1) / tile.PreRows, p.heads, p.batch}
	if err := d.launch(dt, hd, tile.PreName(name), tile.PreParams, pre, grid, tile.ElemThreads); err != nil {
		return err
	}
	if p.varlen { // keys past SeqUsedK or in empty sequences have no block
		if err := d.ctx.Zero(dkx.ptr, f32KV); err != nil {
			return err
		}
		if err := d.ctx.Zero(dvx.ptr, f32KV); err != nil {
			return err
		}
	}
	gx, gy, gz := tile.Grid(p.maxSk, bc.Bc(), p.heads, p.batch)
	q0, k0, v0, do0, l0 := ptr(q.Buf), ptr(k.Buf), ptr(v.Buf), ptr(dout.Buf), ptr(lse)
	if p.deterministic {
		a := p.bwdArgs(q0, k0, v0, do0, l0, ptr(dsum), 0, ptr(dkx), ptr(dvx), cu)
		if err := d.launch(dt, hd, bc.Name(name, false), tile.BwdParams, a, [3]int{gx, gy, gz}, bc.Threads()); err != nil {
			return err
		}
		qc := tile.DQConfig(hd)
		a = p.dqArgs(q0, k0, v0, do0, l0, ptr(dsum), ptr(dq.Buf), cu)
		x, y, z := tile.Grid(p.maxSq, qc.Br(), p.heads, p.batch)
		if err := d.launch(dt, hd, qc.Name(name), tile.DQParams, a, [3]int{x, y, z}, qc.Threads()); err != nil {
			return err
		}
	} else {
		_, accRows := p.dqAcc(bc)
		f32Q := accRows * p.heads * p.d * 4
		acc, err := d.scratchBuf("dqacc", f32Q)
		if err != nil {
			return err
		}
		if err := d.ctx.Zero(acc.ptr, f32Q); err != nil {
			return err
		}
		a := p.bwdArgs(q0, k0, v0, do0, l0, ptr(dsum), ptr(acc), ptr(dkx), ptr(dvx), cu)
		if err := d.launch(dt, hd, bc.Name(name, true), tile.BwdParams, a, [3]int{gx, gy, gz}, bc.Threads()); err != nil {
			return err
		}
		grid := [3]int{(p.heads*hd/2 + tile.ElemThreads - 1) / tile.ElemThreads, min(p.maxSq, 65535), p.batch}
		ca := p.convertDQArgs(bc, ptr(acc), ptr(dq.Buf), cu)
		if err := d.launch(dt, hd, tile.ConvertDQName(name), tile.ConvertDQParams, ca, grid, tile.ElemThreads); err != nil {
			return err
		}
	}
	group := p.heads / p.kvHeads
	if err := d.convert(dt, hd, ptr(dkx), ptr(dk.Buf), p.rowsK, p.kvHeads, group); err != nil {
		return err
	}
	if err := d.convert(dt, hd, ptr(dvx), ptr(dv.Buf), p.rowsK, p.kvHeads, group); err != nil {
		return err
	}
	return d.ctx.Synchronize()
}

// convert launches the conversion kernel: out[r, j] = Σ_g in[r, j·group+g].
func (d *Device) convert(dt DType, hd int, in, out uint64, rows, heads, group int) error {
	grid := [3]int{(heads*hd/2 + tile.ElemThreads - 1) / tile.ElemThreads, min(rows, 65535), 1}
	return d.launch(dt, hd, tile.ConvertName(dt.String()), tile.ConvertParams, convertArgs(in, out, rows, heads, group, hd), grid, tile.ElemThreads)
}

// uploadCu copies the varlen sequence starts to the device (0 if dense).
// d.mu must be held.
func (d *Device) uploadCu(p *problem) (uint64, error) {
	if !p.varlen {
		return 0, nil
	}
	cu := p.cuInts()
	b, err := d.scratchBuf("cu", 4*len(cu))
	if err != nil {
		return 0, err
	}
	if err := CopyIn(b, cu); err != nil {
		return 0, err
	}
	return uint64(b.ptr), nil
}

// checkF32 checks a float32 buffer of n elements.
func (p *problem) checkF32(b *Buffer, name string, n int) error {
	if b == nil || b.ptr == 0 {
		return fmt.Errorf("gpu: %s has no buffer (nil or freed)", name)
	}
	if b.n < 4*n {
		return fmt.Errorf("gpu: %s needs %d bytes (%d float32), its buffer has %d", name, 4*n, n, b.n)
	}
	return nil
}

// distinct reports an output sharing its buffer with another output or an
// input (inputs may share buffers with each other).
func distinct(outs []Tensor, ins ...Tensor) error {
	all := append(append([]Tensor(nil), outs...), ins...)
	for i := range outs {
		for j := range all {
			if j != i && all[j].Buf == outs[i].Buf {
				return errors.New("gpu: an output shares its buffer with another argument; outputs need their own")
			}
		}
	}
	return nil
}

// sameDevice checks that every tensor lives on d.
func sameDevice(d *Device, ts ...Tensor) error {
	for _, t := range ts {
		if t.Buf != nil && t.Buf.d != d {
			return errors.New("gpu: a buffer belongs to another device")
		}
	}
	return nil
}
