package main

import (
	"fmt"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// drawSVG draws the paper-style figure: GFLOP/s against sequence length,
// one line per (mode, headdim, causal) for flashattn and, dashed, for the
// plain algorithm.
func drawSVG(path string, rs []benchResult) error {
	type key struct {
		mode   string
		d      int
		causal bool
		plain  bool
	}
	series := map[key]plotter.XYs{}
	for _, r := range rs {
		if r.Variant != "" || r.Mode == "decode" {
			continue
		}
		k := key{r.Mode, r.Headdim, r.Causal, false}
		series[k] = append(series[k], plotter.XY{X: float64(r.SeqlenK), Y: r.GFlops})
		if r.PlainSeconds > 0 {
			k.plain = true
			series[k] = append(series[k], plotter.XY{X: float64(r.SeqlenK), Y: r.GFlops * r.Seconds / r.PlainSeconds})
		}
	}
	if len(series) == 0 {
		return fmt.Errorf("-svg %s: no sweep results to draw", path)
	}
	keys := make([]key, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.mode != b.mode {
			return a.mode < b.mode
		}
		if a.d != b.d {
			return a.d < b.d
		}
		if a.causal != b.causal {
			return !a.causal
		}
		return !a.plain && b.plain
	})
	p := plot.New()
	p.Title.Text = "flashattn vs plain attention (GFLOP/s, higher is better)"
	p.X.Label.Text = "sequence length"
	p.Y.Label.Text = "GFLOP/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	for i, k := range keys {
		line, points, err := plotter.NewLinePoints(series[k])
		if err != nil {
			return fmt.Errorf("-svg %s: %v", path, err)
		}
		line.Color = plotutil.Color(i / 2)
		points.Color = line.Color
		points.Shape = plotutil.Shape(i / 2)
		name := "flashattn"
		if k.plain {
			name = "plain"
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		mask := ""
		if k.causal {
			mask = " causal"
		}
		p.Add(line, points)
		p.Legend.Add(fmt.Sprintf("%s %s d=%d%s", name, k.mode, k.d, mask), line, points)
	}
	if err := p.Save(10*vg.Inch, 7*vg.Inch, path); err != nil {
		return fmt.Errorf("-svg %s: %v", path, err)
	}
	return nil
}
