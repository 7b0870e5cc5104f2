package gpt

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/regfile"
)

// Dataset is byte-level text (vocabulary 256) split into a training and a
// validation part.
type Dataset struct {
	Train, Val []byte
	// Source says where the text came from, for progress output.
	Source string
}

// valEvery is the split: one file (or one part of a single text) in
// valEvery goes to validation.
const valEvery = 10

// GoSources reads the Go files under root (the standard library's sources
// are under runtime.GOROOT()/src), skipping testdata directories and test
// files, in lexical order of their paths. A file goes to validation when
// the FNV-1a hash of its slash-separated path relative to root is 0 modulo
// 10, so the split is the same on every machine and does not depend on
// which other files exist.
func GoSources(root string) (*Dataset, error) {
	paths, _, err := goSources(root)
	if err != nil {
		return nil, err
	}
	ds := &Dataset{}
	var nTrain, nVal int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading Go sources: %w", err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil, err
		}
		h := fnv.New32a()
		h.Write([]byte(filepath.ToSlash(rel)))
		if h.Sum32()%valEvery == 0 {
			ds.Val = append(ds.Val, b...)
			nVal++
		} else {
			ds.Train = append(ds.Train, b...)
			nTrain++
		}
	}
	ds.Source = fmt.Sprintf("%s: %d Go files (%.1f MB) for training, %d (%.1f MB) for validation",
		root, nTrain, float64(len(ds.Train))/1e6, nVal, float64(len(ds.Val))/1e6)
	return ds, nil
}

// goSources lists the files GoSources reads under root, sorted, and the
// sum of their sizes.
func goSources(root string) (paths []string, size int64, err error) {
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			paths = append(paths, path)
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading Go sources: %w", err)
	}
	slices.Sort(paths)
	return paths, size, nil
}

// GoSourcesBytes is the total size of the files GoSources reads under
// root.
func GoSourcesBytes(root string) (int64, error) {
	_, size, err := goSources(root)
	return size, err
}

// TextFile reads any regular file as bytes (a FIFO, a device or a
// directory is refused at once). It is cut into 100 equal parts and every
// tenth part goes to validation, so both halves see the whole text.
func TextFile(path string) (*Dataset, error) {
	b, err := regfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 2*valEvery*10 {
		return nil, fmt.Errorf("%s: %d bytes is too little text", path, len(b))
	}
	ds := &Dataset{}
	const parts = 10 * valEvery
	for i := 0; i < parts; i++ {
		part := b[i*len(b)/parts : (i+1)*len(b)/parts]
		if i%valEvery == valEvery-1 {
			ds.Val = append(ds.Val, part...)
		} else {
			ds.Train = append(ds.Train, part...)
		}
	}
	ds.Source = fmt.Sprintf("%s: %.2f MB for training, %.2f MB for validation", path, float64(len(ds.Train))/1e6, float64(len(ds.Val))/1e6)
	return ds, nil
}

// Unigram is the baseline a model must beat: the cross-entropy, in nats
// per byte, of the validation text under the byte frequencies of the
// training text (add-one smoothed).
func (ds *Dataset) Unigram() float64 {
	var count [256]float64
	for _, c := range ds.Train {
		count[c]++
	}
	total := float64(len(ds.Train)) + 256
	var h float64
	for _, c := range ds.Val {
		h -= math.Log((count[c] + 1) / total)
	}
	return h / float64(len(ds.Val))
}

// Sampler draws batches of random windows of a text, deterministically
// from its seed.
type Sampler struct {
	text []byte
	r    *rand.Rand
}

// NewSampler returns a Sampler over text seeded with seed.
func NewSampler(text []byte, seed uint64) *Sampler {
	return &Sampler{text: text, r: rand.New(rand.NewPCG(seed, 0x62617463686573))} // "batches"
}

// errShortText is returned when a text has no window of the asked length.
var errShortText = errors.New("text shorter than one sequence plus one byte")

// Next returns a batch of size windows of seq+1 bytes: the first seq are
// the inputs, the last seq the targets.
func (s *Sampler) Next(size, seq int) (Batch, error) {
	if len(s.text) < seq+1 {
		return Batch{}, fmt.Errorf("%w (%d bytes, sequence %d)", errShortText, len(s.text), seq)
	}
	b := Batch{Inputs: make([]int32, size*seq), Targets: make([]int32, size*seq), Size: size, Seq: seq}
	for i := 0; i < size; i++ {
		off := s.r.IntN(len(s.text) - seq)
		for t := 0; t < seq; t++ {
			b.Inputs[i*seq+t] = int32(s.text[off+t])
			b.Targets[i*seq+t] = int32(s.text[off+t+1])
		}
	}
	return b, nil
}
