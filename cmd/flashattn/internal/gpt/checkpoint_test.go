package gpt

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCheckpointRoundTrip saves a model, loads it and checks the
// configuration, every parameter bit and the loss on a batch.
func TestCheckpointRoundTrip(t *testing.T) {
	c := tinyConfig()
	c.Dropout = 0.25
	m := newTestModel(t, c, "flash", 11)
	perturb(m.Params, 12)
	path := filepath.Join(t.TempDir(), "m.ckpt")
	if err := SaveCheckpoint(path, m, 42); err != nil {
		t.Fatal(err)
	}
	got, step, err := LoadCheckpoint(path, Flash{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if step != 42 || got.Config != c {
		t.Fatalf("step %d config %+v, want 42 %+v", step, got.Config, c)
	}
	if !slices.Equal(got.Params.Data, m.Params.Data) {
		t.Fatal("parameters differ after the round trip")
	}
	b := randomBatch(rand.New(rand.NewPCG(1, 1)), c.Vocab, 2, 5)
	l1, err1 := m.Forward(b, true, 5)
	l2, err2 := got.Forward(b, true, 5)
	if err1 != nil || err2 != nil || l1 != l2 {
		t.Fatalf("loss %v (%v) before, %v (%v) after", l1, err1, l2, err2)
	}
	// No temporary file is left behind.
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only the checkpoint", len(ents))
	}
}

// TestCheckpointRejectsDamage checks that every kind of damage is an error.
func TestCheckpointRejectsDamage(t *testing.T) {
	c := tinyConfig()
	p := NewParams(c)
	initParams(p, c, 1)
	good, err := EncodeCheckpoint(c, p, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := DecodeCheckpoint(good); err != nil {
		t.Fatalf("good checkpoint: %v", err)
	}
	resum := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
		return b
	}
	nan := slices.Clone(good)
	binary.LittleEndian.PutUint32(nan[len(nan)-8:], math.Float32bits(float32(math.NaN())))
	cases := map[string][]byte{
		"empty":      nil,
		"truncated":  good[:len(good)-9],
		"bad magic":  append([]byte("XAGPT001"), good[8:]...),
		"flipped":    func() []byte { b := slices.Clone(good); b[len(b)/2] ^= 1; return b }(),
		"NaN weight": resum(nan),
		"huge header": resum(func() []byte {
			b := slices.Clone(good)
			binary.LittleEndian.PutUint32(b[8:], 1<<30)
			return b
		}()),
		"extra bytes": resum(append(slices.Clone(good[:len(good)-4]), 0, 0, 0, 0, 0, 0, 0, 0)),
	}
	for name, b := range cases {
		if _, _, _, err := DecodeCheckpoint(b); !errors.Is(err, errCheckpoint) {
			t.Errorf("%s: err = %v, want a checkpoint error", name, err)
		}
	}
	if _, _, err := LoadCheckpoint(filepath.Join(t.TempDir(), "missing"), Flash{}, 1); err == nil {
		t.Error("missing file: no error")
	}
	if err := SaveCheckpoint(filepath.Join(t.TempDir(), "no", "such", "dir"), newTestModel(t, c, "flash", 1), 0); err == nil {
		t.Error("save into a missing directory: no error")
	}
}

// FuzzDecodeCheckpoint: a checkpoint file is untrusted input; decoding it
// must never panic and must reject anything whose checksum or sizes are
// wrong.
func FuzzDecodeCheckpoint(f *testing.F) {
	c := Config{Vocab: 5, Context: 3, Layers: 1, Heads: 1, Dim: 2}
	p := NewParams(c)
	initParams(p, c, 1)
	good, err := EncodeCheckpoint(c, p, 1)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		c, p, _, err := DecodeCheckpoint(b)
		if err != nil {
			return
		}
		if len(p.Data) != c.NumParams() || c.Validate() != nil {
			t.Fatalf("accepted an inconsistent checkpoint: %+v with %d parameters", c, len(p.Data))
		}
	})
}
