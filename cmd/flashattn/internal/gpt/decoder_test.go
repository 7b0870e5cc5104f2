package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// fullLogits recomputes the logits after the last token of text by running
// the whole text through Model.Forward (no cache).
func fullLogits(t *testing.T, m *Model, text []int32) []float32 {
	t.Helper()
	if _, err := m.Forward(Batch{Inputs: text, Size: 1, Seq: len(text)}, false, 0); err != nil {
		t.Fatal(err)
	}
	l, err := m.Logits(len(text) - 1)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(l)
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestDecoderMatchesRecompute checks that decoding through the KV cache,
// in chunks of any size, gives the logits of recomputing the whole prefix.
func TestDecoderMatchesRecompute(t *testing.T) {
	for _, c := range []Config{tinyConfig(), {Vocab: 256, Context: 70, Layers: 2, Heads: 4, Dim: 64}} {
		for _, chunks := range [][]int{{1}, {5, 1}, {3, 2, 4}} {
			t.Run(fmt.Sprintf("dim%d/chunks%v", c.Dim, chunks), func(t *testing.T) {
				m := newTestModel(t, c, "flash", 3)
				perturb(m.Params, 4)
				r := rand.New(rand.NewPCG(5, 6))
				text := make([]int32, c.Context)
				for i := range text {
					text[i] = int32(r.IntN(c.Vocab))
				}
				dec := m.NewDecoder()
				for pos, k := 0, 0; pos < len(text); k++ {
					n := min(chunks[min(k, len(chunks)-1)], len(text)-pos)
					got, err := dec.Append(text[pos : pos+n])
					if err != nil {
						t.Fatal(err)
					}
					got = slices.Clone(got)
					pos += n
					want := fullLogits(t, m, text[:pos])
					if d := maxDiff(got, want); d > 1e-4 {
						t.Fatalf("after %d tokens: cached logits differ from recomputation by %g", pos, d)
					}
				}
				if dec.Len() != len(text) {
					t.Fatalf("Len %d, want %d", dec.Len(), len(text))
				}
				if _, err := dec.Append(text[:1]); err == nil {
					t.Fatal("appending past the context: no error")
				}
			})
		}
	}
}

// refGenerate is Generate without the cache: every token recomputes its
// whole window with Model.Forward, following the same sliding rule.
func refGenerate(t *testing.T, m *Model, prompt []int32, n int, temperature float64, seed uint64) []int32 {
	c := m.Config
	text := slices.Clone(prompt)
	r := rand.New(rand.NewPCG(seed, 0x73616d706c65))
	start := max(0, len(text)-c.Context)
	var out []int32
	for i := 0; i < n; i++ {
		tok := int32(SampleToken(fullLogits(t, m, text[start:]), temperature, r))
		out = append(out, tok)
		text = append(text, tok)
		if len(text)-start > c.Context {
			start = len(text) - max(1, c.Context/2)
		}
	}
	return out
}

// TestGenerateMatchesRecompute checks that Generate (KV cache, one token at
// a time) samples exactly what recomputing the prefix for every token
// samples, greedy and at temperature 1, including past the context.
func TestGenerateMatchesRecompute(t *testing.T) {
	c := Config{Vocab: 256, Context: 24, Layers: 2, Heads: 2, Dim: 32}
	m := newTestModel(t, c, "flash", 7)
	perturb(m.Params, 8)
	prompt := []int32{'f', 'u', 'n', 'c', ' '}
	for _, temp := range []float64{0, 1} {
		var got []int32
		err := Generate(m, prompt, 60, temp, 9, func(tok int32) error {
			got = append(got, tok)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := refGenerate(t, m, prompt, 60, temp, 9)
		if !slices.Equal(got, want) {
			t.Fatalf("temperature %v:\ncached    %v\nrecompute %v", temp, got, want)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	m := newTestModel(t, tinyConfig(), "flash", 1)
	emit := func(int32) error { return nil }
	for name, err := range map[string]error{
		"negative temperature": Generate(m, nil, 3, -1, 1, emit),
		"NaN temperature":      Generate(m, nil, 3, math.NaN(), 1, emit),
		"negative count":       Generate(m, nil, -1, 1, 1, emit),
		"token out of range":   Generate(m, []int32{99}, 3, 1, 1, emit),
		"emit error":           Generate(m, nil, 3, 1, 1, func(int32) error { return fmt.Errorf("stop") }),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSampleToken checks greedy choice and that sampling follows the
// softmax distribution (chi-square-style bound on frequencies).
func TestSampleToken(t *testing.T) {
	logits := []float32{0, 1, 2, -1}
	if got := SampleToken(logits, 0, nil); got != 2 {
		t.Fatalf("greedy = %d, want 2", got)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	var count [4]int
	for range n {
		count[SampleToken(logits, 0.5, r)]++
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) / 0.5)
	}
	for i, l := range logits {
		p := math.Exp(float64(l)/0.5) / z
		sd := math.Sqrt(n * p * (1 - p))
		if math.Abs(float64(count[i])-n*p) > 5*sd+1 {
			t.Errorf("token %d drawn %d times, expected %.0f ± %.0f", i, count[i], n*p, sd)
		}
	}
}
