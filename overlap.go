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

func sliceRegion(s []float32) region {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return region{base: base, rowLen: len(s), size: 4 * 32, last: base + uintptr(len(s))*4}
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

// named is a tensor view or an LSE slice, with the name errors give it.
type named struct {
	name    string
	inPlace string // for an output: the input it may be the very same view of
	r       region
	v       view // zero for a slice
}

func namedView(name, inPlace string, v view) named {
	return named{name: name, inPlace: inPlace, v: v, r: viewRegion(v)}
}

func namedSlice(name string, s []float32) named {
	return named{name: name, r: sliceRegion(s)}
}

// checkOutputs refuses outputs that share memory with an input or with
// another output. An output may be the very same view as the input named by
// its inPlace field (a use documented as safe).
func checkOutputs(outs, ins []named) error {
	for i := range outs {
		o := &outs[i]
		for j := range ins {
			in := &ins[j]
			if o.inPlace == in.name && o.v.shape[3] > 0 && in.v.shape[3] > 0 && sameView(o.v, in.v) {
				continue
			}
			if overlaps(o.r, in.r) {
				return argErr(o.name, "output %s shares memory with input %s", o.name, in.name)
			}
		}
		for j := range outs[:i] {
			if o2 := &outs[j]; overlaps(o.r, o2.r) {
				return argErr(o.name, "outputs %s and %s share memory", o2.name, o.name)
			}
		}
	}
	return nil
}

// bytes is the size in bytes of n elements (a multiple of 32 for q8_0 and q4_0).
func (r *region) bytes(n int) uintptr { return uintptr(n) * r.size / 32 }
