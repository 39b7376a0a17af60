package arena

import "ludus.dev/ludus/internal/font5x7"

// The arena writes with the 5×7 bitmap font of package font5x7.
const (
	glyphW = font5x7.W
	glyphH = font5x7.H
)

// glyph returns the bitmap for byte c (UTF-8 continuation bytes of a name are
// skipped by the caller).
func glyph(c byte) *[glyphH]byte { return font5x7.Glyph(c) }
