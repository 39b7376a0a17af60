package batch

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"ludus.dev/ludus/internal/font5x7"
)

// Chart writes a PNG bar chart of win rates (Summary.BySide, or ByMap): one
// bar per side with its 95 % Wilson interval as a whisker, labelled with the
// side (and map) under it and the rate above; the axis runs from 0 to 100 %,
// with a grid line every 10 %. Standard library only (image/png), with a 5×7
// bitmap font.
func Chart(w io.Writer, title string, rates []WinRate) error {
	const (
		barW, gap, left, right, top, bottom = 36, 18, 44, 16, 40, 46
		plotH                               = 300
	)
	n := max(len(rates), 1)
	width := left + right + n*barW + (n+1)*gap
	width = max(width, left+right+6*len(title)+20)
	height := top + plotH + bottom
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	grid, axis := color.RGBA{225, 225, 225, 255}, color.RGBA{60, 60, 60, 255}
	bar, whisker := color.RGBA{70, 120, 190, 255}, color.RGBA{200, 60, 40, 255}
	y := func(v float64) int { return top + plotH - int(v*plotH+0.5) }
	for i := 0; i <= 10; i++ {
		yy := y(float64(i) / 10)
		fill(img, image.Rect(left, yy, width-right, yy+1), grid)
		text(img, left-6*len(fmt.Sprint(i*10))-8, yy-3, fmt.Sprint(i*10), axis)
	}
	text(img, left-6*3-8, top-16, "WIN %", axis)
	text(img, left, 10, title, axis)
	fill(img, image.Rect(left, top, left+1, top+plotH+1), axis)
	fill(img, image.Rect(left, top+plotH, width-right, top+plotH+1), axis)
	for i, r := range rates {
		x := left + gap + i*(barW+gap)
		fill(img, image.Rect(x, y(r.Rate), x+barW, top+plotH), bar)
		cx := x + barW/2
		lo, hi := y(r.Lo), y(r.Hi)
		fill(img, image.Rect(cx, hi, cx+1, lo+1), whisker)
		fill(img, image.Rect(cx-6, hi, cx+7, hi+1), whisker)
		fill(img, image.Rect(cx-6, lo, cx+7, lo+1), whisker)
		label := fmt.Sprint(r.Side)
		if r.Side < 0 {
			label = "NONE"
		}
		text(img, cx-3*len(label), top+plotH+8, label, axis)
		if r.Map != "" {
			m := r.Map
			if len(m) > 7 {
				m = m[:7]
			}
			text(img, cx-3*len(m), top+plotH+20, m, axis)
		}
		pct := fmt.Sprintf("%.0f", 100*r.Rate)
		text(img, cx-3*len(pct), min(hi, y(r.Rate))-10, pct, axis)
	}
	text(img, left, height-12, "SIDE = WINNING SLOT. WHISKERS: 95% WILSON INTERVAL", axis)
	return png.Encode(w, img)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// text draws s with the 5×7 font, 6 pixels a character.
func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			continue
		}
		g := font5x7.Glyph(s[i])
		for row := 0; row < font5x7.H; row++ {
			for col := 0; col < font5x7.W; col++ {
				if g[row]&(0x10>>col) != 0 {
					if p := image.Pt(x+6*i+col, y+row); p.In(img.Bounds()) {
						img.SetRGBA(p.X, p.Y, c)
					}
				}
			}
		}
	}
}
