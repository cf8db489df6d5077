package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figure size in pixels of the PNGs (the SVGs have the same size in points × 4/3).
const (
	FigureWidth  = 960
	FigureHeight = 600
	// figureDPI maps pixels to the plot's lengths: 96 pixels an inch, as a browser draws.
	figureDPI = 96
)

// figure is one figure of a report, drawn once per format onto a canvas of its size.
type figure struct {
	// name is the file name without its extension; the report writes name.png and name.svg.
	name string
	// height in pixels; 0 is FigureHeight.
	height int
	draw   func(dc draw.Canvas)
}

// pixels is n PNG pixels as a plot length.
func pixels(n int) vg.Length { return vg.Length(n) * vg.Inch / figureDPI }

// save writes the figure as out/name.png and out/name.svg.
func (f figure) save(out string) error {
	h := f.height
	if h == 0 {
		h = FigureHeight
	}
	w, hl := pixels(FigureWidth), pixels(h)
	img := vgimg.NewWith(vgimg.UseWH(w, hl), vgimg.UseDPI(figureDPI), vgimg.UseBackgroundColor(color.White))
	f.draw(draw.New(img))
	if err := writeCanvas(filepath.Join(out, f.name+".png"), vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	svg := vgsvg.New(w, hl)
	f.draw(draw.New(svg))
	return writeCanvas(filepath.Join(out, f.name+".svg"), svg)
}

// writeCanvas writes a drawn canvas into path.
func writeCanvas(path string, c io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	_, err = c.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("report: writing %s: %w", path, err)
	}
	return nil
}

// newPlot is a plot with the report's title, axis labels and a grid.
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	return p
}

// single is a figure of one plot.
func single(name string, p *plot.Plot) figure {
	return figure{name: name, draw: func(dc draw.Canvas) { p.Draw(dc) }}
}

// Series is one line of a line chart; Err, when set, is an error bar (± Err[i]) per point.
type Series struct {
	Name string
	X, Y []float64
	Err  []float64
}

// HLine is a dashed horizontal reference line (a target accuracy).
type HLine struct {
	Y     float64
	Label string
}

// lineChart plots the series as lines with points, and the reference lines dashed, over a
// y range of [ymin, ymax] when ymax > ymin.
func lineChart(title, xlabel, ylabel string, series []Series, hlines []HLine, ymin, ymax float64) (*plot.Plot, error) {
	p := newPlot(title, xlabel, ylabel)
	for i, s := range series {
		xys := make(plotter.XYs, 0, len(s.X))
		var errs errPoints
		for j := range s.X {
			if finite(s.X[j]) && finite(s.Y[j]) {
				xys = append(xys, plotter.XY{X: s.X[j], Y: s.Y[j]})
				if j < len(s.Err) && finite(s.Err[j]) && s.Err[j] > 0 {
					errs.XYs = append(errs.XYs, xys[len(xys)-1])
					errs.YErrors = append(errs.YErrors, struct{ Low, High float64 }{s.Err[j], s.Err[j]})
				}
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("report: %s: series %s: %w", title, s.Name, err)
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
		pts.Color, pts.Shape, pts.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(2.5)
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
		if len(errs.XYs) > 0 {
			eb, err := plotter.NewYErrorBars(errs)
			if err != nil {
				return nil, fmt.Errorf("report: %s: series %s: %w", title, s.Name, err)
			}
			eb.Color, eb.Width, eb.CapWidth = plotutil.Color(i), vg.Points(1), vg.Points(5)
			p.Add(eb)
		}
	}
	for i, h := range hlines {
		if !finite(h.Y) {
			continue
		}
		y := h.Y
		fn := plotter.NewFunction(func(float64) float64 { return y })
		fn.Color, fn.Dashes, fn.Width = color.Gray{Y: 90}, plotutil.Dashes(i+1), vg.Points(1)
		p.Add(fn)
		p.Legend.Add(h.Label, fn)
	}
	if ymax > ymin {
		p.Y.Min, p.Y.Max = ymin, ymax
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(8), vg.Points(8)
	return p, nil
}

// bars are grouped bars: one group per label, one bar per series in each group, with error
// bars where a bar is the mean of several runs (err > 0).
type bars struct {
	title, ylabel string
	labels        []string
	series        []string // legend; with one series no legend is drawn
	// mean[s][g] and err[s][g] are series s's bar in group g (NaN: no bar).
	mean, err [][]float64
	// format prints a bar's value above it when there is one series ("%.0f"); "" prints none.
	format string
	// ymax fixes the top of the y axis when > 0 (1 for ratios).
	ymax float64
}

func (b bars) plot() (*plot.Plot, error) {
	p := newPlot(b.title, "", b.ylabel)
	ns, ng := len(b.series), len(b.labels)
	if ns == 0 || ng == 0 {
		return p, nil
	}
	// The plot area is about 85% of the figure's width; the bars of a group fill 80% of
	// its slot, so a bar is that share of the width divided among the bars.
	slot := 0.8 / float64(ns)
	width := pixels(FigureWidth) * 0.85 * vg.Length(slot/float64(ng))
	top := 0.0
	for s := range b.series {
		vals := make(plotter.Values, ng)
		var pts plotter.XYs
		var errs plotter.YErrors
		var labels []string
		for g := range ng {
			m := b.mean[s][g]
			if !finite(m) {
				continue
			}
			vals[g] = m
			top = max(top, m+max(0, b.err[s][g]))
			x := float64(g) + (float64(s)-float64(ns-1)/2)*slot
			if e := b.err[s][g]; finite(e) && e > 1e-9*math.Abs(m) {
				pts = append(pts, plotter.XY{X: x, Y: m})
				errs = append(errs, struct{ Low, High float64 }{e, e})
			}
			if b.format != "" && ns == 1 {
				labels = append(labels, fmt.Sprintf(b.format, m))
			}
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", b.title, err)
		}
		bc.XMin = (float64(s) - float64(ns-1)/2) * slot
		bc.Color, bc.LineStyle.Width = seriesColour(s, ns), 0
		p.Add(bc)
		if ns > 1 {
			p.Legend.Add(b.series[s], bc)
		}
		if len(pts) > 0 {
			eb, err := plotter.NewYErrorBars(errPoints{pts, errs})
			if err != nil {
				return nil, fmt.Errorf("report: %s: %w", b.title, err)
			}
			eb.Width, eb.CapWidth = vg.Points(1.2), vg.Points(6)
			p.Add(eb)
		}
		if len(labels) > 0 {
			var at plotter.XYs
			for g := range ng {
				if finite(b.mean[s][g]) {
					top := b.mean[s][g]
					if e := b.err[s][g]; finite(e) && e > 0 {
						top += e
					}
					at = append(at, plotter.XY{X: float64(g), Y: top})
				}
			}
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: labels})
			if err != nil {
				return nil, fmt.Errorf("report: %s: %w", b.title, err)
			}
			for i := range lb.TextStyle {
				lb.TextStyle[i].XAlign, lb.TextStyle[i].YAlign = draw.XCenter, draw.YBottom
			}
			lb.Offset.Y = vg.Points(2)
			p.Add(lb)
		}
	}
	p.NominalX(b.labels...)
	if ng > 4 {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.Y.Min = 0
	if b.ymax > 0 {
		top = b.ymax
	}
	if ns > 1 && top > 0 {
		// The legend stands in the top right corner: the y axis reaches far enough above
		// the highest bar for the legend's rows to fit over it.
		const rowPx, plotPx = 14, FigureHeight - 90
		frac := min(0.6, float64(rowPx*ns+10)/plotPx)
		top /= 1 - frac
	}
	if top > 0 {
		p.Y.Max = top
	}
	p.Legend.Top = true
	return p, nil
}

// seriesColour is series i of n: the palette of plotutil while it has colours enough, else
// hues spread around the colour wheel, so that no two ranks share a colour.
func seriesColour(i, n int) color.Color {
	if n <= len(plotutil.SoftColors) {
		return plotutil.Color(i)
	}
	h := float64(i) / float64(n) * 6
	x := 1 - math.Abs(math.Mod(h, 2)-1)
	var r, g, b float64
	switch int(h) {
	case 0:
		r, g = 1, x
	case 1:
		r, g = x, 1
	case 2:
		g, b = 1, x
	case 3:
		g, b = x, 1
	case 4:
		r, b = x, 1
	default:
		r, b = 1, x
	}
	const v, lo = 0.85, 0.25 // value and the floor of the weakest channel: soft, not neon
	c := func(f float64) uint8 { return uint8(255 * v * (lo + (1-lo)*f)) }
	return color.RGBA{R: c(r), G: c(g), B: c(b), A: 0xff}
}

// errPoints are the points and the symmetric errors of YErrorBars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// fileSafe maps a label to a file-name fragment.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
