package gpt

import (
	"fmt"
	"math"
	"time"
)

// TrainConfig is how a model is trained.
type TrainConfig struct {
	Steps       int     // optimizer steps, counted from 1
	Batch       int     // sequences per step
	LR, MinLR   float64 // peak learning rate and the cosine's floor
	Warmup      int     // steps of linear warm-up
	WeightDecay float64 // AdamW's decoupled weight decay
	Clip        float64 // gradient-norm clipping (0: none)
	Seed        uint64  // initialisation, batches and dropout
	EvalBatches int     // batches of validation text per Validate
}

// DefaultTrainConfig is `flashattn train`'s schedule: 1000 steps of 16
// sequences, learning rate 3e-3 (AdamW, weight decay 0.1, clipping at 1)
// warmed up over 30 steps and decayed by a cosine to 3e-4.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{Steps: 1000, Batch: 16, LR: 3e-3, MinLR: 3e-4, Warmup: 30, WeightDecay: 0.1, Clip: 1, Seed: 1, EvalBatches: 8}
}

// Validate reports whether tc is usable.
func (tc TrainConfig) Validate() error {
	switch {
	case tc.Steps < 1:
		return fmt.Errorf("steps %d: want at least 1", tc.Steps)
	case tc.Batch < 1:
		return fmt.Errorf("batch %d: want at least 1", tc.Batch)
	case !(tc.LR > 0) || !(tc.MinLR >= 0) || tc.MinLR > tc.LR || math.IsInf(tc.LR, 0):
		return fmt.Errorf("learning rates %g → %g: want finite, 0 ≤ min ≤ peak, peak > 0", tc.LR, tc.MinLR)
	case tc.Warmup < 0:
		return fmt.Errorf("warm-up %d: want at least 0", tc.Warmup)
	case !(tc.WeightDecay >= 0) || !(tc.Clip >= 0) || math.IsInf(tc.WeightDecay, 0) || math.IsInf(tc.Clip, 0):
		return fmt.Errorf("weight decay %g and clipping %g: want finite values ≥ 0", tc.WeightDecay, tc.Clip)
	case tc.EvalBatches < 1:
		return fmt.Errorf("eval batches %d: want at least 1", tc.EvalBatches)
	}
	return nil
}

// validationSeed fixes the validation windows whatever the run's seed, so
// that runs compare on the same text.
const validationSeed = 0x76616c

// Trainer trains a Model on a Dataset.
type Trainer struct {
	Model  *Model
	Config TrainConfig

	opt   *AdamW
	sched Schedule
	train *Sampler
	val   []Batch
	step  int
}

// StepStats describes one optimizer step.
type StepStats struct {
	Step     int
	Loss     float64 // mean training cross-entropy of the step's batch, nats
	LR       float64
	GradNorm float64       // before clipping
	Time     time.Duration // the whole step
	AttnTime time.Duration // of which in attention, forward and backward
	Tokens   int
}

// NewTrainer prepares to train m on ds with tc.
func NewTrainer(m *Model, ds *Dataset, tc TrainConfig) (*Trainer, error) {
	if err := tc.Validate(); err != nil {
		return nil, err
	}
	seq := m.Config.Context
	t := &Trainer{
		Model: m, Config: tc,
		opt:   NewAdamW(len(m.Params.Data), tc.WeightDecay),
		sched: Schedule{Peak: tc.LR, Min: tc.MinLR, Warmup: tc.Warmup, Total: tc.Steps},
		train: NewSampler(ds.Train, mixSeed(tc.Seed, -2)),
	}
	vs := NewSampler(ds.Val, validationSeed)
	for range tc.EvalBatches {
		b, err := vs.Next(tc.Batch, seq)
		if err != nil {
			return nil, fmt.Errorf("validation text: %w", err)
		}
		t.val = append(t.val, b)
	}
	if len(ds.Train) < seq+1 {
		return nil, fmt.Errorf("training text: %w", errShortText)
	}
	for _, b := range [][]byte{ds.Train, ds.Val} {
		for _, c := range b {
			if int(c) >= m.Config.Vocab {
				return nil, fmt.Errorf("byte %d outside the model's vocabulary of %d", c, m.Config.Vocab)
			}
		}
	}
	return t, nil
}

// Step draws a batch, computes the loss and its gradients, clips them and
// updates the parameters.
func (t *Trainer) Step() (StepStats, error) {
	t0 := time.Now()
	a0 := t.Model.AttentionTime()
	b, err := t.train.Next(t.Config.Batch, t.Model.Config.Context)
	if err != nil {
		return StepStats{}, err
	}
	t.step++
	loss, err := t.Model.Forward(b, true, mixSeed(t.Config.Seed, t.step))
	if err != nil {
		return StepStats{}, err
	}
	if err := t.Model.Backward(); err != nil {
		return StepStats{}, err
	}
	norm := ClipGradients(t.Model.Grads, t.Config.Clip)
	lr := t.sched.LR(t.step)
	t.opt.Step(t.Model.Params, t.Model.Grads, lr)
	return StepStats{
		Step: t.step, Loss: loss, LR: lr, GradNorm: norm,
		Time: time.Since(t0), AttnTime: t.Model.AttentionTime() - a0, Tokens: b.Size * b.Seq,
	}, nil
}

// Evaluate returns the mean cross-entropy (nats per byte) of the model on
// the fixed validation batches, without dropout.
func (t *Trainer) Evaluate() (float64, error) {
	var s float64
	for _, b := range t.val {
		l, err := t.Model.Forward(b, false, 0)
		if err != nil {
			return 0, err
		}
		s += l
	}
	return s / float64(len(t.val)), nil
}
