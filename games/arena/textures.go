package arena

// Textures are 64×64 palette indices, generated at package init from integer
// hashes, so they are identical on every node and cost nothing to ship. They
// are stored column-major (texel (x, y) at x·64+y) because walls are drawn in
// vertical strips.
const (
	texSize = 64
	texMask = texSize - 1
)

type texture [texSize * texSize]byte

var (
	wallTextures = [numTiles]*texture{
		tileBrick: genTexture(brickTexel),
		tileStone: genTexture(stoneTexel),
		tileMetal: genTexture(metalTexel),
		tileWood:  genTexture(woodTexel),
	}
	floorTexture   = genTexture(floorTexel)
	ceilingTexture = genTexture(ceilingTexel)
)

func genTexture(f func(x, y int) byte) *texture {
	var t texture
	for x := 0; x < texSize; x++ {
		for y := 0; y < texSize; y++ {
			t[x*texSize+y] = f(x, y)
		}
	}
	return &t
}

// hash2 is a small integer hash used as deterministic noise.
func hash2(x, y, k int) int {
	h := uint32(x)*0x27d4eb2d ^ uint32(y)*0x165667b1 ^ uint32(k)*0x9e3779b9
	h ^= h >> 15
	h *= 0x85ebca6b
	h ^= h >> 13
	return int(h & 0xffff)
}

// brickTexel: red bricks 32×16 in running bond with grey mortar.
func brickTexel(x, y int) byte {
	row := y / 16
	bx := (x + (row%2)*16) % 64
	if y%16 >= 14 || bx%32 >= 30 {
		return tone(rampGray, 6+hash2(x, y, 1)%2)
	}
	id := row*4 + bx/32
	s := 9 + hash2(id, 0, 2)%3 + hash2(x, y, 3)%3 - 1
	if y%16 == 0 || bx%32 == 0 {
		s += 2 // lit top/left edge
	}
	return tone(rampBrick, s)
}

// stoneTexel: large irregular grey blocks with dark joints and speckles.
func stoneTexel(x, y int) byte {
	row := y / 21
	off := hash2(row, 0, 4) % 32
	bx := (x + off) % 64
	w := 24 + hash2(row, 1, 5)%12
	if y%21 == 20 || y == 63 || bx%w == w-1 {
		return tone(rampStone, 3)
	}
	id := row*8 + bx/w
	s := 8 + hash2(id, 2, 6)%4 + hash2(x, y, 7)%4 - 2
	if hash2(x, y, 8)%23 == 0 {
		s -= 3
	}
	return tone(rampStone, s)
}

// metalTexel: bevelled blue-grey 32×32 panels with rivets and brushed noise.
func metalTexel(x, y int) byte {
	px, py := x%32, y%32
	switch {
	case px == 0 || py == 0:
		return tone(rampMetal, 14)
	case px == 31 || py == 31:
		return tone(rampMetal, 4)
	case (px == 4 || px == 27) && (py == 4 || py == 27):
		return tone(rampMetal, 15)
	case (px == 5 || px == 28) && (py == 5 || py == 28):
		return tone(rampMetal, 5)
	}
	return tone(rampMetal, 9+hash2(0, y, 9)%2+hash2(x, y, 10)%2)
}

// woodTexel: vertical 16-wide planks with grain lines and a few knots.
func woodTexel(x, y int) byte {
	plank := x / 16
	px := x % 16
	if px == 15 {
		return tone(rampWood, 3)
	}
	seed := hash2(plank, 0, 11)
	grain := (px*5 + y/3 + seed) % 11
	s := 9 + seed%3
	if grain < 2 {
		s -= 2
	}
	ky := seed % 48
	if dx, dy := px-7, y-ky-8; dx*dx+dy*dy*2 < 8 {
		s = 5
	}
	return tone(rampWood, s+hash2(x, y, 12)%2)
}

// floorTexel: one 64×64 tile per map cell, stone slabs in four quarters.
func floorTexel(x, y int) byte {
	if x%32 == 0 || y%32 == 0 {
		return tone(rampFloor, 5)
	}
	q := (x/32 + y/32) % 2
	return tone(rampFloor, 10+q+hash2(x, y, 13)%2)
}

// ceilingTexel: panels with a light strip in the middle of each cell.
func ceilingTexel(x, y int) byte {
	if x == 0 || y == 0 {
		return tone(rampCeiling, 4)
	}
	if x >= 28 && x < 36 && y >= 8 && y < 56 {
		return tone(rampGray, 15)
	}
	return tone(rampCeiling, 10+hash2(x, y, 14)%2)
}
