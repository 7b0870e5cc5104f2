package main

import (
	"math/rand/v2"
	"runtime"
	"sync"
)

// fillChunk is the number of values fillNormal draws from one generator.
const fillChunk = 1 << 18

// fillNormal fills x with standard normal values, in parallel on every
// CPU: chunk c (fillChunk values) is drawn from its own PCG stream
// (seed, c), so the values depend on seed only, not on the number of
// goroutines. The GPU benchmark's inputs (up to 10⁹ values) took minutes
// from one generator.
func fillNormal(x []float32, seed uint64) {
	chunks := (len(x) + fillChunk - 1) / fillChunk
	workers := min(runtime.GOMAXPROCS(0), chunks)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := w; c < chunks; c += workers {
				rng := rand.New(rand.NewPCG(seed, uint64(c)))
				for i := c * fillChunk; i < min(len(x), (c+1)*fillChunk); i++ {
					x[i] = float32(rng.NormFloat64())
				}
			}
		}()
	}
	wg.Wait()
}
