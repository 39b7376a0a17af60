package arena

import "ludus.dev/ludus/sdk"

// First-person raycaster, all in 16.16 fixed point: floor and ceiling are cast
// row by row, walls column by column with a DDA (castRay), then players are
// drawn as billboards clipped against the per-column wall depth (zbuf). It
// draws from a decoded snapshot only (Renderer); the authoritative side uses
// the same camera and sprite geometry to decide which players a snapshot
// includes (visibleFrom in snapshot.go).
const (
	horizon   = ViewHeight / 2
	planeK    = 43254 // |camera plane| = 0.66: a 66° field of view
	minDepth  = one / 64
	minSprite = one / 5        // billboards nearer than this are not drawn
	maxSprite = 4 * ViewHeight // sprites closer than this are clipped anyway
	ySideDim  = 3              // extra shade levels on y-facing walls
	maxLevel  = numShadeLevels - 6
)

// camX[x] is the camera-plane coordinate of column x's centre, in (-1, 1).
var camX = func() (t [ViewWidth]int64) {
	for x := range t {
		t[x] = int64(2*x+1-ViewWidth) * one / ViewWidth
	}
	return t
}()

// shadeLevel maps a depth to a colormap: two levels darker per cell.
func shadeLevel(depth int64) int { return int(min(depth>>15, maxLevel)) }

// camera is a player's eye: position, facing and the camera plane (to the
// right of the facing, scaled by planeK).
type camera struct {
	px, py     sdk.Fixed
	dirX, dirY int64
	plX, plY   int64
}

func newCamera(x, y sdk.Fixed, angle sdk.Angle) camera {
	dx, dy := int64(sdk.Cos(angle)), int64(sdk.Sin(angle))
	return camera{px: x, py: y, dirX: dx, dirY: dy, plX: -dy * planeK >> 16, plY: dx * planeK >> 16}
}

// ray returns the direction of screen column x's ray (dir + plane·camX[x]).
func (cam *camera) ray(x int) (rdx, rdy int64) {
	return cam.dirX + cam.plX*camX[x]>>16, cam.dirY + cam.plY*camX[x]>>16
}

// depthOf is the depth of a point along the view axis, or 0 when the point is
// too near or behind the camera to be drawn as a billboard.
func (cam *camera) depthOf(x, y sdk.Fixed) int64 {
	rx, ry := int64(x-cam.px), int64(y-cam.py)
	depth := (rx*cam.dirX + ry*cam.dirY) >> 16
	if depth < minSprite {
		return 0
	}
	return depth
}

// billboard is where a sprite at depth lands on screen: its size, top-left
// corner and the screen columns [x0, x1) it covers.
type billboard struct {
	size, startX, startY int64
	x0, x1               int64
}

// billboardAt places the sprite of a player at (x, y), whose depth is depth
// (from depthOf, non-zero). ok is false when it covers no column.
func (cam *camera) billboardAt(x, y sdk.Fixed, depth int64) (b billboard, ok bool) {
	rx, ry := int64(x-cam.px), int64(y-cam.py)
	lateral := (ry*cam.dirX - rx*cam.dirY) >> 16 // distance to the right of the view axis
	screenX := ViewWidth/2 + (ViewWidth/2)*lateral*one/(depth*planeK)
	b.size = min(int64(ViewHeight)*one/depth, maxSprite)
	if b.size <= 0 {
		return b, false
	}
	b.startX = screenX - b.size/2
	b.startY = int64(horizon) - b.size/2
	b.x0, b.x1 = max(b.startX, 0), min(b.startX+b.size, ViewWidth)
	return b, b.x0 < b.x1
}

func (r *Renderer) renderPlayer(c canvas) {
	s := &r.s
	cam := newCamera(s.x, s.y, s.angle)
	r.drawWalls(c, &cam)
	r.drawFloorCeiling(c, &cam)
	r.drawPlayers(c, &cam)
	r.drawHUD(c)
}

// drawFloorCeiling casts each floor row to the map plane; the ceiling row
// mirrored about the horizon sees the same map point, so both share the maths.
// It runs after drawWalls and fills only the pixels above and below the walls.
func (r *Renderer) drawFloorCeiling(c canvas, cam *camera) {
	// Fractions carry 24 bits here so that stepping across 320 columns does not
	// drift visibly.
	r0x := cam.dirX + cam.plX*camX[0]>>16
	r0y := cam.dirY + cam.plY*camX[0]>>16
	for y := horizon + 1; y < ViewHeight; y++ {
		rowDist := int64(horizon) * one / int64(y-horizon)
		cm := &colormaps[shadeLevel(rowDist)]
		fx := int64(cam.px)<<8 + rowDist*r0x>>8
		fy := int64(cam.py)<<8 + rowDist*r0y>>8
		sx := (rowDist * 2 * cam.plX >> 8) / ViewWidth
		sy := (rowDist * 2 * cam.plY >> 8) / ViewWidth
		// Array pointers and masked offsets let the compiler drop bounds checks
		// in this, the hottest loop of the renderer.
		floor := (*[ViewWidth]byte)(c[y*ViewWidth:])
		ceil := (*[ViewWidth]byte)(c[(ViewHeight-1-y)*ViewWidth:])
		ceilY := ViewHeight - 1 - y
		for x := range floor {
			// Walls are symmetric about the horizon but for a pixel when their
			// height is odd, so test floor and ceiling separately.
			f, cl := y >= int(r.wallBot[x]), ceilY < int(r.wallTop[x])
			if f || cl {
				off := (int(fx>>12)&(texMask<<6) | int(fy>>18)&texMask) & (texSize*texSize - 1)
				if f {
					floor[x] = cm[floorTexture[off]]
				}
				if cl {
					ceil[x] = cm[ceilingTexture[off]]
				}
			}
			fx += sx
			fy += sy
		}
	}
	// The two rows at the horizon look infinitely far: darkest floor colour.
	// (Walls hide them in this map; this matters only for open maps.)
	dark := colormaps[maxLevel][tone(rampFloor, 8)]
	for y := horizon - 1; y <= horizon; y++ {
		for x := 0; x < ViewWidth; x++ {
			if y < int(r.wallTop[x]) || y >= int(r.wallBot[x]) {
				c[y*ViewWidth+x] = dark
			}
		}
	}
}

// drawWalls casts one ray per column and draws the textured wall strip,
// recording its depth for sprite clipping.
func (r *Renderer) drawWalls(c canvas, cam *camera) {
	for x := 0; x < ViewWidth; x++ {
		rdx, rdy := cam.ray(x)
		t, ySide, tile := castRay(cam.px, cam.py, rdx, rdy)
		t = max(t, minDepth)
		r.zbuf[x] = t

		// Where along the wall the ray hit picks the texture column; flip it on
		// two of the four faces so textures are not mirrored.
		var wallPos int64
		if ySide {
			wallPos = int64(cam.px) + t*rdx>>16
		} else {
			wallPos = int64(cam.py) + t*rdy>>16
		}
		texX := int(wallPos>>10) & texMask
		if (!ySide && rdx > 0) || (ySide && rdy < 0) {
			texX = texMask - texX
		}
		level := shadeLevel(t)
		if ySide {
			level = min(level+ySideDim, numShadeLevels-1)
		}
		cm := &colormaps[level]
		col := (*[texSize]byte)(wallTextures[tile][texX*texSize:])

		lineH := int(int64(ViewHeight) * one / t)
		start := horizon - lineH/2
		step := int(int64(texSize) * one / int64(max(lineH, 1)))
		y0, y1 := max(start, 0), min(start+lineH, ViewHeight)
		r.wallTop[x], r.wallBot[x] = int16(y0), int16(y1)
		texPos := (y0 - start) * step
		for i := y0*ViewWidth + x; i < y1*ViewWidth; i += ViewWidth {
			c[i] = cm[col[texPos>>16&texMask]]
			texPos += step
		}
	}
}

// drawPlayers draws every other player in the snapshot as a billboard, far
// to near, each column hidden where a wall is closer.
func (r *Renderer) drawPlayers(c canvas, cam *camera) {
	n := 0
	for j := range r.s.ents {
		q := &r.s.ents[j]
		if !q.on {
			continue
		}
		depth := cam.depthOf(q.x, q.y)
		if depth == 0 {
			continue
		}
		// Insertion sort by depth, farthest first; equal depths keep slot
		// order, so the result is deterministic.
		k := n
		for k > 0 && r.depths[k-1] < depth {
			r.depths[k], r.order[k] = r.depths[k-1], r.order[k-1]
			k--
		}
		r.depths[k], r.order[k] = depth, j
		n++
	}
	for k := 0; k < n; k++ {
		r.drawSprite(c, cam, r.order[k], r.depths[k])
	}
}

func (r *Renderer) drawSprite(c canvas, cam *camera, j int, depth int64) {
	q := &r.s.ents[j]
	b, ok := cam.billboardAt(q.x, q.y, depth)
	if !ok {
		return
	}
	img := standingSprite
	if !q.alive {
		img = deadSprite
	}
	ramp := byte(playerRamp(j) * 16)
	cm := &colormaps[shadeLevel(depth)]

	step := int64(texSize) * one / b.size
	y0, y1 := max(b.startY, 0), min(b.startY+b.size, ViewHeight)
	for x := b.x0; x < b.x1; x++ {
		if depth >= r.zbuf[x] {
			continue
		}
		texX := int((x-b.startX)*step>>16) & texMask
		col := img[texX*texSize : (texX+1)*texSize]
		texPos := (y0 - b.startY) * step
		for y := y0; y < y1; y++ {
			v := col[int(texPos>>16)&texMask]
			texPos += step
			if v == 0 {
				continue
			}
			idx := ramp | v
			if v&spriteLiteral != 0 {
				idx = v &^ spriteLiteral
			}
			c[int(y)*ViewWidth+int(x)] = cm[idx]
		}
	}
}
