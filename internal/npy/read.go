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
	"syscall"

	"github.com/flashattn/flashattn/internal/memlimit"
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
	a, err := r.readFile(path, dtypeF32)
	if err != nil {
		return nil, nil, err
	}
	return a.F32, a.Shape, nil
}

// ReadInt32 reads a little-endian int32 ('<i4') C-order array.
func (r Reader) ReadInt32(path string) (data []int32, shape []int, err error) {
	a, err := r.readFile(path, dtypeI32)
	if err != nil {
		return nil, nil, err
	}
	return a.I32, a.Shape, nil
}

// Read reads a '<f4' or '<i4' array; the field of the other kind is nil.
func (r Reader) Read(path string) (Array, error) {
	return r.readFile(path, "")
}

// ReadFloat32 reads a '<f4' array with the memory this machine has
// available as the limit (see Reader).
func ReadFloat32(path string) (data []float32, shape []int, err error) {
	return Reader{Limit: memlimit.Detect()}.ReadFloat32(path)
}

// ReadInt32 reads a '<i4' array with the memory this machine has available
// as the limit (see Reader).
func ReadInt32(path string) (data []int32, shape []int, err error) {
	return Reader{Limit: memlimit.Detect()}.ReadInt32(path)
}

// Read reads a '<f4' or '<i4' array with the memory this machine has
// available as the limit (see Reader).
func Read(path string) (Array, error) {
	return Reader{Limit: memlimit.Detect()}.Read(path)
}

// Info describes a .npy file from its header.
type Info struct {
	Shape []int
	// Descr is the dtype: "<f4" or "<i4".
	Descr string
}

// Bytes is the memory the array's elements take once read.
func (i Info) Bytes() memlimit.Size { return memlimit.Mul(max(shapeLen(i.Shape), 0), 4) }

// Stat checks a .npy file as reading it would (a regular file, a valid
// header for a '<f4' or '<i4' C-order array, a size that matches the shape)
// but reads only the header, so that a caller can add up what several
// files need before reading any of them.
func Stat(path string) (Info, error) {
	f, st, err := open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	h, err := checkHeader(bufio.NewReaderSize(f, 4096), st.Size(), "")
	if err != nil {
		return Info{}, fileError(path, err)
	}
	return Info{Shape: h.shape, Descr: h.descr}, nil
}

// open opens path for reading after checking that it is a regular file:
// stat first, so that a FIFO is never opened (opening one blocks until a
// writer appears), then open without blocking and check the opened file
// again in case the path was replaced in between.
func open(path string) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, named(path, err)
	}
	if err := regular(path, st); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, named(path, err)
	}
	st, err = f.Stat()
	if err == nil {
		err = regular(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// regular returns an error naming path unless st is a regular file.
func regular(path string, st fs.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: not a regular file (%s)", path, kind(st.Mode()))
}

// kind names the type of a non-regular file.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an irregular file"
}

// fileError prefixes a decoding error with the path.
func fileError(path string, err error) error {
	var pe parseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %s", path, pe)
	}
	return fmt.Errorf("%s: %w", path, err)
}

func (r Reader) readFile(path, want string) (Array, error) {
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
// dtype (want, or either supported one if want is empty), the order, and
// that the size matches the shape.
func checkHeader(r io.Reader, size int64, want string) (*header, error) {
	h, err := decodeHeader(r, size)
	if err != nil {
		return nil, err
	}
	if want != "" && h.descr != want {
		return nil, errorf("dtype %s, want %s (%s)", h.descr, dtypeName(want), want)
	}
	if want == "" && h.descr != dtypeF32 && h.descr != dtypeI32 {
		return nil, errorf("dtype %s, want float32 (%s) or int32 (%s)", h.descr, dtypeF32, dtypeI32)
	}
	if h.fortran {
		return nil, errorf("fortran_order arrays are not supported")
	}
	const elem = 4
	avail := size - h.dataOff
	if avail < h.n*elem {
		return nil, errorf("truncated: header says %d elements, file has %d", h.n, avail/elem)
	}
	if avail > h.n*elem {
		return nil, errorf("%d bytes of trailing data after the %d elements the header describes", avail-h.n*elem, h.n)
	}
	return h, nil
}

// decode reads a whole .npy file of the given size from r. If want is
// non-empty the dtype must equal it; otherwise '<f4' and '<i4' are accepted.
// The elements must fit in limit.
func decode(r io.Reader, size int64, want string, limit memlimit.Limit) (Array, error) {
	h, err := checkHeader(r, size, want)
	if err != nil {
		return Array{}, err
	}
	const elem = 4
	if err := limit.Check("", memlimit.Mul(int(h.n), elem)); err != nil {
		return Array{}, err
	}
	a := Array{Shape: h.shape}
	n := int(h.n)
	var buf [64 << 10]byte
	if h.descr == dtypeF32 {
		a.F32 = make([]float32, n)
	} else {
		a.I32 = make([]int32, n)
	}
	for done := 0; done < n; {
		chunk := min(n-done, len(buf)/elem)
		if _, err := io.ReadFull(r, buf[:chunk*elem]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return Array{}, errorf("truncated: header says %d elements, file ended early", h.n)
			}
			return Array{}, err
		}
		for t := 0; t < chunk; t++ {
			u := binary.LittleEndian.Uint32(buf[t*elem:])
			if a.F32 != nil {
				a.F32[done+t] = math.Float32frombits(u)
			} else {
				a.I32[done+t] = int32(u)
			}
		}
		done += chunk
	}
	// The size came from Stat; make sure the file did not grow meanwhile.
	var one [1]byte
	if m, _ := r.Read(one[:]); m != 0 {
		return Array{}, errorf("trailing data after the %d elements the header describes", h.n)
	}
	return a, nil
}
