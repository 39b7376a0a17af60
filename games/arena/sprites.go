package arena

// Player sprites are 64×64, column-major like textures. A texel is 0 for
// transparent, 1..15 for a shade of the player's own ramp (so one image serves
// every slot colour), or spriteLiteral|index for a fixed palette colour.
const spriteLiteral = 0x80

var (
	standingSprite = genTexture(standingTexel)
	deadSprite     = genTexture(deadTexel)
)

// standingTexel draws a helmeted soldier holding a gun, facing the viewer.
func standingTexel(x, y int) byte {
	switch {
	case inEllipse(x, y, 32, 15, 7, 7): // helmet
		if y >= 13 && y <= 16 && x >= 27 && x <= 37 {
			return spriteLiteral | tone(rampGray, 2) // visor
		}
		return byte(12 + shadeAcross(x, 25, 39))
	case y >= 22 && y <= 44 && x >= 22 && x <= 41: // torso
		if y == 38 || y == 39 {
			return spriteLiteral | tone(rampGray, 4) // belt
		}
		return byte(9 + shadeAcross(x, 22, 41))
	case y >= 24 && y <= 40 && (x >= 18 && x <= 21 || x >= 42 && x <= 45): // arms
		return 8
	case y >= 31 && y <= 34 && x >= 38 && x <= 54: // gun
		return spriteLiteral | tone(rampGray, 5+(y-31))
	case y >= 45 && y <= 62 && (x >= 24 && x <= 30 || x >= 33 && x <= 39): // legs
		return byte(6 + shadeAcross(x, 24, 39))
	case y == 63 && (x >= 23 && x <= 31 || x >= 32 && x <= 40): // boots
		return spriteLiteral | tone(rampGray, 3)
	}
	return 0
}

// deadTexel draws a body lying in a pool of blood.
func deadTexel(x, y int) byte {
	switch {
	case inEllipse(x, y, 18, 57, 6, 4): // helmet
		return 11
	case inEllipse(x, y, 36, 58, 16, 4): // body
		return byte(7 + shadeAcross(y, 54, 62))
	case inEllipse(x, y, 32, 61, 26, 3): // blood
		return spriteLiteral | tone(rampPlayer0, 5+hash2(x, y, 15)%2)
	}
	return 0
}

func inEllipse(x, y, cx, cy, rx, ry int) bool {
	dx, dy := x-cx, y-cy
	return dx*dx*ry*ry+dy*dy*rx*rx <= rx*rx*ry*ry
}

// shadeAcross gives a rounded look: brighter in the middle of [lo, hi].
func shadeAcross(v, lo, hi int) int {
	mid := (lo + hi) / 2
	d := v - mid
	if d < 0 {
		d = -d
	}
	return 2 - d*4/(hi-lo+1)
}
