package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gpt"
	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
)

const generateHelp = `-model FILE [-prompt TEXT] [-tokens N] [-temperature T] [-seed S] [-max-memory SIZE]

Prints the prompt and then N bytes sampled from a model trained by
"flashattn train -save FILE", decoding one token at a time through
flashattn's KV cache (the prefix is never recomputed, except that when the
cache is full the last half of the context is re-read once).

`

func runGenerate(args []string, stdout, stderr io.Writer) error {
	var (
		model, prompt string
		tokens        int
		temperature   float64
		seed          uint64
		workers       int
	)
	maxMem := memlimit.NewFlag("-max-memory")
	fs := newFlags("generate", stderr, generateHelp)
	fs.StringVar(&model, "model", "", "checkpoint `FILE` written by flashattn train -save (required)")
	fs.StringVar(&prompt, "prompt", "package main\n", "text to continue")
	fs.IntVar(&tokens, "tokens", 400, "bytes to generate")
	fs.Float64Var(&temperature, "temperature", 0.8, "sampling temperature (0: always the most likely byte)")
	fs.Uint64Var(&seed, "seed", 1, "sampling seed: the same seed gives the same text")
	fs.IntVar(&workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
	fs.Var(maxMem, "max-memory", "refuse a model whose estimated peak memory exceeds this `size` (e.g. 512M, 4G; default: the memory available now)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case model == "":
		return errors.New("-model is required")
	case tokens < 0:
		return fmt.Errorf("-tokens %d: want at least 0", tokens)
	case !(temperature >= 0) || math.IsInf(temperature, 0):
		return fmt.Errorf("-temperature %v: want a finite value ≥ 0", temperature)
	case workers < 0:
		return fmt.Errorf("-workers %d: want at least 0", workers)
	}
	// The header first: the configuration says what loading the model
	// and decoding with it take, checked before anything large is read.
	cfg, size, err := gpt.CheckpointConfig(model)
	if err != nil {
		return fmt.Errorf("-model: %v", err)
	}
	if cfg.Vocab != 256 {
		return fmt.Errorf("-model: vocabulary of %d tokens, not bytes (256)", cfg.Vocab)
	}
	if err := generateNeed(cfg, size, workers).check(maxMem.Limit(), fmt.Sprintf("-model %s (%v)", model, cfg), "-max-memory overrides"); err != nil {
		return err
	}
	m, _, err := gpt.LoadCheckpoint(model, gpt.Flash{Workers: workers}, workers)
	if err != nil {
		return fmt.Errorf("-model: %v", err)
	}
	ids := make([]int32, len(prompt))
	for i := range len(prompt) {
		ids[i] = int32(prompt[i])
	}
	w := bufio.NewWriter(stdout)
	w.WriteString(prompt)
	err = gpt.Generate(m, ids, tokens, temperature, seed, func(t int32) error {
		return w.WriteByte(byte(t))
	})
	if err != nil {
		return err
	}
	if tokens > 0 {
		w.WriteByte('\n')
	}
	return w.Flush()
}

// generateNeed estimates generate's peak memory: the checkpoint file, the
// model's parameters and gradient buffers, the decoder's KV cache and
// buffers for a full context, flashattn's work for a chunk of a full
// context, and the matrix products' scratch.
func generateNeed(c gpt.Config, fileSize int64, workers int) *need {
	n := &need{}
	n.add("checkpoint", memlimit.Size(max(fileSize, 0)))
	n.add("model", c.ParamsBytes().Times(2))
	n.add("decoder", c.DecoderBytes())
	n.addFlashWork(1, c.Context, c.Context, c.Heads, c.Heads, c.HeadDim(), c.HeadDim(), workers, false)
	n.add("work", c.GemmBytes(workers))
	return n
}
