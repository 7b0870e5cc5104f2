package gpt

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// goText is a small Go-looking text whose byte statistics are far from
// uniform, so that a tiny model learns it within a few dozen steps.
var goText = []byte(strings.Repeat(`func (s *Stack) Push(v int) {
	s.items = append(s.items, v)
}

func (s *Stack) Pop() (int, bool) {
	if len(s.items) == 0 {
		return 0, false
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, true
}
`, 40))

func smallTrainer(t *testing.T, attn string, workers int, steps int) *Trainer {
	t.Helper()
	c := Config{Vocab: 256, Context: 32, Layers: 2, Heads: 2, Dim: 32}
	a, err := NewAttention(attn, workers)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(c, a, 3, workers)
	if err != nil {
		t.Fatal(err)
	}
	tc := DefaultTrainConfig()
	tc.Steps, tc.Batch, tc.Warmup, tc.EvalBatches, tc.LR, tc.MinLR = steps, 8, 5, 2, 1e-2, 1e-3
	ds := &Dataset{Train: goText[:len(goText)*9/10], Val: goText[len(goText)*9/10:]}
	tr, err := NewTrainer(m, ds, tc)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func runSteps(t *testing.T, tr *Trainer, n int) []float64 {
	t.Helper()
	var losses []float64
	for range n {
		st, err := tr.Step()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, st.Loss)
	}
	return losses
}

// TestShortRunLossFalls trains a small model for 60 steps: the loss must
// start near ln 256 (uniform over bytes) and end far below it and below
// the unigram baseline on validation text.
func TestShortRunLossFalls(t *testing.T) {
	tr := smallTrainer(t, "flash", 2, 60)
	ds := &Dataset{Train: goText[:len(goText)*9/10], Val: goText[len(goText)*9/10:]}
	v0, err := tr.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	losses := runSteps(t, tr, 60)
	v1, err := tr.Evaluate()
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(losses[0]-math.Log(256)) > 0.1 {
		t.Errorf("first loss %.3f, want about ln 256 = %.3f", losses[0], math.Log(256))
	}
	if losses[4] >= losses[0] {
		t.Errorf("loss did not fall over the first steps: %.3f → %.3f", losses[0], losses[4])
	}
	if u := ds.Unigram(); !(v1 < 0.6*u) || !(v1 < v0) {
		t.Errorf("validation loss %.3f → %.3f, unigram %.3f: want well below the unigram", v0, v1, u)
	}
}

// TestTrainingDeterministic checks that two runs from the same seed give
// bit-identical losses, whatever the number of workers.
func TestTrainingDeterministic(t *testing.T) {
	a := runSteps(t, smallTrainer(t, "flash", 1, 10), 5)
	b := runSteps(t, smallTrainer(t, "flash", 3, 10), 5)
	if !slices.Equal(a, b) {
		t.Fatalf("1 worker %v\n3 workers %v", a, b)
	}
}

// TestTrainingFlashPlainAgree trains the same small model with both
// attentions from the same seed: the loss curves must agree to 1e-4.
func TestTrainingFlashPlainAgree(t *testing.T) {
	fl := runSteps(t, smallTrainer(t, "flash", 2, 20), 20)
	pl := runSteps(t, smallTrainer(t, "plain", 2, 20), 20)
	var d float64
	for i := range fl {
		d = max(d, math.Abs(fl[i]-pl[i]))
	}
	if d > 1e-4 {
		t.Fatalf("max |loss flash − loss plain| = %g over 20 steps\nflash %v\nplain %v", d, fl, pl)
	}
	if fl[19] >= fl[0]-0.5 {
		t.Fatalf("loss fell only from %.3f to %.3f", fl[0], fl[19])
	}
}

func TestTrainConfigValidate(t *testing.T) {
	for i, tc := range []TrainConfig{
		{Steps: 0, Batch: 1, LR: 1, EvalBatches: 1},
		{Steps: 1, Batch: 0, LR: 1, EvalBatches: 1},
		{Steps: 1, Batch: 1, LR: 0, EvalBatches: 1},
		{Steps: 1, Batch: 1, LR: 1, MinLR: 2, EvalBatches: 1},
		{Steps: 1, Batch: 1, LR: math.NaN(), EvalBatches: 1},
		{Steps: 1, Batch: 1, LR: 1, Warmup: -1, EvalBatches: 1},
		{Steps: 1, Batch: 1, LR: 1, Clip: -1, EvalBatches: 1},
		{Steps: 1, Batch: 1, LR: 1, EvalBatches: 0},
	} {
		if tc.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, tc)
		}
	}
	if err := DefaultTrainConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := good.NumParams(); got != 842496 {
		t.Errorf("default model has %d parameters, want 842496", got)
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.Vocab = 1 },
		func(c *Config) { c.Context = 0 },
		func(c *Config) { c.Layers = 0 },
		func(c *Config) { c.Dim = 0 },
		func(c *Config) { c.Heads = 3 },
		func(c *Config) { c.Heads = 0 },
		func(c *Config) { c.Dropout = 1 },
		func(c *Config) { c.Dropout = float32(math.NaN()) },
		func(c *Config) { c.Dim = maxDim * 2 },
		func(c *Config) { c.Dim, c.Heads = maxDim, 1 },      // 3.2e9 parameters
		func(c *Config) { c.Vocab, c.Dim = maxVocab, 1024 }, // a huge embedding
	} {
		c := good
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := NewAttention("sparse", 0); err == nil {
		t.Error("unknown attention accepted")
	}
	for _, name := range []string{"flash", "plain"} {
		a, err := NewAttention(name, 0)
		if err != nil || a.Name() != name {
			t.Errorf("NewAttention(%q) = %v, %v", name, a, err)
		}
	}
	_ = fmt.Sprint(good) // String must not panic
}
