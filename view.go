package flashattn

import (
	"math"
	"slices"

	"github.com/flashattn/flashattn/internal/kernel"
)

// view is a checked tensor: strides resolved and bounds verified, so the
// kernels can index it freely. Its stored bytes are raw, whatever its type
// dt (formats[dt] says how to read them); data (float32) and h (16-bit)
// are the same memory as typed slices, for the paths that take them.
type view struct {
	data       []float32
	h          []uint16
	raw        []byte
	scale      float32 // the fp8 per-tensor scale (0 means 1)
	dt         DType
	bs, ss, hs int
	shape      [4]int // batch, seq, heads, dim
}

// row returns the slice starting at (b, s, h, 0) of a float32 view.
func (v view) row(b, s, h int) []float32 { return v.data[v.off(b, s, h):] }

// axis is one outer dimension of a view: its extent and its stride.
type axis struct{ n, stride int }

// axes returns the batch, seq and head axes.
func (v view) axes() [3]axis {
	return [3]axis{{v.shape[0], v.bs}, {v.shape[1], v.ss}, {v.shape[2], v.hs}}
}

// mulAdd returns a*b + c and whether it fits in an int without overflow
// (a, b, c ≥ 0).
func mulAdd(a, b, c int) (int, bool) {
	if a != 0 && b > (math.MaxInt-c)/a {
		return 0, false
	}
	return a*b + c, true
}

// check validates t as the tensor called name with the expected shape and
// returns its resolved view. A negative expectation means "any". No two
// elements may share memory: the outer axes, ordered by stride, must nest
// (each stride at least the span of the axes inside it), which every
// permutation of a dense layout does. All size arithmetic is checked for
// overflow.
func (t Tensor) check(name string, output bool, batch, seq, heads, dim int) (view, error) {
	switch t.fields() {
	case 0:
		return view{}, argErr(name, "%s is nil", name)
	case 1:
	default:
		return view{}, argErr(name, "%s has more than one of Data, BF16, F16, Q8, Q4, E4M3 and E5M2 set", name)
	}
	if t.Batch <= 0 || t.Seq <= 0 || t.Heads <= 0 || t.Dim <= 0 {
		return view{}, argErr(name, "%s has shape [%d %d %d %d]; every dimension must be ≥ 1", name, t.Batch, t.Seq, t.Heads, t.Dim)
	}
	want := [4]int{batch, seq, heads, dim}
	got := [4]int{t.Batch, t.Seq, t.Heads, t.Dim}
	names := [4]string{"batch", "seqlen", "heads", "headdim"}
	for a := range want {
		if want[a] >= 0 && want[a] != got[a] {
			return view{}, argErr(name, "%s has %s %d, want %d (shape [%d %d %d %d])", name, names[a], got[a], want[a], got[0], got[1], got[2], got[3])
		}
	}
	if t.BatchStride < 0 || t.SeqStride < 0 || t.HeadStride < 0 {
		return view{}, argErr(name, "%s has a negative stride (batch %d, seq %d, head %d)", name, t.BatchStride, t.SeqStride, t.HeadStride)
	}
	// Default strides, computed without overflow.
	hs, ss, bs := t.HeadStride, t.SeqStride, t.BatchStride
	ok := true
	if hs == 0 {
		hs = t.Dim
	}
	if ss == 0 {
		ss, ok = mulAdd(t.Heads, hs, 0)
	}
	if bs == 0 && ok {
		bs, ok = mulAdd(t.Seq, ss, 0)
	}
	if !ok {
		return view{}, argErr(name, "%s shape [%d %d %d %d] is too large: its size overflows int", name, t.Batch, t.Seq, t.Heads, t.Dim)
	}
	v := view{data: t.Data, h: t.bits(), dt: t.DType(), bs: bs, ss: ss, hs: hs, shape: got}
	f := &formats[v.dt]
	v.raw, _ = f.raw(t)
	if blk := f.kf.Block(); blk > 1 {
		for _, x := range []int{t.Dim, bs, ss, hs} {
			if x%blk != 0 {
				return view{}, argErr(name, "%s is %v: its head dim and strides (dim %d; batch %d, seq %d, head %d) must be multiples of %d", name, v.dt, t.Dim, bs, ss, hs, blk)
			}
		}
	}
	if t.Scale != 0 && !f.scaled || kernel.CheckFP8Scale(t.Scale) != nil {
		return view{}, argErr(name, "%s has Scale %v: the fp8 types take 0 (meaning 1) or a finite normal scale > 0, the others 0", name, t.Scale)
	}
	v.scale = t.Scale
	// Nesting: sort the axes that have more than one index by stride.
	var buf [3]axis // on the stack: order must not allocate
	order := buf[:0]
	for _, a := range v.axes() {
		if a.n > 1 {
			order = append(order, a)
		}
	}
	slices.SortStableFunc(order, func(a, b axis) int { return a.stride - b.stride })
	span := t.Dim // elements covered by one index of the next axis out
	for _, a := range order {
		if a.stride < span {
			kind := "input"
			if output {
				kind = "output"
			}
			return view{}, argErr(name, "%s %s strides (batch %d, seq %d, head %d) make elements of shape [%d %d %d %d] overlap",
				kind, name, bs, ss, hs, got[0], got[1], got[2], got[3])
		}
		if span, ok = mulAdd(a.n-1, a.stride, span); !ok {
			return view{}, argErr(name, "%s strides (batch %d, seq %d, head %d) with shape [%d %d %d %d] overflow int", name, bs, ss, hs, got[0], got[1], got[2], got[3])
		}
	}
	// span is now the distance from the first element to one past the last.
	if span > t.dataLen() {
		return view{}, argErr(name, "%s needs %d elements for shape [%d %d %d %d] with its strides, has %d", name, span, got[0], got[1], got[2], got[3], t.dataLen())
	}
	// An axis of one index is never stepped, but the kernels take the
	// seq stride as a leading dimension.
	if t.Seq == 1 {
		v.ss = max(v.ss, t.Dim)
	}
	return v, nil
}

// off returns the element offset of row (b, s, h).
func (v view) off(b, s, h int) int { return b*v.bs + s*v.ss + v.hs*h }

// rowTo writes row (b, s, h) of v into dst (len(dst) elements, at most the
// head dim; whole blocks of a block format: checked tensors have dim and
// strides of whole blocks) as float32, rounded to ct when v is not 16-bit
// (16-bit inputs are of the compute type) and ct is not float32.
func (v view) rowTo(dst []float32, b, s, h int, ct DType, k *kernel.Impl) {
	o := v.off(b, s, h)
	f := &formats[v.dt]
	f.load(k, dst, v.raw[f.bytes(o):f.bytes(o+len(dst))], v.scale)
	if ct != Float32 && !f.is16 {
		roundTo(dst, ct, k)
	}
}

// rowIn returns row (b, s, h) of v as len(buf) values of type ct: the
// row itself where v is float32 and ct is Float32 (no copy), else rowTo's
// values in buf.
func (v view) rowIn(buf []float32, b, s, h int, ct DType, k *kernel.Impl) []float32 {
	if v.dt == Float32 && ct == Float32 {
		return v.row(b, s, h)[:len(buf)]
	}
	v.rowTo(buf, b, s, h, ct, k)
	return buf
}

// matrix returns rows (b, s..s+n-1, h) of v as a float32 matrix of n rows
// of the head dim, and its leading dimension: v's own memory when it is
// float32 and needs no rounding, else *scratch filled by conversion.
func (v view) matrix(scratch *[]float32, b, s, h, n int, ct DType, k *kernel.Impl) ([]float32, int) {
	d := v.shape[3]
	if v.dt == Float32 && ct == Float32 {
		return v.data[v.off(b, s, h):], v.ss
	}
	buf := grow(scratch, n*d)
	for r := 0; r < n; r++ {
		v.rowTo(buf[r*d:(r+1)*d], b, s+r, h, ct, k)
	}
	return buf, d
}

// storeRow writes src (the head dim's elements) to row (b, s, h) of v,
// rounding to v's type (fp8: src/scale, saturating). Only a Q8_0 or Q4_0
// row can fail (NaN, Inf or values beyond what its fp16 scale holds).
func (v view) storeRow(src []float32, b, s, h int, k *kernel.Impl) error {
	o := v.off(b, s, h)
	f := &formats[v.dt]
	return f.store(k, v.raw[f.bytes(o):f.bytes(o+len(src))], src, v.scale)
}

// roundTo rounds x in place to the values of type ct (to nearest even).
func roundTo(x []float32, ct DType, k *kernel.Impl) { k.RoundF32(x, ct.elem()) }

// commit stores row, returned by workspace.outRow for row (b, s, h) of v, in
// v: nothing to do for float32, a rounding conversion for 16-bit types.
func (v view) commit(row []float32, b, s, h int, k *kernel.Impl) {
	if v.dt != Float32 {
		v.storeRow(row, b, s, h, k)
	}
}

// denseView is a float32 view of buf with the dense layout of shape.
func denseView(buf []float32, shape [4]int) view {
	hs := shape[3]
	ss := shape[2] * hs
	return view{data: buf, raw: asBytes(buf), dt: Float32, bs: shape[1] * ss, ss: ss, hs: hs, shape: shape}
}

// rows16 returns row (b, s, h) of a 16-bit view and the seq stride, for
// copying 16-bit rows as they are.
func (v view) rows16(b, s, h int) ([]uint16, int) { return v.h[v.off(b, s, h):], v.ss }

// toHalf rounds src to the 16-bit type ct into dst.
func toHalf(k *kernel.Impl, ct DType, dst []uint16, src []float32) {
	if ct == Float16 {
		k.F32ToF16(dst, src)
	} else {
		k.F32ToBF16(dst, src)
	}
}
