package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

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
	case dtypeF16:
		return "float16"
	case dtypeI32:
		return "int32"
	case dtypeU8:
		return "uint8"
	case dtypeI8:
		return "int8"
	case dtypeBool:
		return "bool"
	}
	return descr
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
