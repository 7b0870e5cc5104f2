package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/gpt"
)

const generateHelp = `-model FILE [-prompt TEXT] [-tokens N] [-temperature T] [-seed S]

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
	fs := newFlags("generate", stderr, generateHelp)
	fs.StringVar(&model, "model", "", "checkpoint `FILE` written by flashattn train -save (required)")
	fs.StringVar(&prompt, "prompt", "package main\n", "text to continue")
	fs.IntVar(&tokens, "tokens", 400, "bytes to generate")
	fs.Float64Var(&temperature, "temperature", 0.8, "sampling temperature (0: always the most likely byte)")
	fs.Uint64Var(&seed, "seed", 1, "sampling seed: the same seed gives the same text")
	fs.IntVar(&workers, "workers", 0, "worker goroutines (0: GOMAXPROCS)")
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
	m, _, err := gpt.LoadCheckpoint(model, gpt.Flash{Workers: workers}, workers)
	if err != nil {
		return fmt.Errorf("-model: %v", err)
	}
	if m.Config.Vocab != 256 {
		return fmt.Errorf("-model: vocabulary of %d tokens, not bytes (256)", m.Config.Vocab)
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
