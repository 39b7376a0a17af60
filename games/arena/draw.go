package arena

// canvas is the pixel area of a view (ViewWidth×ViewHeight palette indices).
// Every primitive clips, so callers can draw partly off-screen.
type canvas []byte

func (c canvas) set(x, y int, col byte) {
	if uint(x) < ViewWidth && uint(y) < ViewHeight {
		c[y*ViewWidth+x] = col
	}
}

func (c canvas) fillRect(x0, y0, w, h int, col byte) {
	x1, y1 := min(x0+w, ViewWidth), min(y0+h, ViewHeight)
	x0, y0 = max(x0, 0), max(y0, 0)
	for y := y0; y < y1; y++ {
		row := c[y*ViewWidth:]
		for x := x0; x < x1; x++ {
			row[x] = col
		}
	}
}

// line draws a Bresenham line.
func (c canvas) line(x0, y0, x1, y1 int, col byte) {
	dx, dy := x1-x0, y1-y0
	sx, sy := 1, 1
	if dx < 0 {
		dx, sx = -dx, -1
	}
	if dy < 0 {
		dy, sy = -dy, -1
	}
	err := dx - dy
	for {
		c.set(x0, y0, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * err; e2 > -dy {
			err -= dy
			x0 += sx
		} else {
			err += dx
			y0 += sy
		}
	}
}

// text draws s with the 5×7 font at the given integer scale and returns the x
// after it. Multi-byte UTF-8 characters are drawn as one '?'.
func text[S string | []byte](c canvas, x, y int, s S, col byte, scale int) int {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 0x80 && ch < 0xC0 {
			continue // UTF-8 continuation byte
		}
		g := glyph(ch)
		for gy := 0; gy < glyphH; gy++ {
			bits := g[gy]
			for gx := 0; gx < glyphW; gx++ {
				if bits&(0x10>>gx) != 0 {
					c.fillRect(x+gx*scale, y+gy*scale, scale, scale, col)
				}
			}
		}
		x += (glyphW + 1) * scale
	}
	return x
}

// shadowText draws text with a black drop shadow so it reads on any
// background.
func shadowText[S string | []byte](c canvas, x, y int, s S, col byte, scale int) int {
	text(c, x+scale, y+scale, s, 0, scale)
	return text(c, x, y, s, col, scale)
}

// textWidth is the width in pixels of n characters.
func textWidth(n, scale int) int { return n * (glyphW + 1) * scale }

// itoa formats a non-negative n into buf without allocating and returns the
// digits.
func itoa(buf *[12]byte, n int) []byte {
	if n < 0 {
		n = 0
	}
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 || i == 0 {
			return buf[i:]
		}
	}
}

// clock formats seconds as M:SS into buf.
func clock(buf *[12]byte, secs int) []byte {
	secs = max(secs, 0)
	var d [12]byte
	m := itoa(&d, secs/60)
	n := copy(buf[:], m)
	buf[n] = ':'
	buf[n+1] = byte('0' + secs%60/10)
	buf[n+2] = byte('0' + secs%10)
	return buf[:n+3]
}

// runeCount counts characters the way text draws them.
func runeCount[S string | []byte](s S) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < 0x80 || s[i] >= 0xC0 {
			n++
		}
	}
	return n
}
