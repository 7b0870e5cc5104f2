package flashattn

import (
	"unsafe"

	"github.com/flashattn/flashattn/half"
	"github.com/flashattn/flashattn/internal/kernel"
)

// formats.go is the table of element types (llama.cpp's type_traits): one
// row per DType with its name, its storage format (the kernel.Format
// whose decode kernels read it in place), its Tensor field, and its row
// conversions. Code that handles every type looks its row up once instead
// of switching on the type.

// dtypeFormat is a DType's row of formats.
type dtypeFormat struct {
	name      string
	kf        kernel.Format
	cacheOnly bool // accepted only as the k and v of a KV cache
	is16      bool // a 16-bit type: rows are already in the compute type
	scaled    bool // uses Tensor.Scale (fp8)
	// raw returns the stored bytes of t's field of this type and whether
	// that field is set (a non-nil empty slice is set). It and wrap take
	// and return the Tensor by value: a pointer passed to a function
	// value escapes, and would allocate a Tensor per call.
	raw func(t Tensor) ([]byte, bool)
	// wrap returns t with its field of this type set to b's memory (b
	// aligned for the field's elements).
	wrap func(t Tensor, b []byte) Tensor
	// load sets dst from the row src (dst's values), with the per-tensor
	// scale; store stores src into the row dst, failing only where the
	// type cannot hold a value (q8_0, q4_0). k may be nil (generic
	// conversions).
	load  func(k *kernel.Impl, dst []float32, src []byte, scale float32)
	store func(k *kernel.Impl, dst []byte, src []float32, scale float32) error
}

// bytes is the size in bytes of n values (a multiple of the block).
func (f *dtypeFormat) bytes(n int) int { return f.kf.RowBytes(n) }

// castSlice reinterprets b's memory as []T (nil when b is nil; an empty
// non-nil b gives an empty non-nil slice).
func castSlice[T any](b []byte) []T {
	var z T
	if b == nil {
		return nil
	}
	if len(b) < int(unsafe.Sizeof(z)) {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// asBytes returns s's memory as bytes: nil for nil, empty non-nil for an
// empty s.
func asBytes[T any](s []T) []byte {
	if s == nil {
		return nil
	}
	if b := kernel.Bytes(s); b != nil {
		return b
	}
	return []byte{}
}

// field returns the raw and wrap functions of the Tensor field of T
// that get reads and set writes.
func field[T any](get func(t Tensor) []T, set func(t *Tensor, s []T)) (func(t Tensor) ([]byte, bool), func(t Tensor, b []byte) Tensor) {
	return func(t Tensor) ([]byte, bool) { s := get(t); return asBytes(s), s != nil },
		func(t Tensor, b []byte) Tensor { set(&t, castSlice[T](b)); return t }
}

// kernLoad and kernStore are the conversions of a type without assembly
// converters: the kernel.Format's own, fp8 with the scale.
func kernLoad(f kernel.Format) func(k *kernel.Impl, dst []float32, src []byte, scale float32) {
	return func(_ *kernel.Impl, dst []float32, src []byte, scale float32) {
		if scale != 0 && scale != 1 {
			kernel.DequantizeFP8(f, dst, src, scale)
			return
		}
		f.Dequantize(dst, src)
	}
}

func kernStore(f kernel.Format) func(k *kernel.Impl, dst []byte, src []float32, scale float32) error {
	return func(_ *kernel.Impl, dst []byte, src []float32, scale float32) error {
		if scale != 0 && scale != 1 {
			return kernel.QuantizeFP8(f, dst, src, scale)
		}
		return f.Quantize(dst, src)
	}
}

// formats is the table of the element types.
var formats = func() (fs [numDTypes]dtypeFormat) {
	fs[Float32] = dtypeFormat{name: "float32", kf: kernel.FormatF32,
		load: func(_ *kernel.Impl, dst []float32, src []byte, _ float32) { copy(dst, castSlice[float32](src)) },
		store: func(_ *kernel.Impl, dst []byte, src []float32, _ float32) error {
			copy(castSlice[float32](dst), src)
			return nil
		}}
	fs[Float32].raw, fs[Float32].wrap = field(func(t Tensor) []float32 { return t.Data }, func(t *Tensor, s []float32) { t.Data = s })
	fs[BFloat16] = dtypeFormat{name: "bfloat16", kf: kernel.FormatBF16, is16: true,
		load: func(k *kernel.Impl, dst []float32, src []byte, _ float32) { k.BF16ToF32(dst, castSlice[uint16](src)) },
		store: func(k *kernel.Impl, dst []byte, src []float32, _ float32) error {
			k.F32ToBF16(castSlice[uint16](dst), src)
			return nil
		}}
	fs[BFloat16].raw, fs[BFloat16].wrap = field(func(t Tensor) []half.BF16 { return t.BF16 }, func(t *Tensor, s []half.BF16) { t.BF16 = s })
	fs[Float16] = dtypeFormat{name: "float16", kf: kernel.FormatF16, is16: true,
		load: func(k *kernel.Impl, dst []float32, src []byte, _ float32) { k.F16ToF32(dst, castSlice[uint16](src)) },
		store: func(k *kernel.Impl, dst []byte, src []float32, _ float32) error {
			k.F32ToF16(castSlice[uint16](dst), src)
			return nil
		}}
	fs[Float16].raw, fs[Float16].wrap = field(func(t Tensor) []half.F16 { return t.F16 }, func(t *Tensor, s []half.F16) { t.F16 = s })
	for _, c := range []struct {
		dt     DType
		name   string
		kf     kernel.Format
		scaled bool
		get    func(t Tensor) []byte
		set    func(t *Tensor, s []byte)
	}{
		{Q8_0, "q8_0", kernel.FormatQ8, false, func(t Tensor) []byte { return t.Q8 }, func(t *Tensor, s []byte) { t.Q8 = s }},
		{Q4_0, "q4_0", kernel.FormatQ4, false, func(t Tensor) []byte { return t.Q4 }, func(t *Tensor, s []byte) { t.Q4 = s }},
		{FP8E4M3, "fp8_e4m3", kernel.FormatE4M3, true, func(t Tensor) []byte { return t.E4M3 }, func(t *Tensor, s []byte) { t.E4M3 = s }},
		{FP8E5M2, "fp8_e5m2", kernel.FormatE5M2, true, func(t Tensor) []byte { return t.E5M2 }, func(t *Tensor, s []byte) { t.E5M2 = s }},
	} {
		fs[c.dt] = dtypeFormat{name: c.name, kf: c.kf, cacheOnly: true, scaled: c.scaled, load: kernLoad(c.kf), store: kernStore(c.kf)}
		fs[c.dt].raw, fs[c.dt].wrap = field(c.get, c.set)
	}
	return fs
}()
