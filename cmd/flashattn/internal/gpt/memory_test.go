package gpt

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/memlimit"
)

func floatBytes(xs ...[]float32) memlimit.Size {
	var n int
	for _, x := range xs {
		n += len(x)
	}
	return memlimit.Mul(n, 4)
}

// The estimates follow the allocations: at least what newWorkspace and
// NewDecoder allocate, and not much more.
func TestMemoryEstimates(t *testing.T) {
	for _, c := range []Config{DefaultConfig(), {Vocab: 256, Context: 64, Layers: 3, Heads: 2, Dim: 24}} {
		const batch, seq = 3, 40
		w := newWorkspace(c, batch, seq)
		got := floatBytes(w.xf, w.hf, w.meanf, w.rstdf, w.logits, w.dx, w.dh, w.datt, w.dqkv, w.du, w.lnScratch)
		got += memlimit.Mul(len(w.inputs), 4) + memlimit.Mul(len(w.losses), 8)
		for _, a := range w.layers {
			got += floatBytes(a.x, a.h1, a.mean1, a.rstd1, a.qkv, a.att, a.lse, a.xmid, a.h2, a.mean2, a.rstd2, a.u, a.g)
		}
		est := c.ActivationBytes(batch, seq)
		if est < got || est > got+got/8 {
			t.Errorf("%v: workspace of %v estimated as %v", c, got, est)
		}
		m, err := New(c, Flash{}, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		d := m.NewDecoder()
		got = floatBytes(d.x, d.h, d.att, d.xmid, d.qkv, d.u, d.g, d.mean, d.rstd, d.logits)
		for l := range d.kc {
			got += floatBytes(d.kc[l], d.vc[l])
		}
		if est := c.DecoderBytes(); est < got || est > got+got/8 {
			t.Errorf("%v: decoder of %v estimated as %v", c, got, est)
		}
		if est := c.ParamsBytes(); est != floatBytes(m.Params.Data) {
			t.Errorf("%v: parameters of %v estimated as %v", c, floatBytes(m.Params.Data), est)
		}
	}
	huge := Config{Vocab: 256, Context: 1 << 20, Layers: 1024, Heads: 2, Dim: 8}
	if est := huge.DecoderBytes(); est < 64<<30 {
		t.Errorf("decoder of %v estimated as %v, want at least its 64 GiB KV cache", huge, est)
	}
	if est := DefaultConfig().ActivationBytes(math.MaxInt/2, math.MaxInt/2); est != memlimit.Inf {
		t.Errorf("overflowing batch: %v, want Inf", est)
	}
}

// CheckpointConfig reads the configuration from the header alone.
func TestCheckpointConfig(t *testing.T) {
	dir := t.TempDir()
	c := Config{Vocab: 256, Context: 16, Layers: 2, Heads: 2, Dim: 8}
	b, err := EncodeCheckpoint(c, NewParams(c), 3)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.ckpt")
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, size, err := CheckpointConfig(good)
	if err != nil || got != c || size != int64(len(b)) {
		t.Fatalf("CheckpointConfig = %v, %d, %v", got, size, err)
	}
	for name, data := range map[string][]byte{
		"short":  b[:10],
		"magic":  append([]byte("FAGPT002"), b[8:]...),
		"header": append(append([]byte{}, b[:12]...), []byte("{not json")...),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := CheckpointConfig(p); err == nil || !strings.Contains(err.Error(), p+": not a valid checkpoint") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
