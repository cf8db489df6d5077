package report

import (
	"image"
	"image/color"
	"image/draw"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// canvas is an RGBA image with the few drawing primitives the charts need. Coordinates are
// pixels, y down.
type canvas struct {
	img  *image.RGBA
	face font.Face
}

var (
	colWhite = color.RGBA{255, 255, 255, 255}
	colBlack = color.RGBA{0, 0, 0, 255}
	colGrid  = color.RGBA{225, 225, 225, 255}
	colAxis  = color.RGBA{60, 60, 60, 255}
	colText  = color.RGBA{20, 20, 20, 255}
)

// palette holds well-separated colours for series (runs or ranks), in order.
func palette(i int) color.RGBA {
	p := [...]color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
		{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
		{188, 189, 34, 255}, {23, 190, 207, 255}, {0, 0, 128, 255}, {128, 128, 0, 255},
	}
	return p[i%len(p)]
}

func newCanvas(w, h int) *canvas {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(colWhite), image.Point{}, draw.Src)
	return &canvas{img: img, face: basicfont.Face7x13}
}

const (
	glyphW = 7  // advance of basicfont.Face7x13
	glyphH = 13 // line height of basicfont.Face7x13
	ascent = 11
)

// textWidth is the width in pixels of s at the given integer scale.
func textWidth(s string, scale int) int { return len([]rune(s)) * glyphW * scale }

// fillRect fills [x0,x1)×[y0,y1).
func (c *canvas) fillRect(x0, y0, x1, y1 int, col color.RGBA) {
	if x1 < x0 {
		x0, x1 = x1, x0
	}
	if y1 < y0 {
		y0, y1 = y1, y0
	}
	draw.Draw(c.img, image.Rect(x0, y0, x1, y1).Intersect(c.img.Bounds()), image.NewUniform(col), image.Point{}, draw.Src)
}

// strokeRect draws a one-pixel rectangle outline.
func (c *canvas) strokeRect(x0, y0, x1, y1 int, col color.RGBA) {
	c.fillRect(x0, y0, x1+1, y0+1, col)
	c.fillRect(x0, y1, x1+1, y1+1, col)
	c.fillRect(x0, y0, x0+1, y1+1, col)
	c.fillRect(x1, y0, x1+1, y1+1, col)
}

// line draws a segment of the given width; dash > 0 draws dash pixels on, dash off.
func (c *canvas) line(x0, y0, x1, y1 float64, width float64, dash float64, col color.RGBA) {
	dx, dy := x1-x0, y1-y0
	n := int(math.Ceil(math.Max(math.Abs(dx), math.Abs(dy)) * 2))
	if n == 0 {
		n = 1
	}
	length := math.Hypot(dx, dy)
	r := width / 2
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		if dash > 0 && math.Mod(t*length, 2*dash) >= dash {
			continue
		}
		x, y := x0+t*dx, y0+t*dy
		c.dot(x, y, r, col)
	}
}

// dot fills the pixels within r of (x, y) (at least the pixel containing it).
func (c *canvas) dot(x, y, r float64, col color.RGBA) {
	b := c.img.Bounds()
	for py := int(math.Floor(y - r)); py <= int(math.Floor(y+r)); py++ {
		for px := int(math.Floor(x - r)); px <= int(math.Floor(x+r)); px++ {
			cx, cy := float64(px)+0.5, float64(py)+0.5
			if (cx-x)*(cx-x)+(cy-y)*(cy-y) > r*r+0.25 {
				continue
			}
			if image.Pt(px, py).In(b) {
				c.img.SetRGBA(px, py, col)
			}
		}
	}
}

// textMask renders s in the bitmap font at scale 1 into an alpha mask.
func (c *canvas) textMask(s string) *image.Alpha {
	w := textWidth(s, 1)
	if w == 0 {
		w = 1
	}
	m := image.NewAlpha(image.Rect(0, 0, w, glyphH))
	d := font.Drawer{Dst: m, Src: image.Opaque, Face: c.face, Dot: fixed.P(0, ascent)}
	d.DrawString(s)
	return m
}

// Text alignment relative to the anchor point.
const (
	alignLeft = iota
	alignCenter
	alignRight
)

// text draws s with its top edge at y; x is the left edge, centre or right edge per align.
// scale is an integer magnification of the bitmap font.
func (c *canvas) text(x, y int, s string, scale, align int, col color.RGBA) {
	m := c.textMask(s)
	w := m.Bounds().Dx() * scale
	switch align {
	case alignCenter:
		x -= w / 2
	case alignRight:
		x -= w
	}
	c.blit(m, x, y, scale, false, col)
}

// textUp draws s rotated 90° counter-clockwise (reading bottom to top), its left edge at x,
// centred vertically on y.
func (c *canvas) textUp(x, y int, s string, scale int, col color.RGBA) {
	m := c.textMask(s)
	c.blit(m, x, y-m.Bounds().Dx()*scale/2, scale, true, col)
}

// textUpFrom draws s rotated 90° counter-clockwise with its end (last glyph) at the top y.
func (c *canvas) textUpFrom(x, yTop int, s string, col color.RGBA) {
	m := c.textMask(s)
	c.blit(m, x, yTop, 1, true, col)
}

// blit copies mask m, magnified by scale, with its top-left at (x, y); rotated turns it 90°
// counter-clockwise first.
func (c *canvas) blit(m *image.Alpha, x, y, scale int, rotated bool, col color.RGBA) {
	w, h := m.Bounds().Dx(), m.Bounds().Dy()
	b := c.img.Bounds()
	for my := 0; my < h; my++ {
		for mx := 0; mx < w; mx++ {
			if m.AlphaAt(mx, my).A < 128 {
				continue
			}
			tx, ty := mx, my
			if rotated { // (mx, my) → (my, w-1-mx)
				tx, ty = my, w-1-mx
			}
			for sy := 0; sy < scale; sy++ {
				for sx := 0; sx < scale; sx++ {
					p := image.Pt(x+tx*scale+sx, y+ty*scale+sy)
					if p.In(b) {
						c.img.SetRGBA(p.X, p.Y, col)
					}
				}
			}
		}
	}
}
