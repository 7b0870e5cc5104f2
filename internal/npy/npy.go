// Package npy reads and writes NumPy .npy files for the flashattn command
// line: little-endian float32 ('<f4') and int32 ('<i4') arrays in C order.
//
// Reading validates everything before allocating: the magic string, the
// version, the header dictionary (exactly the keys 'descr', 'fortran_order'
// and 'shape'), the dtype, the memory order, and that the file holds exactly
// the number of elements the shape describes. Reading never panics, whatever
// the bytes, and never allocates more than the file's size justifies. Errors
// start with the file's path, e.g. "q.npy: dtype <f8, want float32 (<f4)".
//
// Writing produces version 1.0 files whose data starts at a multiple of 64
// bytes, with the header numpy itself writes, and is atomic: the data goes to
// a temporary file in the destination directory, which is synced and then
// renamed over the destination.
package npy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Array is a decoded array: exactly one of F32 and I32 is non-nil (or both
// are nil for an array with no elements of unknown kind; see Read).
type Array struct {
	Shape []int
	F32   []float32
	I32   []int32
}

// Len returns the number of elements of the shape (1 for a scalar).
func (a Array) Len() int {
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

const (
	dtypeF32 = "<f4"
	dtypeI32 = "<i4"

	magic = "\x93NUMPY"
	// maxHeaderLen bounds the header dictionary we are willing to read.
	maxHeaderLen = 1 << 20
	// maxElems bounds the element count so that byte sizes fit in int64.
	maxElems = math.MaxInt / 8
)

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

// decodeHeader reads and validates the preamble and header dictionary from r,
// a file of size bytes.
func decodeHeader(r io.Reader, size int64) (*header, error) {
	var pre [10]byte
	n, err := io.ReadFull(r, pre[:8])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n < 6 || string(pre[:6]) != magic {
		return nil, errorf("not a .npy file")
	}
	if n < 8 {
		return nil, errorf("truncated header")
	}
	major, minor := pre[6], pre[7]
	var hlen int64
	var pos int64
	switch major {
	case 1:
		if _, err := io.ReadFull(r, pre[8:10]); err != nil {
			return nil, errorf("truncated header")
		}
		hlen = int64(binary.LittleEndian.Uint16(pre[8:10]))
		pos = 10
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return nil, errorf("truncated header")
		}
		hlen = int64(binary.LittleEndian.Uint32(l[:]))
		pos = 12
	default:
		return nil, errorf("unsupported .npy format version %d.%d", major, minor)
	}
	if hlen > maxHeaderLen {
		return nil, errorf("header of %d bytes is too large", hlen)
	}
	if size >= 0 && pos+hlen > size {
		return nil, errorf("truncated header: header says %d bytes, file has %d", hlen, size-pos)
	}
	buf := make([]byte, hlen)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, errorf("truncated header")
		}
		return nil, err
	}
	h, err := parseDict(string(buf), major)
	if err != nil {
		return nil, err
	}
	h.dataOff = pos + hlen
	return h, nil
}

// parseDict parses the header dictionary, a Python literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
func parseDict(s string, major byte) (*header, error) {
	if major < 3 {
		// Versions 1 and 2 are latin-1; anything outside ASCII cannot be a
		// valid descr or shape, so simply reject it.
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return nil, errorf("invalid header: non-ASCII byte")
			}
		}
	}
	p := &dictParser{s: s}
	h := &header{}
	seen := map[string]bool{}
	p.skipSpace()
	if !p.eat('{') {
		return nil, errorf("invalid header: not a dictionary")
	}
	for {
		p.skipSpace()
		if p.eat('}') {
			break
		}
		key, ok := p.str()
		if !ok {
			return nil, errorf("invalid header: bad dictionary key")
		}
		p.skipSpace()
		if !p.eat(':') {
			return nil, errorf("invalid header: missing ':' after %q", key)
		}
		p.skipSpace()
		if seen[key] {
			return nil, errorf("invalid header: duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "descr":
			if p.peek() == '[' {
				return nil, errorf("structured dtypes are not supported")
			}
			v, ok := p.str()
			if !ok {
				return nil, errorf("invalid header: bad 'descr' value")
			}
			h.descr = v
		case "fortran_order":
			switch {
			case p.word("True"):
				h.fortran = true
			case p.word("False"):
				h.fortran = false
			default:
				return nil, errorf("invalid header: bad 'fortran_order' value")
			}
		case "shape":
			shape, err := p.shape()
			if err != nil {
				return nil, err
			}
			h.shape = shape
		default:
			return nil, errorf("invalid header: unexpected key %q", key)
		}
		p.skipSpace()
		if p.eat(',') {
			continue
		}
		p.skipSpace()
		if !p.eat('}') {
			return nil, errorf("invalid header: expected ',' or '}'")
		}
		break
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return nil, errorf("invalid header: trailing characters after the dictionary")
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return nil, errorf("invalid header: missing key %q", k)
		}
	}
	n := int64(1)
	for _, d := range h.shape {
		if d != 0 && n > maxElems/int64(d) {
			return nil, errorf("shape %s is too large", shapeString(h.shape))
		}
		n *= int64(d)
	}
	h.n = n
	return h, nil
}

type dictParser struct {
	s string
	i int
}

func (p *dictParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			p.i++
		default:
			return
		}
	}
}

func (p *dictParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *dictParser) eat(c byte) bool {
	if p.peek() == c && p.i < len(p.s) {
		p.i++
		return true
	}
	return false
}

// word consumes the identifier w if it is next and not followed by an
// identifier character.
func (p *dictParser) word(w string) bool {
	if !strings.HasPrefix(p.s[p.i:], w) {
		return false
	}
	end := p.i + len(w)
	if end < len(p.s) {
		c := p.s[end]
		if c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			return false
		}
	}
	p.i = end
	return true
}

// str parses a simple quoted string without escapes.
func (p *dictParser) str() (string, bool) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", false
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", false
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsAny(v, "\\\n") {
		return "", false
	}
	p.i += end + 2
	return v, true
}

// shape parses a tuple of non-negative integers: (), (3,), (2, 3).
func (p *dictParser) shape() ([]int, error) {
	if !p.eat('(') {
		return nil, errorf("invalid header: 'shape' is not a tuple")
	}
	shape := []int{}
	for {
		p.skipSpace()
		if p.eat(')') {
			break
		}
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		tok := p.s[start:p.i]
		if tok == "" {
			if p.peek() == '-' {
				return nil, errorf("invalid header: negative dimension in 'shape'")
			}
			return nil, errorf("invalid header: bad 'shape' value")
		}
		// Python 2 headers may carry an L suffix.
		if p.peek() == 'L' {
			p.i++
		}
		d, err := strconv.ParseInt(tok, 10, 64)
		if err != nil || d > maxElems {
			return nil, errorf("invalid header: dimension %s in 'shape' is too large", tok)
		}
		if len(shape) >= 64 {
			return nil, errorf("invalid header: 'shape' has more than 64 dimensions")
		}
		shape = append(shape, int(d))
		p.skipSpace()
		if p.eat(',') {
			continue
		}
		p.skipSpace()
		if !p.eat(')') {
			return nil, errorf("invalid header: bad 'shape' value")
		}
		if len(shape) == 1 {
			return nil, errorf("invalid header: one-element 'shape' tuple needs a trailing comma")
		}
		break
	}
	return shape, nil
}

func shapeString(shape []int) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, d := range shape {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(d))
	}
	if len(shape) == 1 {
		b.WriteByte(',')
	}
	b.WriteByte(')')
	return b.String()
}

func dtypeName(descr string) string {
	switch descr {
	case dtypeF32:
		return "float32"
	case dtypeI32:
		return "int32"
	}
	return descr
}

// decode reads a whole .npy file of the given size from r. If want is
// non-empty the dtype must equal it; otherwise '<f4' and '<i4' are accepted.
func decode(r io.Reader, size int64, want string) (Array, error) {
	h, err := decodeHeader(r, size)
	if err != nil {
		return Array{}, err
	}
	if want != "" && h.descr != want {
		return Array{}, errorf("dtype %s, want %s (%s)", h.descr, dtypeName(want), want)
	}
	if want == "" && h.descr != dtypeF32 && h.descr != dtypeI32 {
		return Array{}, errorf("dtype %s, want float32 (%s) or int32 (%s)", h.descr, dtypeF32, dtypeI32)
	}
	if h.fortran {
		return Array{}, errorf("fortran_order arrays are not supported")
	}
	const elem = 4
	avail := size - h.dataOff
	if avail < h.n*elem {
		return Array{}, errorf("truncated: header says %d elements, file has %d", h.n, avail/elem)
	}
	if avail > h.n*elem {
		return Array{}, errorf("%d bytes of trailing data after the %d elements the header describes", avail-h.n*elem, h.n)
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

func readFile(path, want string) (Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return Array{}, named(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Array{}, err
	}
	if !st.Mode().IsRegular() {
		return Array{}, fmt.Errorf("%s: not a regular file", path)
	}
	a, err := decode(bufio.NewReaderSize(f, 64<<10), st.Size(), want)
	if err != nil {
		var pe parseError
		if errors.As(err, &pe) {
			return Array{}, fmt.Errorf("%s: %s", path, pe)
		}
		return Array{}, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// ReadFloat32 reads a little-endian float32 ('<f4') C-order array. A scalar
// file gives an empty shape and one element.
func ReadFloat32(path string) (data []float32, shape []int, err error) {
	a, err := readFile(path, dtypeF32)
	if err != nil {
		return nil, nil, err
	}
	return a.F32, a.Shape, nil
}

// ReadInt32 reads a little-endian int32 ('<i4') C-order array.
func ReadInt32(path string) (data []int32, shape []int, err error) {
	a, err := readFile(path, dtypeI32)
	if err != nil {
		return nil, nil, err
	}
	return a.I32, a.Shape, nil
}

// Read reads a '<f4' or '<i4' array; the field of the other kind is nil.
func Read(path string) (Array, error) {
	return readFile(path, "")
}

// encodeHeader returns the preamble and header for descr and shape: version
// 1.0 (2.0 if the header would not fit in 65535 bytes), padded with spaces
// and a final newline so that the data starts at a multiple of 64 bytes.
func encodeHeader(descr string, shape []int) []byte {
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shapeString(shape))
	pre := 10
	total := (pre + len(dict) + 1 + 63) / 64 * 64
	if total-pre > math.MaxUint16 {
		pre = 12
		total = (pre + len(dict) + 1 + 63) / 64 * 64
	}
	hlen := total - pre
	out := make([]byte, 0, total)
	out = append(out, magic...)
	if pre == 10 {
		out = append(out, 1, 0)
		out = binary.LittleEndian.AppendUint16(out, uint16(hlen))
	} else {
		out = append(out, 2, 0)
		out = binary.LittleEndian.AppendUint32(out, uint32(hlen))
	}
	out = append(out, dict...)
	for len(out) < total-1 {
		out = append(out, ' ')
	}
	return append(out, '\n')
}

func checkShape(shape []int, n int) error {
	p := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && p > maxElems/d {
			return fmt.Errorf("shape %v is too large", shape)
		}
		p *= d
	}
	if p != n {
		return fmt.Errorf("shape %v has %d elements, data has %d", shape, p, n)
	}
	return nil
}

// encode writes a whole .npy file for a to w.
func encode(w io.Writer, a Array) error {
	descr := dtypeF32
	n := len(a.F32)
	if a.I32 != nil {
		if a.F32 != nil {
			return errors.New("array has both F32 and I32 data")
		}
		descr, n = dtypeI32, len(a.I32)
	}
	if err := checkShape(a.Shape, n); err != nil {
		return err
	}
	if _, err := w.Write(encodeHeader(descr, a.Shape)); err != nil {
		return err
	}
	var buf [64 << 10]byte
	for done := 0; done < n; {
		chunk := min(n-done, len(buf)/4)
		for t := 0; t < chunk; t++ {
			var u uint32
			if a.I32 != nil {
				u = uint32(a.I32[done+t])
			} else {
				u = math.Float32bits(a.F32[done+t])
			}
			binary.LittleEndian.PutUint32(buf[4*t:], u)
		}
		if _, err := w.Write(buf[:4*chunk]); err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

// writeTemp writes a to a new temporary file beside path, syncs and closes
// it, and returns its name. On error the temporary file is removed.
func writeTemp(path string, a Array) (_ string, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	if err = encode(bw, a); err != nil {
		return "", err
	}
	if err = bw.Flush(); err != nil {
		return "", err
	}
	if err = f.Chmod(0o644); err != nil {
		return "", err
	}
	if err = f.Sync(); err != nil {
		return "", err
	}
	if err = f.Close(); err != nil {
		return "", err
	}
	return tmp, nil
}

// syncDir makes a rename in dir durable; errors are ignored because not every
// platform can sync a directory.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// WriteFloat32 writes data with the given shape (product(shape) must equal
// len(data); an empty shape is a scalar) to path as a '<f4' array. The write
// is atomic: path is either left untouched or replaced by the complete file.
func WriteFloat32(path string, data []float32, shape []int) error {
	if data == nil {
		data = []float32{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, F32: data}})
}

// WriteInt32 writes data with the given shape to path as a '<i4' array,
// atomically like WriteFloat32.
func WriteInt32(path string, data []int32, shape []int) error {
	if data == nil {
		data = []int32{}
	}
	return WriteFiles(map[string]Array{path: {Shape: shape, I32: data}})
}

// WriteFiles writes several arrays, keyed by path, so that either all of them
// appear or none does: every array is first written and synced to a temporary
// file beside its destination, and only when all succeeded are they renamed
// into place. If a rename itself fails (exceptional on a local file system),
// the destinations already renamed are removed and the error is returned.
// An Array with I32 set is written as '<i4', otherwise as '<f4'. Errors name
// the path.
func WriteFiles(files map[string]Array) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	tmps := make([]string, 0, len(paths))
	cleanup := func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	for _, p := range paths {
		t, err := writeTemp(p, files[p])
		if err != nil {
			cleanup()
			return named(p, err)
		}
		tmps = append(tmps, t)
	}
	for i, p := range paths {
		if err := os.Rename(tmps[i], p); err != nil {
			for _, done := range paths[:i] {
				os.Remove(done)
			}
			tmps = tmps[i:]
			cleanup()
			return named(p, err)
		}
	}
	dirs := map[string]bool{}
	for _, p := range paths {
		d := filepath.Dir(p)
		if !dirs[d] {
			dirs[d] = true
			syncDir(d)
		}
	}
	return nil
}

// named prefixes err with path, dropping the operation and path of an
// *os.PathError (which may name a temporary file) but keeping its cause.
func named(path string, err error) error {
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return fmt.Errorf("%s: %w", path, err)
}
