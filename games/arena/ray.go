package arena

import "ludus.dev/ludus/sdk"

// Fixed-point constants for 64-bit intermediate maths (16.16).
const (
	one      = int64(sdk.FixedOne)
	farDelta = int64(1) << 40 // "never" for rays parallel to an axis
	maxSteps = 2 * (mapW + mapH)
)

// castRay walks the grid (DDA) from (px, py) along the direction (rdx, rdy),
// all 16.16, and returns t, the 16.16 multiple of the direction at which the
// first wall is hit, whether a y-facing side was hit, and the wall's tile.
//
// The direction need not be normalised: with a unit vector t is a distance;
// with the camera's dir+plane·x it is the perpendicular (fish-eye free) depth;
// with the vector to a target, t > 1.0 means the target is in sight.
func castRay(px, py sdk.Fixed, rdx, rdy int64) (t int64, ySide bool, tile byte) {
	return castRayUntil(px, py, rdx, rdy, farLimit)
}

// farLimit is a limit for castRayUntil that no ray reaches.
const farLimit = int64(1) << 62

// castRayUntil is castRay that gives up as soon as the ray has gone farther
// than limit without hitting a wall: it then returns a t > limit and tileOpen.
// Otherwise (the first wall is at t <= limit) it returns what castRay returns.
// The t of successive grid crossings never decreases, so "castRayUntil(...,
// d) > d" is exactly "castRay(...) > d", computed in fewer steps.
func castRayUntil(px, py sdk.Fixed, rdx, rdy, limit int64) (t int64, ySide bool, tile byte) {
	mx, my := px.Int(), py.Int()
	fx, fy := int64(px.Frac()), int64(py.Frac())

	deltaX, deltaY := farDelta, farDelta
	if rdx != 0 {
		deltaX = (one << 16) / abs64(rdx)
	}
	if rdy != 0 {
		deltaY = (one << 16) / abs64(rdy)
	}
	stepX, stepY := 1, 1
	sideX := (one - fx) * deltaX >> 16
	sideY := (one - fy) * deltaY >> 16
	if rdx < 0 {
		stepX = -1
		sideX = fx * deltaX >> 16
	}
	if rdy < 0 {
		stepY = -1
		sideY = fy * deltaY >> 16
	}

	for range maxSteps {
		if sideX < sideY {
			t = sideX
			sideX += deltaX
			mx += stepX
			ySide = false
		} else {
			t = sideY
			sideY += deltaY
			my += stepY
			ySide = true
		}
		if t > limit {
			return t, ySide, tileOpen
		}
		if tile = tileAt(mx, my); tile != tileOpen {
			return t, ySide, tile
		}
	}
	return t, ySide, tileStone // unreachable with a closed border
}

// lineOfSight reports whether nothing solid lies between two points.
func lineOfSight(ax, ay, bx, by sdk.Fixed) bool {
	t, _, _ := castRay(ax, ay, int64(bx-ax), int64(by-ay))
	return t > one
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
