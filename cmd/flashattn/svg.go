package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/flashattn/flashattn/cmd/flashattn/internal/atomicfile"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// drawSVG draws the paper-style figure: one panel per (head dim, mode),
// GFLOP/s against sequence length, with flashattn and the plain algorithm,
// causal and not: the median of the repetitions, with a bar from the
// minimum to the maximum. The format follows the file name (.svg, else
// .png).
func drawSVG(path string, rs []benchResult) error {
	var dims []int
	var modes []string
	for _, r := range rs {
		if r.Variant != "" || r.Mode == "decode" {
			continue
		}
		if !slices.Contains(dims, r.Headdim) {
			dims = append(dims, r.Headdim)
		}
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
	}
	if len(dims) == 0 {
		return fmt.Errorf("-svg %s: no sweep results to draw", path)
	}
	sort.Ints(dims)
	plots := make([][]*plot.Plot, len(dims))
	for i, d := range dims {
		plots[i] = make([]*plot.Plot, len(modes))
		for j, mode := range modes {
			p, err := panel(rs, d, mode)
			if err != nil {
				return fmt.Errorf("-svg %s: %v", path, err)
			}
			plots[i][j] = p
		}
	}
	return writeFigure(path, plots, benchLayout)
}

var modeTitle = map[string]string{"fwd": "forward", "bwd": "backward", "fwdbwd": "forward + backward"}

// panel is one (head dim, mode) panel: four lines.
func panel(rs []benchResult, d int, mode string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, head dim %d", modeTitle[mode], d)
	for _, r := range rs { // -v-headdim is the same for every case
		if r.Variant == "" && r.Mode == mode && r.Headdim == d && r.dv() != d {
			p.Title.Text += fmt.Sprintf(", V's %d", r.dv())
			break
		}
	}
	p.X.Label.Text = "sequence length"
	p.Y.Label.Text = "GFLOP/s"
	p.X.Scale = plot.LogScale{}
	p.Y.Min = 0
	var ticks []plot.Tick
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	i := 0
	for _, causal := range []bool{false, true} {
		for _, plain := range []bool{false, true} {
			var xy spreadXYs
			for _, r := range rs {
				if r.Variant != "" || r.Mode != mode || r.Headdim != d || r.Causal != causal {
					continue
				}
				g := r.gflops()
				if plain {
					if r.PlainGFlopsMedian == 0 {
						continue
					}
					g = r.plainGFlops()
				}
				xy = append(xy, spreadXY{x: float64(r.SeqlenK), s: g})
				if !plain && !causal {
					ticks = append(ticks, plot.Tick{Value: float64(r.SeqlenK), Label: seqLabel(r.SeqlenK)})
				}
			}
			if len(xy) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, err
			}
			bars, err := plotter.NewYErrorBars(xy)
			if err != nil {
				return nil, err
			}
			line.Color = plotutil.Color(i)
			points.Color, points.Shape = line.Color, plotutil.Shape(i)
			bars.Color = line.Color
			name := "flashattn"
			if plain {
				name = "plain"
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			if causal {
				name += " causal"
			}
			p.Add(line, points, bars)
			p.Legend.Add(name, line, points)
			i++
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p, nil
}

// spreadXY is one point of the figure: a median with its range.
type spreadXY struct {
	x float64
	s spread
}

// spreadXYs are the points of one line, for plotter.NewLinePoints and
// plotter.NewYErrorBars.
type spreadXYs []spreadXY

func (p spreadXYs) Len() int                    { return len(p) }
func (p spreadXYs) XY(i int) (float64, float64) { return p[i].x, p[i].s.Median }
func (p spreadXYs) YError(i int) (float64, float64) {
	return p[i].s.Median - p[i].s.Min, p[i].s.Max - p[i].s.Median
}

func seqLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dk", n/1024)
	}
	return fmt.Sprint(n)
}

// figureLayout is the size of one panel of a figure and the padding around
// and between the panels.
type figureLayout struct {
	w, h  vg.Length
	tiles draw.Tiles // padding only: Rows and Cols come from the grid
}

// benchLayout is the layout of bench's figure.
var benchLayout = figureLayout{w: 4 * vg.Inch, h: 3.2 * vg.Inch, tiles: draw.Tiles{
	PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
	PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}}

// writeFigure lays out a grid of plots, rows of equal length, and writes
// it to path as SVG (for a .svg name) or PNG, through a temporary file and
// a rename.
func writeFigure(path string, grid [][]*plot.Plot, l figureLayout) error {
	rows, cols := len(grid), len(grid[0])
	w, h := vg.Length(cols)*l.w, vg.Length(rows)*l.h
	var canvas vg.CanvasWriterTo
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	tiles := l.tiles
	tiles.Rows, tiles.Cols = rows, cols
	dc := draw.New(canvas)
	for i, row := range plot.Align(grid, tiles, dc) {
		for j, c := range row {
			grid[i][j].Draw(c)
		}
	}
	return writeAtomic(path, canvas)
}

// writeAtomic writes w to path through internal/atomicfile, with the
// -svg flag in its error.
func writeAtomic(path string, w io.WriterTo) error {
	if err := atomicfile.Write(path, w); err != nil {
		return fmt.Errorf("-svg %s: %v", path, err)
	}
	return nil
}
