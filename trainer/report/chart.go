package report

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strconv"
	"strings"
)

// Figure size in pixels.
const (
	FigureWidth  = 960
	FigureHeight = 600
)

// Series is one line of a LineChart.
type Series struct {
	Name string
	X, Y []float64
}

// HLine is a dashed horizontal reference line (a target accuracy).
type HLine struct {
	Y     float64
	Label string
}

// LineChart is lines over a numeric x axis, with a legend naming each series.
type LineChart struct {
	Title, XLabel, YLabel string
	Series                []Series
	HLines                []HLine
	// YMin/YMax clamp the automatic y range when set (for accuracies, [0, 1]).
	YMin, YMax float64
	YClamp     bool
}

// BarChart is grouped bars: one group per Groups entry, one bar per SeriesNames entry in
// each group. Values[g][s] is the bar of series s in group g; NaN leaves a gap.
type BarChart struct {
	Title, YLabel string
	Groups        []string
	SeriesNames   []string // legend; with one series no legend is drawn
	Values        [][]float64
	// Format prints a bar's value above it ("%.0f"); empty prints nothing.
	Format string
	// YMax fixes the top of the y axis when > 0 (1 for ratios).
	YMax float64
}

// axis maps data values onto a pixel range.
type axis struct {
	lo, hi   float64 // data range
	p0, p1   float64 // pixel range (p0 at lo)
	ticks    []float64
	tickStep float64
}

func (a axis) px(v float64) float64 {
	if a.hi == a.lo {
		return a.p0
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// niceStep returns a step of 1, 2, 2.5 or 5 × 10^k giving about n intervals over span.
func niceStep(span float64, n int) float64 {
	if !(span > 0) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag*1.0000001 {
			return m * mag
		}
	}
	return 10 * mag
}

// niceAxis widens [lo, hi] to multiples of a nice step and lists the ticks.
func niceAxis(lo, hi float64, n int, p0, p1 float64) axis {
	if math.IsNaN(lo) || math.IsNaN(hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		lo, hi = 0, 1
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		if lo == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)*0.1, hi+math.Abs(hi)*0.1
		}
	}
	step := niceStep(hi-lo, n)
	lo = math.Floor(lo/step+1e-9) * step
	hi = math.Ceil(hi/step-1e-9) * step
	a := axis{lo: lo, hi: hi, p0: p0, p1: p1, tickStep: step}
	for i := 0; ; i++ {
		v := lo + float64(i)*step
		if v > hi+step*1e-6 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		a.ticks = append(a.ticks, v)
	}
	return a
}

// tickLabel prints v with as many decimals as the step needs.
func tickLabel(v, step float64) string {
	dec := 0
	for s := step; dec < 6 && math.Abs(s-math.Round(s)) > 1e-9*math.Max(1, math.Abs(step)); s *= 10 {
		dec++
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// frame is the plot area of a figure: [x0,x1]×[y0,y1] in pixels.
type frame struct{ x0, y0, x1, y1 int }

// drawFrame draws title, y ticks and grid, the y label and the box; it returns the y axis.
func drawFrame(c *canvas, f frame, title, ylabel string, ylo, yhi float64) axis {
	c.text((f.x0+f.x1)/2, 12, title, 2, alignCenter, colText)
	ya := niceAxis(ylo, yhi, 6, float64(f.y1), float64(f.y0))
	for _, v := range ya.ticks {
		y := int(math.Round(ya.px(v)))
		c.fillRect(f.x0, y, f.x1, y+1, colGrid)
		c.fillRect(f.x0-5, y, f.x0, y+1, colAxis)
		c.text(f.x0-8, y-glyphH/2, tickLabel(v, ya.tickStep), 1, alignRight, colText)
	}
	c.textUp(14, (f.y0+f.y1)/2, ylabel, 1, colText)
	return ya
}

// legendEntry is one line of a legend.
type legendEntry struct {
	name string
	col  color.RGBA
	bar  bool // a filled square instead of a line sample
}

// legendWidth is the pixel width a legend of these names needs.
func legendWidth(entries []legendEntry) int {
	w := 0
	for _, e := range entries {
		w = max(w, textWidth(e.name, 1))
	}
	return w + 44
}

// drawLegend draws entries in a box with its top-left at (x, y).
func drawLegend(c *canvas, x, y int, entries []legendEntry) {
	if len(entries) == 0 {
		return
	}
	w, h := legendWidth(entries), len(entries)*18+8
	c.fillRect(x, y, x+w, y+h, colWhite)
	c.strokeRect(x, y, x+w, y+h, colAxis)
	for i, e := range entries {
		ly := y + 6 + i*18
		if e.bar {
			c.fillRect(x+8, ly+1, x+28, ly+12, e.col)
		} else {
			c.line(float64(x+6), float64(ly+6), float64(x+30), float64(ly+6), 3, 0, e.col)
		}
		c.text(x+36, ly, e.name, 1, alignLeft, colText)
	}
}

// Render draws the chart.
func (lc LineChart) Render(w, h int) *image.RGBA {
	c := newCanvas(w, h)
	entries := make([]legendEntry, len(lc.Series))
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for i, s := range lc.Series {
		entries[i] = legendEntry{name: s.Name, col: palette(i)}
		for j := range min(len(s.X), len(s.Y)) {
			if finiteAll(s.X[j], s.Y[j]) {
				xlo, xhi = math.Min(xlo, s.X[j]), math.Max(xhi, s.X[j])
				ylo, yhi = math.Min(ylo, s.Y[j]), math.Max(yhi, s.Y[j])
			}
		}
	}
	for _, hl := range lc.HLines {
		ylo, yhi = math.Min(ylo, hl.Y), math.Max(yhi, hl.Y)
	}
	if math.IsInf(xlo, 0) {
		xlo, xhi = 0, 1
	}
	xlo = math.Min(xlo, 0)
	if math.IsInf(ylo, 0) {
		ylo, yhi = 0, 1
	}
	if lc.YClamp {
		pad := (yhi - ylo) * 0.05
		ylo, yhi = math.Max(lc.YMin, ylo-pad), math.Min(lc.YMax, yhi+pad)
	}
	lw := legendWidth(entries)
	f := frame{x0: 70, y0: 50, x1: w - lw - 30, y1: h - 60}
	ya := drawFrame(c, f, lc.Title, lc.YLabel, ylo, yhi)
	xa := niceAxis(xlo, xhi, 8, float64(f.x0), float64(f.x1))
	for _, v := range xa.ticks {
		x := int(math.Round(xa.px(v)))
		c.fillRect(x, f.y0, x+1, f.y1, colGrid)
		c.fillRect(x, f.y1, x+1, f.y1+5, colAxis)
		c.text(x, f.y1+8, tickLabel(v, xa.tickStep), 1, alignCenter, colText)
	}
	c.text((f.x0+f.x1)/2, h-24, lc.XLabel, 1, alignCenter, colText)
	c.strokeRect(f.x0, f.y0, f.x1, f.y1, colAxis)
	for _, hl := range lc.HLines {
		y := ya.px(hl.Y)
		c.line(float64(f.x0), y, float64(f.x1), y, 1, 6, colAxis)
		c.text(f.x0+6, int(y)-glyphH-2, hl.Label, 1, alignLeft, colAxis)
	}
	for i, s := range lc.Series {
		col := palette(i)
		var px, py float64
		have := false
		for j := range min(len(s.X), len(s.Y)) {
			if !finiteAll(s.X[j], s.Y[j]) {
				continue
			}
			x, y := xa.px(s.X[j]), ya.px(clamp(s.Y[j], ya.lo, ya.hi))
			if have {
				c.line(px, py, x, y, 2, 0, col)
			}
			c.dot(x, y, 2.5, col)
			px, py, have = x, y, true
		}
	}
	drawLegend(c, f.x1+15, f.y0, entries)
	return c.img
}

// Render draws the chart.
func (bc BarChart) Render(w, h int) *image.RGBA {
	c := newCanvas(w, h)
	nSeries := len(bc.SeriesNames)
	if nSeries == 0 {
		nSeries = 1
	}
	var entries []legendEntry
	if len(bc.SeriesNames) > 1 {
		for i, n := range bc.SeriesNames {
			entries = append(entries, legendEntry{name: n, col: palette(i), bar: true})
		}
	}
	yhi := 0.0
	for _, g := range bc.Values {
		for _, v := range g {
			if finiteAll(v) {
				yhi = math.Max(yhi, v)
			}
		}
	}
	if bc.YMax > 0 {
		yhi = bc.YMax
	} else {
		yhi *= 1.1
	}
	right := 30
	if len(entries) > 0 {
		right += legendWidth(entries)
	}
	f := frame{x0: 80, y0: 50, x1: w - right, y1: h - 40}
	slot := float64(f.x1-f.x0) / float64(max(1, len(bc.Groups)))
	maxLabel := 0
	for _, g := range bc.Groups {
		maxLabel = max(maxLabel, textWidth(g, 1))
	}
	vertical := float64(maxLabel) > slot-6
	if vertical {
		f.y1 = h - 16 - min(maxLabel, h/3)
	}
	ya := drawFrame(c, f, bc.Title, bc.YLabel, 0, yhi)
	barW := slot * 0.8 / float64(nSeries)
	for g, name := range bc.Groups {
		gx := float64(f.x0) + slot*float64(g) + slot*0.1
		for s := range nSeries {
			if g >= len(bc.Values) || s >= len(bc.Values[g]) || !finiteAll(bc.Values[g][s]) {
				continue
			}
			v := bc.Values[g][s]
			x0 := int(math.Round(gx + barW*float64(s)))
			x1 := int(math.Round(gx + barW*float64(s+1)))
			if x1-x0 > 2 {
				x1-- // a gap between neighbouring bars
			}
			y := int(math.Round(ya.px(clamp(v, ya.lo, ya.hi))))
			c.fillRect(x0, y, x1, f.y1, palette(s))
			if bc.Format != "" {
				label := fmt.Sprintf(bc.Format, v)
				if textWidth(label, 1) <= int(barW)+8 || nSeries == 1 {
					c.text((x0+x1)/2, y-glyphH-2, label, 1, alignCenter, colText)
				}
			}
		}
		cx := int(math.Round(float64(f.x0) + slot*(float64(g)+0.5)))
		c.fillRect(cx, f.y1, cx+1, f.y1+5, colAxis)
		if vertical {
			c.textUpFrom(cx-glyphH/2, f.y1+8, truncate(name, (h-4-f.y1-8)/glyphW), colText)
		} else {
			c.text(cx, f.y1+8, name, 1, alignCenter, colText)
		}
	}
	c.strokeRect(f.x0, f.y0, f.x1, f.y1, colAxis)
	drawLegend(c, f.x1+15, f.y0, entries)
	return c.img
}

// truncate shortens s to at most n runes, marking the cut with "~".
func truncate(s string, n int) string {
	r := []rune(s)
	if n < 1 || len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "~"
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

func finiteAll(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// writePNG encodes img into path.
func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	err = png.Encode(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("report: writing %s: %w", path, err)
	}
	return nil
}

// fileSafe maps a label to a file-name fragment.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
