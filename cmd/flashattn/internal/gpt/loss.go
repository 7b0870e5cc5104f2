package gpt

import (
	"math"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gemm"
	"github.com/flashattn/flashattn/internal/kernel"
)

// crossEntropy turns each of the n rows of logits (v columns, leading
// dimension ld = kernel.Pad(v)) into the gradient of the mean
// cross-entropy, (softmax − onehot(target))/n, in place, and returns the
// mean loss in nats. losses (n floats) receives each row's loss.
func crossEntropy(e *gemm.Engine, im *kernel.Impl, logits []float32, targets []int32, n, v int, losses []float64) float64 {
	ld := kernel.Pad(v)
	inv := float32(1 / float64(n))
	e.Parallel(rowBlocks(n), func(t int) {
		for i := t * rowBlock; i < min(n, (t+1)*rowBlock); i++ {
			row := logits[i*ld : (i+1)*ld]
			for j := v; j < ld; j++ {
				row[j] = float32(math.Inf(-1))
			}
			tgt := row[targets[i]]
			m := im.Max(row)
			s := im.ExpSum(row, 1, m) // row = e^{x − m}
			losses[i] = math.Log(float64(s)) + float64(m) - float64(tgt)
			im.Scale(row, inv/s)
			row[targets[i]] -= inv
		}
	})
	var sum float64
	for _, l := range losses[:n] {
		sum += l
	}
	return sum / float64(n)
}
