package arena

// The palette is 16 ramps of 16 shades: index = ramp·16 + shade, shade 0 the
// darkest. Textures and sprites are drawn in ramps, so darkening with distance
// is a table lookup (colormaps) that keeps the hue, as in Doom's COLORMAP.
const (
	rampGray    = 0
	rampBrick   = 1
	rampWood    = 2
	rampStone   = 3
	rampMetal   = 4
	rampFloor   = 5
	rampCeiling = 6
	rampFire    = 7
	rampPlayer0 = 8 // players use ramps 8..15, one per slot
)

// numShadeLevels is how many distance levels the colormaps have; level L
// scales brightness by (numShadeLevels-L)/numShadeLevels.
const numShadeLevels = 32

var rampBase = [16][3]int{
	rampGray:    {236, 236, 236},
	rampBrick:   {196, 84, 60},
	rampWood:    {176, 124, 72},
	rampStone:   {150, 152, 140},
	rampMetal:   {112, 142, 184},
	rampFloor:   {128, 116, 96},
	rampCeiling: {100, 104, 120},
	rampFire:    {0, 0, 0},       // special-cased below
	8:           {236, 44, 44},   // red
	9:           {60, 100, 250},  // blue
	10:          {52, 210, 68},   // green
	11:          {244, 220, 48},  // yellow
	12:          {48, 224, 224},  // cyan
	13:          {226, 60, 226},  // magenta
	14:          {252, 144, 32},  // orange
	15:          {236, 236, 236}, // white
}

var (
	palette   = buildPalette()
	colormaps = buildColormaps()
	redTint   = buildRedTint()
)

func buildPalette() (p [768]byte) {
	for r := 0; r < 16; r++ {
		for s := 0; s < 16; s++ {
			i := (r*16 + s) * 3
			if r == rampFire {
				// dark red → orange → yellow → white, for flashes and fire.
				p[i] = byte(min(255, 64+s*24))
				p[i+1] = byte(min(255, max(0, s*20-40)))
				p[i+2] = byte(min(255, max(0, s*34-300)))
				continue
			}
			for c := 0; c < 3; c++ {
				p[i+c] = byte(rampBase[r][c] * (s + 1) / 16)
			}
		}
	}
	return p
}

// buildColormaps returns, per distance level, a table from palette index to
// the same hue at reduced brightness.
func buildColormaps() *[numShadeLevels][256]byte {
	var m [numShadeLevels][256]byte
	for l := 0; l < numShadeLevels; l++ {
		for i := 0; i < 256; i++ {
			s := (i & 15) * (numShadeLevels - l) / numShadeLevels
			m[l][i] = byte(i&^15 | s)
		}
	}
	return &m
}

// buildRedTint maps every colour to the red player ramp at the same shade, for
// the "you died" screen.
func buildRedTint() (t [256]byte) {
	for i := range t {
		t[i] = byte(rampPlayer0*16 + (i&15)*3/4)
	}
	return t
}

// tone returns the palette index of shade s (0..15) in ramp r.
func tone(r, s int) byte { return byte(r*16 + min(max(s, 0), 15)) }

// playerRamp is the colour ramp of slot i.
func playerRamp(i int) int { return rampPlayer0 + i }
