package gpt

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkStep measures one training step (forward, backward, AdamW) of
// the default model on random bytes, reporting tokens/s.
func BenchmarkStep(b *testing.B) {
	for _, attn := range []string{"flash", "plain"} {
		b.Run(attn, func(b *testing.B) {
			c := DefaultConfig()
			a, _ := NewAttention(attn, 0)
			m, err := New(c, a, 1, 0)
			if err != nil {
				b.Fatal(err)
			}
			text := make([]byte, 1<<16)
			r := rand.New(rand.NewPCG(1, 1))
			for i := range text {
				text[i] = byte(r.IntN(256))
			}
			tc := DefaultTrainConfig()
			tr, err := NewTrainer(m, &Dataset{Train: text, Val: text}, tc)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := tr.Step(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(tc.Batch*c.Context*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
