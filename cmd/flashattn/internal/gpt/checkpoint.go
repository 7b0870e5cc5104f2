package gpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/atomicfile"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/regfile"
)

// A checkpoint file is
//
//	"FAGPT001"                      magic and format version
//	uint32   n                      length of the JSON header
//	[n]byte  {"config": Config, "step": int}
//	uint64   count                  number of parameters (Config.NumParams())
//	[count]float32                  Params.Data
//	uint32   CRC-32 (IEEE) of everything before it
//
// with every number little-endian.
const checkpointMagic = "FAGPT001"

// maxHeader bounds the JSON header of a checkpoint.
const maxHeader = 1 << 16

type checkpointHeader struct {
	Config Config `json:"config"`
	Step   int    `json:"step"`
}

// EncodeCheckpoint returns the checkpoint of a model's configuration and
// parameters after step training steps.
func EncodeCheckpoint(c Config, p *Params, step int) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(p.Data) != c.NumParams() {
		return nil, fmt.Errorf("checkpoint: %d parameters for a configuration of %d", len(p.Data), c.NumParams())
	}
	h, err := json.Marshal(checkpointHeader{Config: c, Step: step})
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(checkpointMagic)+4+len(h)+8+4*len(p.Data)+4)
	b = append(b, checkpointMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	b = append(b, h...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(p.Data)))
	for _, x := range p.Data {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b)), nil
}

// errCheckpoint prefixes every malformed-checkpoint error.
var errCheckpoint = errors.New("not a valid checkpoint")

// DecodeCheckpoint parses a checkpoint: the configuration, the parameters
// and the step count. Any malformed input is an error.
func DecodeCheckpoint(b []byte) (Config, *Params, int, error) {
	bad := func(format string, args ...any) (Config, *Params, int, error) {
		return Config{}, nil, 0, fmt.Errorf("%w: %s", errCheckpoint, fmt.Sprintf(format, args...))
	}
	const fixed = len(checkpointMagic) + 4 + 8 + 4
	if len(b) < fixed || string(b[:len(checkpointMagic)]) != checkpointMagic {
		return bad("no %q header", checkpointMagic)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return bad("checksum mismatch (truncated or corrupted)")
	}
	r := body[len(checkpointMagic):]
	n := int64(binary.LittleEndian.Uint32(r))
	r = r[4:]
	if n > maxHeader || n > int64(len(r))-8 {
		return bad("header length %d", n)
	}
	var h checkpointHeader
	dec := json.NewDecoder(bytes.NewReader(r[:n]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return bad("header: %v", err)
	}
	if err := h.Config.Validate(); err != nil {
		return bad("configuration: %v", err)
	}
	if h.Step < 0 {
		return bad("step %d", h.Step)
	}
	r = r[n:]
	count := binary.LittleEndian.Uint64(r)
	r = r[8:]
	want := uint64(h.Config.NumParams())
	if count != want || uint64(len(r)) != 4*want {
		return bad("%d parameters in %d bytes, the configuration has %d", count, len(r), want)
	}
	data := make([]float32, want)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(r[4*i:]))
		if x := float64(data[i]); math.IsNaN(x) || math.IsInf(x, 0) {
			return bad("parameter %d is %v", i, data[i])
		}
	}
	return h.Config, paramsOver(h.Config, data), h.Step, nil
}

// CheckpointConfig reads only the header of the checkpoint at path (a
// regular file) and returns its configuration and the file's size, so that
// a caller can see what loading it would take before reading the rest.
func CheckpointConfig(path string) (Config, int64, error) {
	f, st, err := regfile.Open(path)
	if err != nil {
		return Config{}, 0, err
	}
	defer f.Close()
	bad := func(format string, args ...any) (Config, int64, error) {
		return Config{}, 0, fmt.Errorf("%s: %w: %s", path, errCheckpoint, fmt.Sprintf(format, args...))
	}
	head := make([]byte, len(checkpointMagic)+4)
	if _, err := io.ReadFull(f, head); err != nil || string(head[:len(checkpointMagic)]) != checkpointMagic {
		return bad("no %q header", checkpointMagic)
	}
	n := int64(binary.LittleEndian.Uint32(head[len(checkpointMagic):]))
	if n > maxHeader || n > st.Size()-int64(len(head))-12 {
		return bad("header length %d", n)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(f, hb); err != nil {
		return bad("header: %v", err)
	}
	var h checkpointHeader
	dec := json.NewDecoder(bytes.NewReader(hb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return bad("header: %v", err)
	}
	if err := h.Config.Validate(); err != nil {
		return bad("configuration: %v", err)
	}
	return h.Config, st.Size(), nil
}

// SaveCheckpoint writes a checkpoint of m after step training steps to
// path atomically: a temporary file in the same directory, synced, then
// renamed over path. On error path is left as it was.
func SaveCheckpoint(path string, m *Model, step int) error {
	b, err := EncodeCheckpoint(m.Config, m.Params, step)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, bytes.NewReader(b))
}

// LoadCheckpoint reads a checkpoint (a regular file: a FIFO, a device or
// a directory is refused at once) into a new Model that computes attention
// with attn on the given number of workers, and returns the step count it
// was saved at.
func LoadCheckpoint(path string, attn Attention, workers int) (*Model, int, error) {
	b, err := regfile.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	c, p, step, err := DecodeCheckpoint(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return newModel(c, p, attn, workers), step, nil
}
