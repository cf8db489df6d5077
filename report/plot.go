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

// single is a figure of one plot, its legend beside the plot area (legendOutside).
func single(name string, p *plot.Plot) figure {
	return figure{name: name, draw: legendOutside(p)}
}

// legendOutside draws p with its legend in a column right of the plot area, top-aligned:
// inside the area, a legend covers whatever data lies under it (the top of a bar, the end of
// a curve), and no corner is empty in every figure. A plot without legend entries draws
// over the whole canvas.
func legendOutside(p *plot.Plot) func(dc draw.Canvas) {
	return func(dc draw.Canvas) {
		r := p.Legend.Rectangle(dc)
		w := r.Max.X - r.Min.X
		if w <= 0 {
			p.Draw(dc)
			return
		}
		pad := vg.Points(10)
		// Legend.Draw places the legend against the plot area's right edge, plus XOffs.
		p.Legend.Top, p.Legend.Left = true, false
		p.Legend.XOffs, p.Legend.YOffs = w+pad, 0
		p.Draw(draw.Crop(dc, 0, -(w + 2*pad), 0, 0))
	}
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
	return p, nil
}

// yRange is the y range of a chart of the series and reference lines within [lo, hi]: their
// values (error bars included) with a margin of 5% of their span on each side, so that data
// sitting in 0.66–0.87 fill the figure instead of a fifth of a 0–1 axis. ok is false when
// there is no finite value.
func yRange(series []Series, hlines []HLine, lo, hi float64) (ymin, ymax float64, ok bool) {
	ymin, ymax = math.Inf(1), math.Inf(-1)
	see := func(y, e float64) {
		if finite(y) {
			if !finite(e) || e < 0 {
				e = 0
			}
			ymin, ymax = min(ymin, y-e), max(ymax, y+e)
		}
	}
	for _, s := range series {
		for j := range s.Y {
			if j < len(s.X) && finite(s.X[j]) {
				e := 0.0
				if j < len(s.Err) {
					e = s.Err[j]
				}
				see(s.Y[j], e)
			}
		}
	}
	for _, h := range hlines {
		see(h.Y, 0)
	}
	if ymin > ymax {
		return 0, 0, false
	}
	margin := max(0.05*(ymax-ymin), 0.01)
	return max(lo, ymin-margin), min(hi, ymax+margin), true
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

// barsFill is the share of a group's slot (one x unit) its bars fill together.
const barsFill = 0.8

// plot draws the bars; draw draws the plot onto a canvas, sizing the bars to it.
func (b bars) plot() (p *plot.Plot, drawOn func(draw.Canvas), err error) {
	p = newPlot(b.title, "", b.ylabel)
	ns, ng := len(b.series), len(b.labels)
	if ns == 0 || ng == 0 {
		return p, p.Draw, nil
	}
	slot := barsFill / float64(ns)
	// A bar's width is a length, not an x span: sized once the plot area is known (below).
	width := vg.Points(1)
	var charts []*plotter.BarChart
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
			return nil, nil, fmt.Errorf("report: %s: %w", b.title, err)
		}
		bc.XMin = (float64(s) - float64(ns-1)/2) * slot
		bc.Color, bc.LineStyle.Width = seriesColour(s, ns), 0
		charts = append(charts, bc)
		p.Add(bc)
		if ns > 1 {
			p.Legend.Add(b.series[s], bc)
		}
		if len(pts) > 0 {
			eb, err := plotter.NewYErrorBars(errPoints{pts, errs})
			if err != nil {
				return nil, nil, fmt.Errorf("report: %s: %w", b.title, err)
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
				return nil, nil, fmt.Errorf("report: %s: %w", b.title, err)
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
	// Every group has its whole slot, the first and the last included: the x range is fixed
	// rather than taken from the bars' centres, which would leave the outer bars half
	// outside the plot area.
	p.X.Min, p.X.Max = -0.5, float64(ng)-0.5
	p.Y.Min = 0
	if b.ymax > 0 {
		top = b.ymax
	}
	if top > 0 {
		// room above the highest bar for its value label
		p.Y.Max = top * 1.06
	}
	withLegend := legendOutside(p)
	return p, func(dc draw.Canvas) {
		// The plot area is the canvas less the axes and the legend column: one x unit of it
		// is a group's slot, of which each bar takes its share.
		area := p.DataCanvas(dc)
		if r := p.Legend.Rectangle(dc); r.Max.X > r.Min.X {
			area.Max.X -= r.Max.X - r.Min.X + vg.Points(20)
		}
		w := (area.Max.X - area.Min.X) * vg.Length(slot/float64(ng))
		for _, bc := range charts {
			bc.Width = max(w, vg.Points(1))
		}
		withLegend(dc)
	}, nil
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
