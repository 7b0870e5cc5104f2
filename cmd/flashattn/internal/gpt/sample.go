package gpt

import (
	"errors"
	"math"
	"math/rand/v2"
)

// SampleToken draws a token from softmax(logits/temperature); temperature
// 0 takes the most likely token (the first on ties).
func SampleToken(logits []float32, temperature float64, r *rand.Rand) int {
	best := 0
	for i, x := range logits {
		if x > logits[best] {
			best = i
		}
	}
	if temperature == 0 {
		return best
	}
	mx := float64(logits[best])
	var z float64
	w := make([]float64, len(logits))
	for i, x := range logits {
		w[i] = math.Exp((float64(x) - mx) / temperature)
		z += w[i]
	}
	u := r.Float64() * z
	for i, x := range w {
		u -= x
		if u < 0 {
			return i
		}
	}
	return best // u rounded past the end: the mass is all there
}

// Generate samples n tokens after prompt and passes each to emit, which
// may stop generation by returning an error (returned by Generate). It
// decodes one token at a time through a Decoder's KV cache. When the
// cache is full (Config.Context tokens), it keeps the last half of the
// text and refills the cache with it in one call, since the learned
// position embedding ends at Context. An empty prompt starts from a
// newline (token 10).
func Generate(m *Model, prompt []int32, n int, temperature float64, seed uint64, emit func(token int32) error) error {
	if !(temperature >= 0) || math.IsInf(temperature, 0) {
		return errors.New("temperature must be finite and at least 0")
	}
	if n < 0 {
		return errors.New("token count must be at least 0")
	}
	c := m.Config
	text := append([]int32(nil), prompt...)
	if len(text) == 0 {
		text = append(text, 10)
	}
	r := rand.New(rand.NewPCG(seed, 0x73616d706c65)) // "sample"
	dec := m.NewDecoder()
	window := func() []int32 { return text[max(0, len(text)-c.Context):] }
	logits, err := dec.Append(window())
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		tok := int32(SampleToken(logits, temperature, r))
		if err := emit(tok); err != nil {
			return err
		}
		text = append(text, tok)
		if i+1 == n {
			break
		}
		if dec.Len() == c.Context {
			dec.Reset()
			logits, err = dec.Append(text[len(text)-max(1, c.Context/2):])
		} else {
			logits, err = dec.Append(text[len(text)-1:])
		}
		if err != nil {
			return err
		}
	}
	return nil
}
