package flashattn

import (
	"slices"
	"unsafe"
)

// overlap.go decides whether the memory of two views intersects, so that an
// output that would overwrite an input (or another output) while the call
// still reads it is refused instead of giving a silently wrong result.

// region is the memory of a view: rows of rowLen float32 elements, one per
// (batch, seq, head) index, at base + offset of the row.
type region struct {
	base   uintptr
	axes   [3]axis // the first n: outer axes with more than one index, largest stride first
	n      int
	rowLen int
	size   uintptr // bytes per 32 elements (float32: 128, q8_0: 34, fp8: 32)
	last   uintptr // one past the last byte
}

func viewRegion(v view) region {
	r := region{base: uintptr(unsafe.Pointer(unsafe.SliceData(v.raw))), rowLen: v.shape[3], size: uintptr(quantBytes(v.dt, 32))}
	span := v.shape[3]
	for _, a := range v.axes() {
		if a.n > 1 {
			r.axes[r.n] = a
			r.n++
			span += (a.n - 1) * a.stride
		}
	}
	slices.SortFunc(r.axes[:r.n], func(a, b axis) int { return b.stride - a.stride })
	r.last = r.base + r.bytes(span)
	return r
}

// sliceRegion is the memory of a slice (of float32, or of int32 offsets
// and lengths), as one row.
func sliceRegion[T any](s []T) region {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	size := unsafe.Sizeof(*new(T))
	return region{base: base, rowLen: len(s), size: size * 32, last: base + uintptr(len(s))*size}
}

// rowWalk walks the row offsets of a region in increasing address order (the
// axes nest, so the odometer order with the largest stride outermost is
// increasing).
type rowWalk struct {
	r   *region
	idx [3]int
	off int // element offset of the current row
	end bool
}

func (it *rowWalk) next() {
	for a := it.r.n - 1; a >= 0; a-- {
		ax := it.r.axes[a]
		if it.idx[a]+1 < ax.n {
			it.idx[a]++
			it.off += ax.stride
			return
		}
		it.off -= it.idx[a] * ax.stride
		it.idx[a] = 0
	}
	it.end = true
}

// overlaps reports whether any element of a shares memory with one of b.
// Disjoint address ranges (separate buffers) are decided at once; views
// interleaved in one buffer (the Q, K, V or dQ, dK, dV of a packed layout)
// are walked row by row, O(rows of a + rows of b).
func overlaps(a, b region) bool {
	if a.rowLen == 0 || b.rowLen == 0 || a.last <= b.base || b.last <= a.base {
		return false
	}
	ia, ib := rowWalk{r: &a}, rowWalk{r: &b}
	for !ia.end && !ib.end {
		a0 := a.base + a.bytes(ia.off)
		b0 := b.base + b.bytes(ib.off)
		a1, b1 := a0+a.bytes(a.rowLen), b0+b.bytes(b.rowLen)
		if a0 < b1 && b0 < a1 {
			return true
		}
		if a1 <= b1 {
			ia.next()
		} else {
			ib.next()
		}
	}
	return false
}

// sameView reports whether two views are the same elements with the same
// layout (an in-place call).
func sameView(a, b view) bool {
	return unsafe.SliceData(a.raw) == unsafe.SliceData(b.raw) && a.dt == b.dt && a.shape == b.shape &&
		(a.shape[0] == 1 || a.bs == b.bs) && (a.shape[1] == 1 || a.ss == b.ss) && (a.shape[2] == 1 || a.hs == b.hs)
}

// named is one operand of a call, a tensor view or a slice, with the name
// errors give it.
type named struct {
	name    string
	output  bool   // the call writes it
	inPlace string // for an output: the input it may be the very same view of
	r       region
	v       view // zero for a slice
}

func namedView(name string, v view) named { return named{name: name, v: v, r: viewRegion(v)} }

func namedSlice[T any](name string, s []T) named { return named{name: name, r: sliceRegion(s)} }

// written marks n as an output (that may be the very same view as the
// input named inPlace, if not "").
func (n named) written(inPlace string) named {
	n.output, n.inPlace = true, inPlace
	return n
}

// callOperands appends to list every tensor and slice a call reads or
// writes, each once: the one list the overlap rule (checkOperands) reads.
// ops holds the
// checked views of q, k, v and a KV cache's new keys; fwd is the forward's
// out and lse (nil for a backward); bwd the backward's views and slices
// (nil for a forward). A test walks the fields of Options and Grads and
// fails if one of slice or Tensor type is missing here.
func callOperands(list []named, ops *operands, o *Options, appending bool, fwd *forwardOutputs, bwd *gradViews, g *Grads) []named {
	list = append(list, namedView("q", ops.q))
	switch {
	case appending && columnsOf(ops.v, ops.k):
		// An MLA latent cache: v is k's first columns, written with it.
		list = append(list, namedView("k", ops.k).written(""))
	case appending:
		list = append(list, namedView("k", ops.k).written(""), namedView("v", ops.v).written(""))
	default:
		list = append(list, namedView("k", ops.k), namedView("v", ops.v))
	}
	if fwd != nil {
		list = append(list, namedView("out", fwd.out).written("q"), namedSlice("lse", fwd.lse).written(""))
	}
	if bwd != nil {
		list = append(list, namedView("out", bwd.o), namedView("dout", bwd.do), namedSlice("lse", bwd.lse), namedSlice("dlse", bwd.dlse),
			namedView("dq", bwd.dq).written(""), namedView("dk", bwd.dk).written(""), namedView("dv", bwd.dv).written(""))
	}
	if g != nil {
		list = append(list, namedSlice("DSinks", g.DSinks).written(""), namedSlice("DBias", g.DBias).written(""))
	}
	if o == nil {
		return list
	}
	list = append(list, namedSlice("Options.Sinks", o.Sinks), namedSlice("Options.ALiBi", o.ALiBi))
	if d, ok := o.ScoreMod.(callerData); ok {
		list = append(list, named{name: "Options.ScoreMod", r: d.dataRegion()})
	}
	if d, ok := o.Mask.(callerData); ok {
		list = append(list, named{name: "Options.Mask", r: d.dataRegion()})
	}
	if l := o.VarLen; l != nil {
		list = append(list, namedSlice("Options.VarLen.CuSeqlensQ", l.CuSeqlensQ), namedSlice("Options.VarLen.CuSeqlensK", l.CuSeqlensK),
			namedSlice("Options.VarLen.SeqUsedK", l.SeqUsedK), namedSlice("Options.VarLen.SeqUsedQ", l.SeqUsedQ))
	}
	if c := o.KVCache; c != nil {
		list = append(list, namedSlice("Options.KVCache.SeqLens", c.SeqLens), namedSlice("Options.KVCache.BlockTable", c.BlockTable),
			namedSlice("Options.KVCache.BatchIdx", c.BatchIdx), namedSlice("Options.KVCache.LeftPad", c.LeftPad),
			namedSlice("Options.KVCache.CuSeqlensKNew", c.CuSeqlensKNew),
			namedView("Options.KVCache.KNew", ops.knew), namedView("Options.KVCache.VNew", ops.vnew))
		if r := c.Rotary; r != nil {
			list = append(list, namedSlice("Options.KVCache.Rotary.Cos", r.Cos), namedSlice("Options.KVCache.Rotary.Sin", r.Sin))
		}
	}
	return list
}

// forwardOutputs are what a forward call writes besides a KV cache.
type forwardOutputs struct {
	out view
	lse []float32 // nil, or cut to the call's LSE length
}

// checkOperands refuses outputs that share memory with another operand,
// input or output. Inputs may share memory with each other (reading twice
// is safe), and an output may be the very same view as the input named by
// its inPlace field (a use documented as safe).
func checkOperands(list []named) error {
	for i := range list {
		o := &list[i]
		if !o.output {
			continue
		}
		for j := range list {
			in := &list[j]
			if in.output {
				continue
			}
			if o.inPlace == in.name && o.v.shape[3] > 0 && in.v.shape[3] > 0 && sameView(o.v, in.v) {
				continue
			}
			if overlaps(o.r, in.r) {
				return argErr(o.name, "output %s shares memory with input %s", o.name, in.name)
			}
		}
		for j := range list[:i] {
			if o2 := &list[j]; o2.output && overlaps(o.r, o2.r) {
				return argErr(o.name, "outputs %s and %s share memory", o2.name, o.name)
			}
		}
	}
	return nil
}

// bytes is the size in bytes of n elements (a multiple of 32 for q8_0 and q4_0).
func (r *region) bytes(n int) uintptr { return uintptr(n) * r.size / 32 }
