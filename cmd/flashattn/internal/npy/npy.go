// Package npy reads and writes NumPy .npy files for the flashattn command
// line: little-endian float32 ('<f4'), float16 ('<f2') and int32 ('<i4')
// arrays in C order, and one-byte arrays (uint8 '|u1', int8 '|i1', bool
// '|b1') for masks.
//
// Reading validates everything before allocating: that the path is a
// regular file (a FIFO, device or directory is refused at once, never
// opened for a blocking read), the magic string, the version, the header
// dictionary (exactly the keys 'descr', 'fortran_order' and 'shape'), the
// dtype, the memory order, that the file holds exactly the number of
// elements the shape describes, and that those elements fit in the memory
// available (see Reader). Reading never panics, whatever the bytes, and
// never allocates more than the file's size justifies. Errors start with
// the file's path, e.g. "q.npy: dtype <f8, want float32 (<f4)".
//
// Writing produces version 1.0 files whose data starts at a multiple of 64
// bytes, with the header numpy itself writes. WriteFiles and WriteAll write
// several files of one directory all or nothing, with a journal whose
// rename is the single commit point: on any failure, or when their context
// is canceled, every destination is left byte-identical to what it was, and
// Recover (which every write runs first) completes or undoes a write whose
// process was killed.
package npy

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/flashattn/flashattn/half"
)

// Array is a decoded array: exactly one of F32, F16, I32 and U8 is non-nil
// (or all are nil for an array with no elements of unknown kind; see Read).
// F16 holds the IEEE binary16 elements of a '<f2' array bit for bit (NaN
// payloads included). U8 holds the bytes of a one-byte array ('|u1', '|i1'
// or '|b1' when read; written as '|u1').
type Array struct {
	Shape []int
	F32   []float32
	F16   []half.F16
	I32   []int32
	U8    []uint8
}

// shapeLen returns the number of elements of the shape (1 for a scalar), or
// -1 if a dimension is negative or the product does not fit in an int.
func shapeLen(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d == 0 {
			n = 0
		}
	}
	if n == 0 {
		return 0
	}
	for _, d := range shape {
		if n > math.MaxInt/d {
			return -1
		}
		n *= d
	}
	return n
}

// Len returns the number of elements of the shape (1 for a scalar), or -1
// if a dimension is negative or the product does not fit in an int.
func (a Array) Len() int { return shapeLen(a.Shape) }

const (
	dtypeF32  = "<f4"
	dtypeF16  = "<f2"
	dtypeI32  = "<i4"
	dtypeU8   = "|u1"
	dtypeI8   = "|i1"
	dtypeBool = "|b1"

	magic = "\x93NUMPY"
	// maxHeaderLen bounds the header dictionary we are willing to read.
	maxHeaderLen = 1 << 20
	// maxElems bounds the element count so that byte sizes fit in int64.
	maxElems = math.MaxInt / 8
)

// Sets of accepted dtypes.
var (
	oneByte  = []string{dtypeU8, dtypeI8, dtypeBool}
	anyDtype = []string{dtypeF32, dtypeF16, dtypeI32, dtypeU8, dtypeI8, dtypeBool}
	floats   = []string{dtypeF32, dtypeF16}
)

// elemSize is the size in bytes of one element of a supported dtype.
func elemSize(descr string) int {
	switch descr {
	case dtypeU8, dtypeI8, dtypeBool:
		return 1
	case dtypeF16:
		return 2
	}
	return 4
}

// header is the parsed header of a .npy file.
type header struct {
	descr   string
	fortran bool
	shape   []int
	n       int64 // number of elements
	dataOff int64 // offset of the first data byte
}

// parseError is a decoding error without the file name.
type parseError string

func (e parseError) Error() string { return string(e) }

func errorf(format string, args ...any) error { return parseError(fmt.Sprintf(format, args...)) }

// unwrapPath drops the operation and file name of a *PathError or
// *LinkError (they name temporary files), keeping the cause.
func unwrapPath(err error) error {
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// named prefixes err with path, dropping the operation and path of an
// *os.PathError (which may name a temporary file) but keeping its cause.
func named(path string, err error) error {
	return fmt.Errorf("%s: %w", path, unwrapPath(err))
}
