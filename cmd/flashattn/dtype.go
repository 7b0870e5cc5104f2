package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flashattn/flashattn"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/npy"
	"github.com/flashattn/flashattn/half"
)

// The element types of the command line: -dtype f32|bf16|f16 for the
// computation (and -kv-dtype or bench's decode -dtype also q8_0, q4_0,
// fp8_e4m3 or fp8_e5m2 for a KV cache). Files hold float32 ('<f4') or
// float16 ('<f2'); NumPy has no bfloat16, so bf16 results are written as
// '<f4' holding exact bf16 values.

// dtypeFlag is a row of dtypeFlags: a type's flag spelling (and another
// accepted one), whether it is a KV-cache type (read with float32
// queries), the block its head dims must be a multiple of, and the bytes
// one element takes in a tensor.
type dtypeFlag struct {
	name, alias string
	dt          flashattn.DType
	cache       bool
	block       int
	bytes       float64
}

// dtypeFlags are the types of the command line, computation types first.
var dtypeFlags = []dtypeFlag{
	{"f32", "", flashattn.Float32, false, 1, 4},
	{"bf16", "", flashattn.BFloat16, false, 1, 2},
	{"f16", "fp16", flashattn.Float16, false, 1, 2},
	{"q8_0", "", flashattn.Q8_0, true, 32, 34.0 / 32}, // a 2-byte scale per block of 32 one-byte values
	{"q4_0", "", flashattn.Q4_0, true, 32, 18.0 / 32}, // a 2-byte scale per block of 32 half-byte values
	{"fp8_e4m3", "", flashattn.FP8E4M3, true, 1, 1},
	{"fp8_e5m2", "", flashattn.FP8E5M2, true, 1, 1},
}

// dtypeFlagOf is the row of dt (f32's for an unknown one).
func dtypeFlagOf(dt flashattn.DType) dtypeFlag {
	for _, f := range dtypeFlags {
		if f.dt == dt {
			return f
		}
	}
	return dtypeFlags[0]
}

// dtypeFlagNamed is the row of the flag spelling name.
func dtypeFlagNamed(name string) (dtypeFlag, bool) {
	for _, f := range dtypeFlags {
		if f.name == name {
			return f, true
		}
	}
	return dtypeFlag{}, false
}

// parseDType reads the value s of flag name: f32, bf16, f16 (or fp16), and
// the cache types q8_0, q4_0, fp8_e4m3 and fp8_e5m2 when q8 is set.
func parseDType(name, s string, q8 bool) (flashattn.DType, error) {
	var names []string
	for _, f := range dtypeFlags {
		if f.cache && !q8 {
			continue
		}
		if s == f.name || s == f.alias && s != "" {
			return f.dt, nil
		}
		names = append(names, f.name)
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return 0, fmt.Errorf("%s %q: want %s", name, s, want)
}

// dtypeName is the flag spelling of dt.
func dtypeName(dt flashattn.DType) string { return dtypeFlagOf(dt).name }

// is16 reports whether dt is a 16-bit floating-point type.
func is16(dt flashattn.DType) bool { return dt == flashattn.BFloat16 || dt == flashattn.Float16 }

// storedBytes is the memory one element of dt takes in a tensor: 4, 2,
// 34/32 for q8_0, 18/32 for q4_0, 1 for fp8.
func storedBytes(dt flashattn.DType) float64 { return dtypeFlagOf(dt).bytes }

// typedBytes is the memory an array of dt with the given dimensions
// takes, rounded up (an upper bound that saturates like memlimit.Mul:
// every type but float32 takes at most 2 bytes a value).
func typedBytes(dt flashattn.DType, dims ...int) memlimit.Size {
	n := memlimit.Mul(dims...)
	if dt == flashattn.Float32 {
		return n.Times(4)
	}
	return n.Times(2) // q8_0's 34/32 and q4_0's 18/32 < 2
}

// arrayTensor wraps a float array read from path (F32 or F16 set) as a
// dense tensor of the given shape and converts it to dt: exactly for
// wider types, rounding to nearest even for narrower ones, quantising for
// q8_0 and q4_0 (which fails, naming path, on values it cannot hold), fp8
// with the per-tensor scale (0 or 1 for the other types: none).
func arrayTensor(path string, a npy.Array, shape [4]int, dt flashattn.DType, scale float32) (flashattn.Tensor, error) {
	var src flashattn.Tensor
	if a.F16 != nil {
		src = flashattn.DenseOf(a.F16, shape[0], shape[1], shape[2], shape[3])
	} else {
		src = flashattn.Dense(a.F32, shape[0], shape[1], shape[2], shape[3])
	}
	if src.DType() == dt {
		return src, nil
	}
	dst := flashattn.NewTensorOf(dt, shape[0], shape[1], shape[2], shape[3])
	if dt == flashattn.FP8E4M3 || dt == flashattn.FP8E5M2 {
		dst.Scale = scale
	}
	if err := flashattn.Convert(dst, src); err != nil {
		var ae *flashattn.ArgError
		if errors.As(err, &ae) {
			return dst, fmt.Errorf("%s: cannot convert to %s: %s", path, dtypeName(dt), ae.Msg)
		}
		return dst, fmt.Errorf("%s: cannot convert to %s: %v", path, dtypeName(dt), cleanErr(err))
	}
	return dst, nil
}

// floats32 returns the elements of a float array as float32 (float16
// widened exactly).
func floats32(a npy.Array) []float32 {
	if a.F16 == nil {
		return a.F32
	}
	out := make([]float32, len(a.F16))
	half.DecodeF16(out, a.F16)
	return out
}

// outArray is the .npy array written for a dense result tensor t: float16
// as '<f2'; float32 as '<f4', or as '<f2' when f16 is set (the GPU returns
// its float16 results as float32 holding float16 values, so the narrowing
// is exact); bfloat16 and q8_0 widened exactly to '<f4'.
func outArray(t flashattn.Tensor, shape []int, f16 bool) (npy.Array, error) {
	switch dt := t.DType(); {
	case dt == flashattn.Float16:
		return npy.Array{Shape: shape, F16: t.F16}, nil
	case dt == flashattn.Float32 && !f16:
		return npy.Array{Shape: shape, F32: t.Data}, nil
	case dt == flashattn.Float32:
		h := flashattn.NewTensorOf(flashattn.Float16, t.Batch, t.Seq, t.Heads, t.Dim)
		if err := flashattn.Convert(h, t); err != nil {
			return npy.Array{}, cleanErr(err)
		}
		return npy.Array{Shape: shape, F16: h.F16}, nil
	}
	w := flashattn.NewTensor(t.Batch, t.Seq, t.Heads, t.Dim)
	if err := flashattn.Convert(w, t); err != nil {
		return npy.Array{}, cleanErr(err)
	}
	return npy.Array{Shape: shape, F32: w.Data}, nil
}

// quantized reports whether dt is a KV-cache-only type (q8_0, q4_0, fp8),
// read with float32 queries.
func quantized(dt flashattn.DType) bool { return dtypeFlagOf(dt).cache }

// dtypeBlock is the number of values dt stores per block: head dims must
// be multiples of it (32 for q8_0 and q4_0, else 1).
func dtypeBlock(dt flashattn.DType) int { return dtypeFlagOf(dt).block }
