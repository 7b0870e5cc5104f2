package npy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/regfile"
	"github.com/flashattn/flashattn/half"
)

// Reader reads .npy files, refusing any whose elements would need more
// memory than Limit allows; the zero Reader checks only against the file's
// size. The package-level functions read with the limit memlimit.Detect
// returns.
type Reader struct {
	// Limit bounds the memory the elements of one array may take.
	Limit memlimit.Limit
}

// ReadFloat32 reads a little-endian float32 ('<f4') C-order array. A scalar
// file gives an empty shape and one element.
func (r Reader) ReadFloat32(path string) (data []float32, shape []int, err error) {
	a, err := r.readFile(path, []string{dtypeF32})
	if err != nil {
		return nil, nil, err
	}
	return a.F32, a.Shape, nil
}

// ReadFloat16 reads a little-endian IEEE float16 ('<f2') C-order array,
// its elements bit for bit.
func (r Reader) ReadFloat16(path string) (data []half.F16, shape []int, err error) {
	a, err := r.readFile(path, []string{dtypeF16})
	if err != nil {
		return nil, nil, err
	}
	return a.F16, a.Shape, nil
}

// ReadFloat reads a floating-point array of either width: float32 ('<f4',
// in the returned Array's F32) or float16 ('<f2', in its F16). Any other
// dtype is an error naming both.
func (r Reader) ReadFloat(path string) (Array, error) {
	return r.readFile(path, floats)
}

// ReadInt32 reads a little-endian int32 ('<i4') C-order array.
func (r Reader) ReadInt32(path string) (data []int32, shape []int, err error) {
	a, err := r.readFile(path, []string{dtypeI32})
	if err != nil {
		return nil, nil, err
	}
	return a.I32, a.Shape, nil
}

// ReadBytes reads a one-byte C-order array: uint8 ('|u1'), int8 ('|i1') or
// bool ('|b1'), as its raw bytes (an int8 -1 is 0xff), for masks where a
// nonzero element means true. A bool element other than 0 or 1 is an
// error.
func (r Reader) ReadBytes(path string) (data []uint8, shape []int, err error) {
	a, err := r.readFile(path, oneByte)
	if err != nil {
		return nil, nil, err
	}
	return a.U8, a.Shape, nil
}

// Read reads an array of any dtype the package reads ('<f4', '<f2', '<i4',
// '|u1', '|i1', '|b1'); the fields of the other kinds are nil.
func (r Reader) Read(path string) (Array, error) {
	return r.readFile(path, anyDtype)
}

// ReadFloat32 reads a '<f4' array with the memory this machine has
// available as the limit (see Reader).
func ReadFloat32(path string) (data []float32, shape []int, err error) {
	return Reader{Limit: memlimit.Detect()}.ReadFloat32(path)
}

// ReadFloat reads a '<f4' or '<f2' array with the memory this machine has
// available as the limit (see Reader).
func ReadFloat(path string) (Array, error) {
	return Reader{Limit: memlimit.Detect()}.ReadFloat(path)
}

// ReadInt32 reads a '<i4' array with the memory this machine has available
// as the limit (see Reader).
func ReadInt32(path string) (data []int32, shape []int, err error) {
	return Reader{Limit: memlimit.Detect()}.ReadInt32(path)
}

// Read reads an array of any supported dtype with the memory this machine
// has available as the limit (see Reader).
func Read(path string) (Array, error) {
	return Reader{Limit: memlimit.Detect()}.Read(path)
}

// Info describes a .npy file from its header.
type Info struct {
	Shape []int
	// Descr is the dtype: "<f4", "<f2", "<i4", "|u1", "|i1" or "|b1".
	Descr string
}

// Bytes is the memory the array's elements take once read.
func (i Info) Bytes() memlimit.Size {
	return memlimit.Mul(max(shapeLen(i.Shape), 0), elemSize(i.Descr))
}

// Stat checks a .npy file as reading it would (a regular file, a valid
// header for a C-order array of one of the dtypes this package reads, a
// size that matches the shape)
// but reads only the header, so that a caller can add up what several
// files need before reading any of them.
func Stat(path string) (Info, error) {
	f, st, err := open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	h, err := checkHeader(bufio.NewReaderSize(f, 4096), st.Size(), anyDtype)
	if err != nil {
		return Info{}, fileError(path, err)
	}
	return Info{Shape: h.shape, Descr: h.descr}, nil
}

// open opens path for reading if it is a regular file (see regfile.Open).
func open(path string) (*os.File, fs.FileInfo, error) { return regfile.Open(path) }

// kind names the type of a non-regular file.
func kind(m fs.FileMode) string { return regfile.Kind(m) }

// fileError prefixes a decoding error with the path.
func fileError(path string, err error) error {
	var pe parseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %s", path, pe)
	}
	return fmt.Errorf("%s: %w", path, err)
}

func (r Reader) readFile(path string, want []string) (Array, error) {
	f, st, err := open(path)
	if err != nil {
		return Array{}, err
	}
	defer f.Close()
	a, err := decode(bufio.NewReaderSize(f, 64<<10), st.Size(), want, r.Limit)
	if err != nil {
		return Array{}, fileError(path, err)
	}
	return a, nil
}

// checkHeader reads the header from r, a file of size bytes, and checks the
// dtype (one of want), the order, and that the size matches the shape.
func checkHeader(r io.Reader, size int64, want []string) (*header, error) {
	h, err := decodeHeader(r, size)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(want, h.descr) {
		return nil, errorf("dtype %s, want %s", h.descr, dtypeList(want))
	}
	if h.fortran {
		return nil, errorf("fortran_order arrays are not supported")
	}
	elem := int64(elemSize(h.descr))
	avail := size - h.dataOff
	if avail < h.n*elem {
		return nil, errorf("truncated: header says %d elements, file has %d", h.n, avail/elem)
	}
	if avail > h.n*elem {
		return nil, errorf("%d bytes of trailing data after the %d elements the header describes", avail-h.n*elem, h.n)
	}
	return h, nil
}

// dtypeList names the dtypes of want for an error message.
func dtypeList(want []string) string {
	var b strings.Builder
	for i, d := range want {
		switch {
		case i == 0:
		case i == len(want)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", dtypeName(d), d)
	}
	return b.String()
}

// decode reads a whole .npy file of the given size from r. Its dtype must
// be one of want, and its elements must fit in limit.
func decode(r io.Reader, size int64, want []string, limit memlimit.Limit) (Array, error) {
	h, err := checkHeader(r, size, want)
	if err != nil {
		return Array{}, err
	}
	elem := elemSize(h.descr)
	if err := limit.Check("", memlimit.Mul(int(h.n), elem)); err != nil {
		return Array{}, err
	}
	a := Array{Shape: h.shape}
	n := int(h.n)
	if elem == 1 {
		return decodeBytes(r, h, a)
	}
	var buf [64 << 10]byte
	switch h.descr {
	case dtypeF32:
		a.F32 = make([]float32, n)
	case dtypeF16:
		a.F16 = make([]half.F16, n)
	default:
		a.I32 = make([]int32, n)
	}
	for done := 0; done < n; {
		chunk := min(n-done, len(buf)/elem)
		if err := readData(r, buf[:chunk*elem], h); err != nil {
			return Array{}, err
		}
		switch {
		case a.F16 != nil:
			for t := 0; t < chunk; t++ {
				a.F16[done+t] = half.F16(binary.LittleEndian.Uint16(buf[2*t:]))
			}
		case a.F32 != nil:
			for t := 0; t < chunk; t++ {
				a.F32[done+t] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*t:]))
			}
		default:
			for t := 0; t < chunk; t++ {
				a.I32[done+t] = int32(binary.LittleEndian.Uint32(buf[4*t:]))
			}
		}
		done += chunk
	}
	return a, atEnd(r, h)
}

// decodeBytes reads the elements of a one-byte array into a.U8, checking
// that bools are 0 or 1.
func decodeBytes(r io.Reader, h *header, a Array) (Array, error) {
	a.U8 = make([]uint8, h.n)
	if err := readData(r, a.U8, h); err != nil {
		return Array{}, err
	}
	if h.descr == dtypeBool {
		for i, x := range a.U8 {
			if x > 1 {
				return Array{}, errorf("bool element %d is %d, want 0 or 1", i, x)
			}
		}
	}
	return a, atEnd(r, h)
}

// readData fills buf with element bytes from r; running out of data is a
// truncated file.
func readData(r io.Reader, buf []byte, h *header) error {
	_, err := io.ReadFull(r, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errorf("truncated: header says %d elements, file ended early", h.n)
	}
	return err
}

// atEnd checks that r holds nothing after the elements: the size came from
// Stat, so make sure the file did not grow meanwhile.
func atEnd(r io.Reader, h *header) error {
	var one [1]byte
	if m, _ := r.Read(one[:]); m != 0 {
		return errorf("trailing data after the %d elements the header describes", h.n)
	}
	return nil
}
