package main

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// drawLossCurves draws the training loss of flash and plain against the
// step, and their absolute difference on a log scale.
func drawLossCurves(path string, flash, plain []float64) error {
	curves := plot.New()
	curves.Title.Text = "training loss, same seed"
	curves.X.Label.Text = "step"
	curves.Y.Label.Text = "cross-entropy (nats/byte)"
	curves.Legend.Top = true
	diff := plot.New()
	diff.Title.Text = "|loss flash − loss plain|"
	diff.X.Label.Text = "step"
	diff.Y.Label.Text = "absolute difference"
	diff.Y.Scale = plot.LogScale{}
	diff.Y.Tick.Marker = decades{}
	var d plotter.XYs
	for i := range flash {
		// Identical losses have no logarithm; draw them at the floor.
		d = append(d, plotter.XY{X: float64(i + 1), Y: math.Max(math.Abs(flash[i]-plain[i]), 1e-9)})
	}
	for i, s := range []struct {
		name string
		ys   []float64
	}{{"flashattn", flash}, {"plain", plain}} {
		xy := make(plotter.XYs, len(s.ys))
		for j, y := range s.ys {
			xy[j] = plotter.XY{X: float64(j + 1), Y: y}
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("-svg %s: %v", path, err)
		}
		l.Color = plotutil.Color(i)
		if i == 1 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		curves.Add(l)
		curves.Legend.Add(s.name, l)
	}
	l, err := plotter.NewLine(d)
	if err != nil {
		return fmt.Errorf("-svg %s: %v", path, err)
	}
	l.Color = color.Black
	diff.Add(l)
	return writeFigure(path, [][]*plot.Plot{{curves, diff}}, trainLayout)
}

// drawSweep draws step time and peak memory against context length.
func drawSweep(path string, pts []sweepPoint) error {
	tm, mem := plot.New(), plot.New()
	tm.Title.Text = "training step, same tokens per step"
	tm.Y.Label.Text = "ms per step"
	tm.Y.Scale = plot.LogScale{}
	tm.Y.Tick.Marker = decades{}
	mem.Title.Text = "peak resident memory"
	mem.Y.Label.Text = "MiB"
	var ticks []plot.Tick
	for _, p := range pts {
		if p.Attention == "flash" {
			ticks = append(ticks, plot.Tick{Value: float64(p.Context), Label: seqLabel(p.Context)})
		}
	}
	for _, p := range []*plot.Plot{tm, mem} {
		p.X.Label.Text = "context length"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Legend.Top, p.Legend.Left = true, true
	}
	for i, a := range []string{"flash", "plain"} {
		var t, m plotter.XYs
		for _, p := range pts {
			if p.Attention == a {
				t = append(t, plotter.XY{X: float64(p.Context), Y: p.StepMs})
				m = append(m, plotter.XY{X: float64(p.Context), Y: float64(p.PeakRSS) / (1 << 20)})
			}
		}
		name := map[string]string{"flash": "flashattn", "plain": "plain"}[a]
		for _, pl := range []struct {
			p  *plot.Plot
			xy plotter.XYs
		}{{tm, t}, {mem, m}} {
			l, s, err := plotter.NewLinePoints(pl.xy)
			if err != nil {
				return fmt.Errorf("-svg %s: %v", path, err)
			}
			l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
			if i == 1 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			pl.p.Add(l, s)
			pl.p.Legend.Add(name, l, s)
		}
	}
	mem.Y.Min = 0
	return writeFigure(path, [][]*plot.Plot{{tm, mem}}, trainLayout)
}

// decades marks a log axis at 1, 2 and 5 times the powers of ten,
// labelled like 1e-06, 0.01, 1 or 1000; over more than two decades only
// the powers of ten are labelled.
type decades struct{}

// Ticks implements plot.Ticker.
func (decades) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for _, m := range []float64{1, 2, 5} {
			v := m * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			switch {
			case m != 1 && hi > 100*lo: // many decades: label only their starts
			case v >= 1e-3 && v < 1e6:
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			default:
				t.Label = strconv.FormatFloat(v, 'e', 0, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// trainLayout is the layout of train's figures: larger panels, further
// apart, than bench's.
var trainLayout = figureLayout{w: 4.5 * vg.Inch, h: 3.4 * vg.Inch, tiles: draw.Tiles{
	PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4,
	PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}}
